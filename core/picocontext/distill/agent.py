"""The agent surface: ``map``, ``digest``, ``resolve`` and altitude-aware ``recall``.

These read the tree only (they never write), so a GUI or a model can call them while a sweep
runs. Each is also a function tool in the OpenAI style of ``edit_context`` (see
:func:`distill_tool_schemas`), and :meth:`DigestTools.call` decodes a model's arguments with
strict validation and returns the wire JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from picocontext.distill.cas import BlobStore
from picocontext.distill.data import (
    Altitude,
    DigestChild,
    DigestNode,
    DigestSnapshot,
    DigestView,
    MapLine,
    MapResult,
    RecallItem,
    RecallPack,
    ResolveMatch,
    ResolveResult,
)
from picocontext.distill.embedder import Embedder, LexicalEmbedder
from picocontext.distill.errors import DistillError, InvalidHash, NodeNotFound, ToolCallError
from picocontext.distill.ids import LEVEL_ENTITY, LEVEL_SCOPE, LEVEL_TENANT, ROOT_ID
from picocontext.distill.semhash import RESOLVE_HAMMING_THRESHOLD, hamming, parse_sem_hash
from picocontext.distill.store import NodeStore

MAP_TOOL = "map"
DIGEST_TOOL = "digest"
RESOLVE_TOOL = "resolve"
RECALL_TOOL = "recall"
RECALL_K = 24

_ARGS = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


def whitespace_words(text: str) -> int:
    return len(text.split())


class MapArgs(BaseModel):
    model_config = _ARGS
    scope: str = ""
    known_hashes: dict[str, str] = Field(default_factory=dict, alias="knownHashes")
    prune_unchanged: bool = Field(default=False, alias="pruneUnchanged")


class DigestArgs(BaseModel):
    model_config = _ARGS
    node_id: str = Field(alias="nodeId", min_length=1)


class ResolveArgs(BaseModel):
    model_config = _ARGS
    hash: str = Field(min_length=1)


class RecallArgs(BaseModel):
    model_config = _ARGS
    query: str = Field(min_length=1)
    budget: int = Field(default=1500, gt=0, le=1_000_000)
    altitude: Altitude = Altitude.AUTO
    scope: str = ""

    @field_validator("altitude", mode="before")
    @classmethod
    def _named_altitude(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.isdigit():
            try:
                return Altitude[value.strip().upper()]
            except KeyError:
                raise ValueError("altitude must be auto, entity, scope or tenant") from None
        return value


def _line(node: DigestNode, unchanged: bool = False) -> MapLine:
    return MapLine(
        id=node.id,
        level=node.level,
        kind=node.kind,
        scope=node.scope_id,
        content_hash=node.content_hash,
        sem_hash=node.sem_hash,
        unchanged=unchanged,
        pending=node.is_pending,
    )


def _descendants(nodes: Mapping[str, DigestNode], start: str) -> set[str]:
    """Every node reachable from ``start`` through child_ids (not including ``start``)."""
    out: set[str] = set()
    stack = list(nodes[start].child_ids) if start in nodes else []
    while stack:
        node_id = stack.pop()
        if node_id in out or node_id not in nodes:
            continue
        out.add(node_id)
        stack.extend(nodes[node_id].child_ids)
    return out


class DigestTools:
    """Read-only views of one corpus for agents, the CLI and the Digest tab."""

    def __init__(
        self,
        store: NodeStore,
        cas: BlobStore | None,
        tokenizer: Callable[[str], int],
        embedder: Embedder | None = None,
        sem_seed: int = 1,
        complete: Callable[[list[str] | None], int] | None = None,
    ) -> None:
        self.store = store
        self.cas = cas
        self.tokenizer = tokenizer
        self.embedder = embedder
        self.sem_seed = sem_seed
        # Writes pending (deferred) view summaries on first need; None = read-only tools,
        # which show pending nodes as pending with an empty summary.
        self.complete = complete

    def _ensure(self, node_ids: list[str]) -> None:
        if self.complete is not None and node_ids:
            self.complete(node_ids)

    @classmethod
    def open(cls, corpus: str | Path) -> DigestTools:
        """Read-only tools over a corpus directory written by a :class:`Distiller` (what the
        CLI and the Digest tab use). Recall embeds queries with the corpus's lexical width."""
        root = Path(corpus)
        if not (root / "nodes.sqlite").is_file():
            raise DistillError(f"No digest corpus at {root} (nodes.sqlite is missing).")
        store = NodeStore(root / "nodes.sqlite")
        dims = 256
        recorded = store.meta_get("semantic_recipe_json")
        if recorded:
            data = json.loads(recorded)
            if str(data.get("embedder_id", "")).startswith("lexical-"):
                dims = int(data.get("dims", 256))
        return cls(store, BlobStore(root / "cas"), whitespace_words, LexicalEmbedder(dims))

    def close(self) -> None:
        self.store.close()

    def snapshot(self) -> DigestSnapshot:
        """Every node and its verified summary; an unreadable blob shows its error text."""
        nodes = self.store.nodes()
        summaries: dict[str, str] = {}
        for n in nodes:
            try:
                summaries[n.id] = self._summary(n)
            except DistillError as exc:
                summaries[n.id] = f"[unavailable: {exc}]"
        return DigestSnapshot(nodes=tuple(nodes), summaries=summaries)

    def _summary(self, node: DigestNode) -> str:
        if self.cas is None or not node.summary_hash:
            return ""
        return self.cas.retrieve_text(node.summary_hash)

    # -- map ---------------------------------------------------------------------------------
    def map(
        self,
        scope: str | None = None,
        known_hashes: Mapping[str, str] | None = None,
        prune_unchanged: bool = False,
    ) -> MapResult:
        """The tree as lines sorted by (level, id), each flagged ``unchanged`` when the caller's
        remembered ContentHash still matches. ``scope`` is a scope value (the reference's
        filter: root plus nodes with that scope_id) or a node id (that node's subtree).
        ``prune_unchanged`` omits the descendants of unchanged nodes, and unchanged views
        (level-1 nodes outside the root's tree in deferred-views mode) themselves."""
        known = dict(known_hashes or {})
        nodes = {n.id: n for n in self.store.nodes()}
        if scope:
            if scope in nodes:
                keep = {scope, *_descendants(nodes, scope)}
            else:
                keep = {i for i, n in nodes.items() if i == ROOT_ID or n.scope_id == scope}
            selected = [nodes[i] for i in sorted(keep)]
        else:
            selected = list(nodes.values())
        selected.sort(key=lambda n: (n.level, n.id))
        unchanged = {n.id for n in selected if known.get(n.id) == n.content_hash}
        omitted_ids: set[str] = set()
        if prune_unchanged:
            for node_id in unchanged:
                omitted_ids |= _descendants(nodes, node_id)
                if not nodes[node_id].parent_ids and node_id != ROOT_ID:
                    omitted_ids.add(node_id)  # an unchanged view (no parent) is news to no one
        lines = tuple(_line(n, n.id in unchanged) for n in selected if n.id not in omitted_ids)
        deleted = tuple(sorted(i for i in known if i not in nodes))
        return MapResult(
            lines=lines, deleted=deleted, omitted=len(omitted_ids & {n.id for n in selected})
        )

    # -- digest ------------------------------------------------------------------------------
    def digest(self, node_id: str) -> DigestView:
        """A node's line, its verified summary and its children in child_ids order."""
        node = self.store.get(node_id)
        if node is None:
            raise NodeNotFound(node_id)
        waiting = [node_id] if node.is_pending else []
        for child_id in node.child_ids:
            child = self.store.get(child_id)
            if child is not None and child.is_pending:
                waiting.append(child_id)
        if waiting and self.complete is not None:
            self._ensure(waiting)
            node = self.store.get(node_id)
            if node is None:
                raise NodeNotFound(node_id)
        children = []
        for child_id in node.child_ids:
            child = self.store.get(child_id)
            if child is None:
                continue
            children.append(
                DigestChild(
                    id=child.id,
                    kind=child.kind,
                    summary=self._summary(child),
                    content_hash=child.content_hash,
                    sem_hash=child.sem_hash,
                )
            )
        return DigestView(
            node=_line(node),
            summary=self._summary(node),
            tokens=node.tokens,
            children=tuple(children),
        )

    def source_text(self, node_id: str) -> str:
        """The guarded source text of a leaf (what its summary was made from)."""
        node = self.store.get(node_id)
        if node is None:
            raise NodeNotFound(node_id)
        if self.cas is None or not node.source_hash:
            return ""
        return self.cas.retrieve_text(node.source_hash)

    # -- resolve -----------------------------------------------------------------------------
    def resolve(self, value: str) -> ResolveResult:
        """Exact ContentHash match, and SemHash neighbours (<= 8 bits) when ``value`` is a
        16-hex SemHash. A 64-hex ContentHash never yields near matches."""
        value = value.strip().lower()
        exact = self.store.by_content_hash(value) if value else []
        near: list[ResolveMatch] = []
        try:
            target: int | None = parse_sem_hash(value)
        except InvalidHash:
            target = None
        if target is not None:
            for node in self.store.nodes():
                try:
                    sem = parse_sem_hash(node.sem_hash)
                except InvalidHash:
                    continue
                bits = hamming(sem, target)
                if bits <= RESOLVE_HAMMING_THRESHOLD:
                    near.append(ResolveMatch(node=_line(node), hamming_bits=bits))
            near.sort(key=lambda m: (m.hamming_bits, m.node.id))
        return ResolveResult(
            exact=_line(exact[0]) if exact else None,
            also_exact=tuple(n.id for n in exact[1:]),
            near=tuple(near),
        )

    # -- recall ------------------------------------------------------------------------------
    def recall(
        self,
        query: str,
        budget: int,
        altitude: Altitude = Altitude.AUTO,
        scope: str = "",
    ) -> RecallPack:
        """Pack the most relevant text under ``budget`` tokens, at the right altitude.

        Candidates are the top-K leaves (their guarded source text) and the top-K internal
        digests (their summary text, inlined: fix M), plus the root, ranked by cosine of the
        query embedding with the node vectors. Auto picks entity if all entity candidates
        fit, else scope if all level-1 digests fit, else tenant. Coverage is exact (a digest
        covers the leaves below it), never a heuristic.
        """
        if budget <= 0:
            raise DistillError(f"Recall budget must be > 0, got {budget}.")
        nodes = {n.id: n for n in self.store.nodes()}
        if scope and scope not in nodes:
            raise NodeNotFound(scope)

        def candidates() -> set[str]:
            return {scope, *_descendants(nodes, scope)} if scope else set(nodes)

        allowed = candidates()
        if altitude != Altitude.ENTITY and self.complete is not None:
            # Digests are ranked by their embeddings: pending views in reach are written first.
            waiting = sorted(i for i in allowed if nodes[i].is_pending)
            if waiting:
                self._ensure(waiting)
                nodes = {n.id: n for n in self.store.nodes()}
                allowed = candidates()
        scores = self._scores(query, [nodes[i] for i in sorted(allowed)])
        ranked = sorted(allowed, key=lambda i: (-scores.get(i, 0.0), i))
        entities = [i for i in ranked if nodes[i].level == LEVEL_ENTITY][:RECALL_K]
        digests = [i for i in ranked if nodes[i].level == LEVEL_SCOPE][:RECALL_K]
        root = [i for i in ranked if nodes[i].level == LEVEL_TENANT]

        def item(node_id: str) -> RecallItem:
            node = nodes[node_id]
            if node.level == LEVEL_ENTITY:
                text = self.source_text(node_id) or self._summary(node)
            else:
                text = self._summary(node)
            return RecallItem(
                node_id=node_id,
                level=node.level,
                kind=node.kind,
                is_digest=node.level > LEVEL_ENTITY,
                text=text,
                tokens=self.tokenizer(text),
                score=scores.get(node_id, 0.0),
            )

        entity_items = [item(i) for i in entities]
        digest_items = [item(i) for i in digests]
        root_items = [item(i) for i in root]
        resolved = altitude
        if altitude == Altitude.AUTO:
            if sum(i.tokens for i in entity_items) <= budget:
                resolved = Altitude.ENTITY
            elif digest_items and sum(i.tokens for i in digest_items) <= budget:
                resolved = Altitude.SCOPE
            else:
                resolved = Altitude.TENANT
        if resolved == Altitude.ENTITY:
            ordered = entity_items
        elif resolved == Altitude.SCOPE:
            covered: set[str] = set()
            for d in digest_items:
                covered |= _descendants(nodes, d.node_id)
            rest = [e for e in entity_items if e.node_id not in covered]
            ordered = sorted([*digest_items, *rest], key=lambda x: (-x.score, x.node_id))
        else:
            ordered = [*root_items, *digest_items]
        packed: list[RecallItem] = []
        used = 0
        for index, candidate in enumerate(ordered):
            if used + candidate.tokens > budget:
                return RecallPack(
                    requested=altitude,
                    altitude=resolved,
                    items=tuple(packed),
                    tokens=used,
                    omitted=len(ordered) - index,
                    budget=budget,
                )
            packed.append(candidate)
            used += candidate.tokens
        return RecallPack(
            requested=altitude, altitude=resolved, items=tuple(packed), tokens=used, budget=budget
        )

    def _scores(self, query: str, nodes: list[DigestNode]) -> dict[str, float]:
        embedder = self.embedder or LexicalEmbedder()
        query_vec = embedder.embed([query])[0].astype(np.float64)
        qn = float(np.linalg.norm(query_vec))
        out: dict[str, float] = {}
        if self.embedder is None or qn == 0:
            words = set(query.lower().split())
            for node in nodes:
                text = (self._summary(node) or "").lower()
                out[node.id] = float(sum(1 for w in words if w in text))
            return out
        vectors = self.store.vectors()
        for node in nodes:
            vec = vectors.get(node.id)
            if vec is None or vec.size != query_vec.size:
                out[node.id] = 0.0
                continue
            vn = float(np.linalg.norm(vec))
            cos = float(vec.astype(np.float64) @ query_vec) / (vn * qn) if vn else 0.0
            out[node.id] = 0.0 if math.isnan(cos) else cos
        return out

    # -- tool dispatch -----------------------------------------------------------------------
    def call(self, name: str, arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
        """Run one tool call from a model. Bad arguments raise :class:`ToolCallError` with a
        message the model can act on; lookups that fail raise their own errors."""
        if arguments is None or arguments == "":
            payload: Any = {}
        elif isinstance(arguments, str):
            try:
                payload = json.loads(arguments)
            except json.JSONDecodeError as exc:
                raise ToolCallError(f"{name}: arguments are not valid JSON ({exc.msg}).") from exc
            except RecursionError:
                raise ToolCallError(
                    f"{name}: arguments are not valid JSON (nested too deeply)."
                ) from None
        else:
            payload = dict(arguments)
        if payload is None:
            payload = {}
        if not isinstance(payload, dict):
            raise ToolCallError(f"{name}: arguments must be a JSON object.")
        try:
            if name == MAP_TOOL:
                m = MapArgs.model_validate(payload)
                return self.map(m.scope or None, m.known_hashes, m.prune_unchanged).wire()
            if name == DIGEST_TOOL:
                return self.digest(DigestArgs.model_validate(payload).node_id).wire()
            if name == RESOLVE_TOOL:
                return self.resolve(ResolveArgs.model_validate(payload).hash).wire()
            if name == RECALL_TOOL:
                r = RecallArgs.model_validate(payload)
                return self.recall(r.query, r.budget, r.altitude, r.scope).wire()
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ToolCallError(f"{name}: invalid arguments ({problems}).") from exc
        raise ToolCallError(
            f"Unknown tool {name!r}; expected one of {', '.join(DISTILL_TOOL_NAMES)}."
        )


DISTILL_TOOL_NAMES = (MAP_TOOL, DIGEST_TOOL, RESOLVE_TOOL, RECALL_TOOL)


def _fn(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "required": required,
                "properties": properties,
            },
        },
    }


