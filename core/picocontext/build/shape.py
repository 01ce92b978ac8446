"""Per-budget shaping and the build's self-check (B2, B4).

For each budget the compiler looks for the richest descriptor verbosity and the widest
frontier for which the variant passes :func:`self_check`:

* :func:`shape_tree` copies the canonical tree, pages every leaf whose content would not fit a
  share of the budget (the leaf becomes a branch of ``~pN`` parts) and re-clusters every branch
  with more children than the allowed width, so each reveal fits;
* :func:`self_check` validates the manifest (schema through the models, plus the structure
  checks of :mod:`picocontext.manifest.validate`), asserts ``manifest_tokens <= budget`` and
  walks an **oracle** -- the real :class:`~picocontext.manifest.session.NavSession`, opening
  exactly the target's ancestors, then the target -- to every leaf, within the budget.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from picocontext.build.cluster import group_children
from picocontext.build.ir import IdRegistry, SourceNode
from picocontext.build.signals import Signals
from picocontext.manifest.errors import BudgetTooSmall, DisclosureRefused, ManifestError
from picocontext.manifest.model import Manifest
from picocontext.manifest.runtime import ViewLevel
from picocontext.manifest.schema import schema_errors
from picocontext.manifest.session import DEFAULT_PROTOCOL, ModeConfig, NavSession
from picocontext.manifest.tokens import TextCounter
from picocontext.manifest.validate import validate_manifest

ORACLE_VIEW = ModeConfig(view_level="full", inline_small_leaves=False)
_PARA = re.compile(r"\n\s*\n")


class ShapeStats(BaseModel):
    model_config = ConfigDict(frozen=True)

    width: int
    leaf_cap: int
    clusters: int
    pages: int


def _split_big(text: str, cap: int, counter: TextCounter) -> list[str]:
    """Pieces of ``text`` each within ``cap`` tokens, cut at line ends or, failing that, by
    characters (a single enormous line)."""
    if counter.count(text) <= cap:
        return [text]
    lines = text.split("\n")
    if len(lines) > 1:
        out: list[str] = []
        cur: list[str] = []
        for line in lines:
            trial = "\n".join([*cur, line])
            if cur and counter.count(trial) > cap:
                out.append("\n".join(cur))
                cur = [line]
            else:
                cur.append(line)
        if cur:
            out.append("\n".join(cur))
        if len(out) > 1:
            return [p for piece in out for p in _split_big(piece, cap, counter)]
    step = max(1, int(len(text) * cap / max(counter.count(text), 1) * 0.95))
    return [text[i : i + step] for i in range(0, len(text), step)]


def paginate(text: str, cap: int, counter: TextCounter) -> list[str]:
    """Paragraph-packed pages of at most ``cap`` tokens each (verbatim: joining the pages with
    blank lines gives the paragraphs back)."""
    paras = [p for p in _PARA.split(text) if p.strip()]
    pieces = [piece for p in paras for piece in _split_big(p, cap, counter)]
    pages: list[str] = []
    cur: list[str] = []
    for piece in pieces:
        trial = "\n\n".join([*cur, piece])
        if cur and counter.count(trial) > cap:
            pages.append("\n\n".join(cur))
            cur = [piece]
        else:
            cur.append(piece)
    if cur:
        pages.append("\n\n".join(cur))
    return pages


Layout = list[Any]  # items: a child id (str) or {"id", "title", "members": Layout}


class LayoutMemory:
    """Cluster layouts by (branch, width, child ids). ``prior`` comes from the previous build:
    a branch whose children are the same pages is clustered exactly as it was, so editing one
    page cannot move its unchanged neighbours into new clusters (which would make an
    incremental rebuild describe nodes outside the changed path). ``current`` records what
    this build used, for the next one."""

    def __init__(self, prior: Mapping[str, Layout] | None = None) -> None:
        self.prior: dict[str, Layout] = dict(prior or {})
        self.current: dict[str, Layout] = {}

    @staticmethod
    def key(node: SourceNode, limit: int) -> str:
        digest = hashlib.sha256(f"{node.id}\x00{limit}".encode())
        for child in node.children:
            digest.update(b"\x00" + child.id.encode("utf-8", errors="surrogatepass"))
        return digest.hexdigest()[:32]


def _layout_of(nodes: list[SourceNode]) -> Layout:
    out: Layout = []
    for n in nodes:
        if n.synthetic and n.facets.get("kind") == "cluster":
            out.append({"id": n.id, "title": n.title, "members": _layout_of(n.children)})
        else:
            out.append(n.id)
    return out


def _layout_ids(layout: Layout) -> list[str]:
    out: list[str] = []
    for item in layout:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict) and isinstance(item.get("members"), list):
            out.extend(_layout_ids(item["members"]))
        else:
            out.append("\x00invalid")
    return out


def _apply_layout(
    layout: Layout, by_id: dict[str, SourceNode], ids: IdRegistry
) -> tuple[list[SourceNode], int] | None:
    """The children rebuilt from ``layout``, with the number of clusters, or None when the
    layout does not name exactly the available children."""
    out: list[SourceNode] = []
    created = 0
    for item in layout:
        if isinstance(item, str):
            node = by_id.pop(item, None)
            if node is None:
                return None
            out.append(node)
            continue
        if not isinstance(item, dict) or not isinstance(item.get("members"), list):
            return None
        inner = _apply_layout(item["members"], by_id, ids)
        if inner is None or not inner[0]:
            return None
        out.append(
            SourceNode(
                id=ids.claim(str(item["id"])),
                title=str(item.get("title", "")),
                facets={"kind": "cluster"},
                children=inner[0],
                synthetic=True,
            )
        )
        created += inner[1] + 1
    return out, created


def _cluster(
    node: SourceNode, limit: int, signals: Signals, ids: IdRegistry, memory: LayoutMemory | None
) -> int:
    if memory is None:
        return group_children(node, limit, signals, ids)
    key = LayoutMemory.key(node, limit)
    prior = memory.prior.get(key)
    if prior is not None and sorted(_layout_ids(prior)) == sorted(c.id for c in node.children):
        by_id = {c.id: c for c in node.children}
        applied = _apply_layout(prior, by_id, ids)
        if applied is not None and not by_id:
            node.children = applied[0]
            memory.current[key] = prior
            return applied[1]
    created = group_children(node, limit, signals, ids)
    memory.current[key] = _layout_of(node.children)
    return created


def shape_tree(
    canonical: SourceNode,
    *,
    width: int,
    leaf_cap: int,
    counter: TextCounter,
    signals: Signals,
    overrides: Mapping[str, int] | None = None,
    layouts: LayoutMemory | None = None,
) -> tuple[SourceNode, ShapeStats]:
    """``overrides`` narrows particular (natural) branches below ``width``: the compiler sets
    them for branches whose measured reveal did not fit its share of the budget. ``layouts``
    reuses the previous build's clusters (see :class:`LayoutMemory`)."""
    overrides = overrides or {}
    root = canonical.copy_tree()
    ids = IdRegistry(tuple(n.id for n in root.walk()))
    pages = 0
    for node in list(root.walk()):
        if node is root or not node.is_leaf or counter.count(node.content) <= leaf_cap:
            continue
        parts = paginate(node.content, leaf_cap, counter)
        if len(parts) < 2:
            continue
        for i, part in enumerate(parts, 1):
            node.children.append(
                SourceNode(
                    id=ids.claim(f"{node.id}~p{i}"),
                    title=f"{node.title} (part {i} of {len(parts)})",
                    content=part,
                    format=node.format,
                    facets={**node.facets, "page": str(i)},
                    origin=node.origin,
                    synthetic=True,
                )
            )
        node.content = ""
        node.facets = {**node.facets, "paged": str(len(parts))}
        pages += 1
    clusters = 0
    for node in list(root.walk()):
        limit = overrides.get(node.id, width)
        if len(node.children) > limit:
            clusters += _cluster(node, limit, signals, ids, layouts)
    return root, ShapeStats(width=width, leaf_cap=leaf_cap, clusters=clusters, pages=pages)


class CheckResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    problems: tuple[str, ...]
    unreachable: tuple[str, ...]
    # unreachable leaf -> tokens left after opening its ancestors (None: the path itself
    # does not fit), so shaping can tell "page this leaf" from "narrow the tree"
    room: dict[str, int | None] = {}
    reachable: int
    leaves: int
    max_oracle_tokens: int
    schema_checked: bool

    @property
    def ok(self) -> bool:
        return not self.problems


def oracle_cost(
    manifest: Manifest, leaf: str, counter: TextCounter, protocol: str = DEFAULT_PROTOCOL
) -> int | None:
    """Tokens an always-right navigator spends to open ``leaf``, or None if it cannot."""
    try:
        session = NavSession(manifest, config=ORACLE_VIEW, counter=counter, protocol=protocol)
        for nid in [*manifest.ancestors(leaf)[1:], leaf]:
            session.open(nid)
    except (DisclosureRefused, BudgetTooSmall):
        return None
    return session.spent


def _oracle_all(
    manifest: Manifest, counter: TextCounter, protocol: str, view: ViewLevel = "full"
) -> tuple[dict[str, int], dict[str, int | None]]:
    """Oracle cost of every leaf: one session per parent branch opens the ancestors once,
    then opens and closes each leaf below it. Closing reclaims the splice exactly, so each
    cost equals a fresh oracle walk (:func:`oracle_cost`), at a fraction of the work."""
    by_parent: dict[str, list[str]] = {}
    for leaf in manifest.leaf_ids:
        by_parent.setdefault(manifest.parents.get(leaf, manifest.root_id), []).append(leaf)
    costs: dict[str, int] = {}
    unreachable: dict[str, int | None] = {}
    for leaves in by_parent.values():
        try:
            config = (
                ORACLE_VIEW
                if view == "full"
                else ModeConfig(view_level=view, inline_small_leaves=False)
            )
            session = NavSession(manifest, config=config, counter=counter, protocol=protocol)
            for nid in manifest.ancestors(leaves[0])[1:]:
                session.open(nid)
        except (DisclosureRefused, BudgetTooSmall):
            unreachable.update(dict.fromkeys(leaves))
            continue
        for leaf in leaves:
            try:
                session.open(leaf)
            except DisclosureRefused:
                unreachable[leaf] = session.budget_remaining
                continue
            costs[leaf] = session.spent
            session.close(leaf)
    return costs, unreachable


