"""Frozen data models that cross boundaries: units, nodes, seam inputs, tool results, reports.

Python attributes are snake_case; :meth:`wire` gives the camelCase JSON shape the tools speak
(``contentHash``, ``semHash``, ``nodeId``...), omitting empty optional fields like the reference.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from picocontext.distill.ids import (
    KIND_SCOPE,
    LEVEL_ENTITY,
    ROOT_ID,
    is_intermediate,
    l0_id,
    scope_id,
)

_FROZEN = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Unit(BaseModel):
    """One distillable source unit (a conversation turn, a document section).

    ``scopes`` are (name, value) pairs in declared order; blank values mean "not in that scope".
    ``text`` is the raw, pre-guard source; a blank text deletes the leaf (fix J).
    """

    model_config = _FROZEN

    source_kind: str = Field(min_length=1, pattern=r"^[^:#\s]+$")
    unit_id: str = Field(min_length=1)
    text: str
    scopes: tuple[tuple[str, str], ...] = ()
    budget: int | None = Field(default=None, gt=0)
    title: str = ""

    @property
    def node_id(self) -> str:
        return l0_id(self.source_kind, self.unit_id)

    @property
    def scope_ids(self) -> tuple[str, ...]:
        seen: list[str] = []
        for name, value in self.scopes:
            if value.strip():
                sid = scope_id(name, value.strip())
                if sid not in seen:
                    seen.append(sid)
        return tuple(seen)


class DigestNode(BaseModel):
    """One row of the digest tree (spec §4.3 plus ``membership_hash`` and ``source_hash``).

    ``membership_hash`` is what ContentHash leaves out: a leaf's scope links and title (fix C),
    or an internal node's summary-input hash (its ordered children's ids, kinds, content and
    summary hashes), which short-circuit #2 must also match before reusing the summary."""

    model_config = _FROZEN

    id: str
    level: int
    kind: str
    scope_name: str = ""
    scope_id: str = ""
    source_id: str = ""
    source_kind: str = ""
    summary_hash: str = ""
    content_hash: str = ""
    sem_hash: str = ""
    membership_hash: str = ""
    source_hash: str = ""
    child_ids: tuple[str, ...] = ()
    parent_ids: tuple[str, ...] = ()
    updated_at: int = 0
    tokens: int = 0
    title: str = ""

    @property
    def is_intermediate(self) -> bool:
        return is_intermediate(self.id)

    @property
    def is_root(self) -> bool:
        return self.id == ROOT_ID

    @property
    def is_pending(self) -> bool:
        """A view whose summary is deferred: exact ContentHash, no summary or SemHash yet."""
        return self.level > LEVEL_ENTITY and not self.summary_hash

    def table_key(self) -> tuple[Any, ...]:
        """What a rebuild must reproduce byte for byte (P7): no timestamps."""
        return (
            self.id,
            self.level,
            self.kind,
            self.content_hash,
            self.summary_hash,
            self.sem_hash,
            tuple(sorted(self.child_ids)),
            tuple(sorted(self.parent_ids)),
            self.tokens,
        )


class ScopeRef(BaseModel):
    model_config = _FROZEN
    name: str = ""
    id: str = ""


class ChildDigest(BaseModel):
    model_config = _FROZEN
    id: str
    kind: str
    summary: str


class SummaryInput(BaseModel):
    """What a summarizer sees: ``raw`` (guarded) for L0, ``children`` for internal nodes."""

    model_config = _FROZEN

    level: int
    kind: str
    scope: ScopeRef = ScopeRef()
    children: tuple[ChildDigest, ...] = ()
    raw: str = ""
    budget: int = 256


class GuardStage(StrEnum):
    INGEST = "ingest"
    EMIT = "emit"


class GuardInput(BaseModel):
    model_config = _FROZEN
    stage: GuardStage
    corpus: str = ""
    scope: ScopeRef = ScopeRef()
    level: int = 0
    text: str


class GuardResult(BaseModel):
    """``blocked`` drops the node (it keeps its previous hashes); empty ``text`` means keep."""

    model_config = _FROZEN
    text: str = ""
    blocked: bool = False
    reason: str = ""


# -- agent surface -----------------------------------------------------------------------


class MapLine(BaseModel):
    model_config = _FROZEN

    id: str
    level: int
    kind: str
    scope: str = ""
    content_hash: str = ""
    sem_hash: str = ""
    unchanged: bool = False
    summary: str = ""
    pending: bool = False

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "level": self.level, "kind": self.kind}
        if self.scope:
            out["scope"] = self.scope
        out["contentHash"] = self.content_hash
        out["semHash"] = self.sem_hash
        if self.unchanged:
            out["unchanged"] = True
        if self.pending:
            out["pending"] = True
        if self.summary:
            out["summary"] = self.summary
        return out


class MapResult(BaseModel):
    """Map lines plus what a diff needs: ids known to the caller that no longer exist, and how
    many lines ``prune_unchanged`` omitted (so omission is never mistaken for deletion)."""

    model_config = _FROZEN

    root_id: str = ROOT_ID
    lines: tuple[MapLine, ...] = ()
    deleted: tuple[str, ...] = ()
    omitted: int = 0

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rootId": self.root_id, "lines": [x.wire() for x in self.lines]}
        if self.deleted:
            out["deleted"] = list(self.deleted)
        if self.omitted:
            out["omitted"] = self.omitted
        return out

    @property
    def changed(self) -> tuple[MapLine, ...]:
        return tuple(x for x in self.lines if not x.unchanged)