def map_tool_schema() -> dict[str, Any]:
    return _fn(
        MAP_TOOL,
        "Outline of the digest tree (one line per node: id, level, kind, contentHash, "
        "semHash). Pass knownHashes from an earlier map to get unchanged flags and deleted ids. "
        "A line marked pending has no summary yet; digest writes it.",
        {
            "scope": {
                "type": "string",
                "description": "A scope value (root plus nodes of that scope) or a node id "
                "(that subtree). Omit for the whole tree.",
            },
            "knownHashes": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "nodeId -> contentHash remembered from an earlier map.",
            },
            "pruneUnchanged": {
                "type": "boolean",
                "description": "Omit the descendants of unchanged nodes and unchanged views.",
            },
        },
        [],
    )


def digest_tool_schema() -> dict[str, Any]:
    return _fn(
        DIGEST_TOOL,
        "The summary of one digest node plus the summaries of its children.",
        {"nodeId": {"type": "string", "description": "A node id from map."}},
        ["nodeId"],
    )


def resolve_tool_schema() -> dict[str, Any]:
    return _fn(
        RESOLVE_TOOL,
        "Find nodes by hash: exact contentHash match, and for a 16-hex semHash every node "
        f"within {RESOLVE_HAMMING_THRESHOLD} Hamming bits.",
        {"hash": {"type": "string", "description": "A contentHash or a semHash."}},
        ["hash"],
    )