def self_check(
    manifest: Manifest,
    counter: TextCounter,
    protocol: str = DEFAULT_PROTOCOL,
    *,
    jsonschema: bool = False,
    view: ViewLevel = "full",
) -> CheckResult:
    """Schema (the pydantic models the JSON Schema is generated from; with ``jsonschema`` also
    the generated schema itself), structure, baseline and oracle reachability."""
    problems: list[str] = []
    data = manifest.to_dict()
    schema_checked = jsonschema and importlib.util.find_spec("jsonschema") is not None
    if schema_checked:
        problems.extend(f"schema: {e}" for e in schema_errors(data))
    report = validate_manifest(data)
    problems.extend(f"structure: {e}" for e in report.errors)
    budget = manifest.variant.budget
    baseline = manifest.variant.manifest_tokens or 0
    if baseline > budget:
        problems.append(f"baseline: manifest_tokens {baseline} exceed the budget {budget}")
    unreachable: dict[str, int | None] = {}
    worst = 0
    leaves = manifest.leaf_ids
    if not problems:
        try:
            costs, unreachable = _oracle_all(manifest, counter, protocol, view)
        except ManifestError as exc:
            problems.append(f"oracle: {exc.message}")
            costs = {}
        worst = max(costs.values(), default=0)
        if unreachable:
            head = ", ".join(list(unreachable)[:5])
            problems.append(
                f"oracle: {len(unreachable)} of {len(leaves)} leaves cannot be reached within "
                f"{budget} tokens (e.g. {head})"
            )
    return CheckResult(
        problems=tuple(problems),
        unreachable=tuple(unreachable),
        room=unreachable,
        reachable=len(leaves) - len(unreachable) if not report.errors else 0,
        leaves=len(leaves),
        max_oracle_tokens=worst,
        schema_checked=schema_checked,
    )


def wide_reveals(shaped: SourceNode, manifest: Manifest, limit: float) -> dict[str, int]:
    """Natural branch id -> a width that would bring its over-budget reveals under ``limit``
    (a reveal is the sum of the children's lines; clusters count for the branch they split)."""
    natural: dict[str, str] = {}
    stack: list[tuple[SourceNode, str]] = [(shaped, shaped.id)]
    while stack:
        node, owner = stack.pop()
        own = owner if node.synthetic else node.id
        natural[node.id] = own
        stack.extend((c, own) for c in node.children)
    out: dict[str, int] = {}
    for node in shaped.walk():
        kids = node.children
        if len(kids) < 3:
            continue
        reveal = sum(manifest.nodes[c.id].desc_tokens or 0 for c in kids)
        if reveal <= limit:
            continue
        width = max(2, math.floor(len(kids) * limit / reveal))
        key = natural[node.id]
        out[key] = min(out.get(key, width), width)
    return out


def initial_width(budget: int, line_tokens: float, share: float = 0.2) -> int:
    """Widest reveal that fits ``share`` of the budget, clamped to [3, 64]."""
    return max(3, min(64, math.floor(share * budget / max(line_tokens, 1.0))))