class DigestChild(BaseModel):
    model_config = _FROZEN
    id: str
    kind: str
    summary: str = ""
    content_hash: str = ""
    sem_hash: str = ""

    def wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "summary": self.summary,
            "contentHash": self.content_hash,
            "semHash": self.sem_hash,
        }


class DigestView(BaseModel):
    model_config = _FROZEN
    node: MapLine
    summary: str = ""
    tokens: int = 0
    children: tuple[DigestChild, ...] = ()

    def wire(self) -> dict[str, Any]:
        return {
            "node": self.node.wire(),
            "summary": self.summary,
            "tokens": self.tokens,
            "children": [c.wire() for c in self.children],
        }


class ResolveMatch(BaseModel):
    model_config = _FROZEN
    node: MapLine
    hamming_bits: int

    def wire(self) -> dict[str, Any]:
        return {"node": self.node.wire(), "hammingBits": self.hamming_bits}


class ResolveResult(BaseModel):
    """``exact``: the node whose ContentHash equals the input (first by level, id; other exact
    matches, e.g. deduplicated leaves, are listed in ``also_exact``). ``near``: SemHash
    neighbours within 8 bits, only when the input is a 16-hex SemHash."""

    model_config = _FROZEN
    exact: MapLine | None = None
    also_exact: tuple[str, ...] = ()
    near: tuple[ResolveMatch, ...] = ()

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.exact is not None:
            out["exact"] = self.exact.wire()
        if self.also_exact:
            out["alsoExact"] = list(self.also_exact)
        if self.near:
            out["near"] = [m.wire() for m in self.near]
        return out


class Altitude(IntEnum):
    """Recall altitude; the integers are the reference's wire values."""

    AUTO = 0
    ENTITY = 1
    SCOPE = 2
    TENANT = 3


class RecallItem(BaseModel):
    model_config = _FROZEN
    node_id: str
    level: int
    kind: str
    is_digest: bool
    text: str
    tokens: int
    score: float

    def wire(self) -> dict[str, Any]:
        return {
            "nodeId": self.node_id,
            "level": self.level,
            "kind": self.kind,
            "digest": self.is_digest,
            "text": self.text,
            "tokens": self.tokens,
        }


class RecallPack(BaseModel):
    model_config = _FROZEN
    requested: Altitude
    altitude: Altitude
    items: tuple[RecallItem, ...] = ()
    tokens: int = 0
    omitted: int = 0
    budget: int = 0

    def wire(self) -> dict[str, Any]:
        return {
            "altitude": self.altitude.name.lower(),
            "tokens": self.tokens,
            "budget": self.budget,
            "omitted": self.omitted,
            "items": [i.wire() for i in self.items],
        }


# -- reports ------------------------------------------------------------------------------


class RollupReport(BaseModel):
    model_config = _FROZEN
    scope_nodes: int = 0
    cluster_nodes: int = 0
    tenant_rolled: bool = False
    short_circuits: int = 0
    deleted: int = 0


class SweepReport(BaseModel):
    model_config = _FROZEN
    processed: int = 0
    failures: int = 0
    errors: tuple[str, ...] = ()
    rollup: RollupReport | None = None
    seconds: float = 0.0


class SyncReport(BaseModel):
    """A reconcile of a source against the tree: what was marked and what the sweep did."""

    model_config = _FROZEN
    units: int = 0
    unchanged: int = 0
    marked: int = 0
    deletes: int = 0
    sweep: SweepReport = SweepReport()
    # Items of the source that were not read (``path: reason``): unreadable, not UTF-8, too
    # large, or outside the source folder. Their units are not in the tree.
    skipped: tuple[str, ...] = ()


class DigestSnapshot(BaseModel):
    """Everything a viewer needs to render the tree: nodes, their summaries, the root id."""

    model_config = _FROZEN
    root_id: str = ROOT_ID
    nodes: tuple[DigestNode, ...] = ()
    summaries: dict[str, str] = Field(default_factory=dict)

    def node(self, node_id: str) -> DigestNode | None:
        for n in self.nodes:
            if n.id == node_id:
                return n
        return None

    def known_hashes(self) -> dict[str, str]:
        """The id -> ContentHash snapshot an agent remembers to ask "what changed since"."""
        return {n.id: n.content_hash for n in self.nodes}


def label_of(node: DigestNode) -> str:
    """A short human label: the unit title, ``name: value`` for scopes, the prefix for
    clusters, ``#prefix`` for intermediates (the full id stays in tooltips and details)."""
    if node.id == ROOT_ID:
        return "root"
    if node.is_intermediate:
        return "#" + node.id.rsplit("#", 1)[1].rstrip("0")[:8] + "…"
    if node.kind == KIND_SCOPE and node.scope_id:
        return f"{node.scope_name}: {node.scope_id}"
    if node.id.startswith("digest:1:cluster:"):
        prefix, bits = node.id.split(":")[3:5]
        return f"cluster {prefix[: max(1, (int(bits) + 3) // 4)]}/{bits}"
    if node.level == 1:
        return node.id.removeprefix("digest:1:")
    return node.title or node.source_id or node.id