def recall_tool_schema() -> dict[str, Any]:
    return _fn(
        RECALL_TOOL,
        "Relevant text for a query under a token budget: raw items when they fit, otherwise "
        "scope or whole-corpus summaries.",
        {
            "query": {"type": "string"},
            "budget": {"type": "integer", "minimum": 1, "description": "Token budget."},
            "altitude": {
                "type": "string",
                "enum": ["auto", "entity", "scope", "tenant"],
                "description": "auto picks the lowest level that fits the budget.",
            },
            "scope": {"type": "string", "description": "Restrict to a node's subtree."},
        },
        ["query"],
    )


def distill_tool_schemas() -> list[dict[str, Any]]:
    return [map_tool_schema(), digest_tool_schema(), resolve_tool_schema(), recall_tool_schema()]


def render_outline(result: MapResult, nodes: Mapping[str, DigestNode] | None = None) -> str:
    """A compact text outline: one line per map line, indented by level from the root."""
    out = []
    for line in sorted(result.lines, key=lambda x: (-x.level, x.id)):
        indent = "  " * (LEVEL_TENANT - line.level)
        flag = " =" if line.unchanged else ""
        tokens = ""
        if nodes is not None and line.id in nodes:
            tokens = f" {nodes[line.id].tokens}t"
        out.append(
            f"{indent}{line.id} [{line.kind}] ch={line.content_hash[:12]} sem={line.sem_hash}"
            f"{tokens}{flag}"
        )
    if result.deleted:
        out.append("deleted: " + ", ".join(result.deleted))
    if result.omitted:
        out.append(f"({result.omitted} unchanged descendants omitted)")
    return "\n".join(out)
