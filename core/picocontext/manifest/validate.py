"""Validation: size limits, the schema (through the models) and the structure the schema cannot
express. Every check is iterative and bounded, so a hostile manifest (a 100k-deep chain,
a 10 MB descriptor, cyclic children, deeply nested JSON) yields a list of errors, never a
RecursionError or a hang.
"""

from __future__ import annotations

import codecs
import json
import re
from collections import deque
from collections.abc import Iterator, KeysView, Mapping
from itertools import chain, compress, repeat
from operator import attrgetter, is_not, itemgetter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from picocontext.manifest.errors import ManifestInvalid
from picocontext.manifest.model import Manifest, Node
from picocontext.strictjson import DuplicateKey, unique_keys


class Limits(BaseModel):
    """Bounds a manifest must respect. Defaults fit any real corpus by a wide margin."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_bytes: int = 64 * 1024 * 1024
    max_nodes: int = 250_000
    max_depth: int = 48
    max_children: int = 10_000
    max_links: int = 256
    max_errors: int = 500


DEFAULT_LIMITS = Limits()


class ValidationReport(BaseModel):
    """Errors make a manifest unusable; warnings are inconsistencies a reader survives."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    manifest: Manifest | None = None

    @property
    def ok(self) -> bool:
        return not self.errors and self.manifest is not None


class _Errors:
    """Collects at most ``cap`` messages and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.items: list[str] = []
        self.dropped = 0
        self.cap = cap

    def add(self, msg: str) -> None:
        if len(self.items) < self.cap:
            self.items.append(msg)
        else:
            self.dropped += 1

    def final(self) -> tuple[str, ...]:
        extra = [f"... {self.dropped} more error(s) not shown"] if self.dropped else []
        return (*self.items, *extra)


def _format_pydantic(exc: ValidationError, cap: int) -> list[str]:
    out: list[str] = []
    for err in exc.errors(include_input=False, include_url=False)[:cap]:
        loc = "/".join(str(p) for p in err["loc"]) or "<document>"
        out.append(f"{loc}: {err['msg']}")
    if exc.error_count() > cap:
        out.append(f"... {exc.error_count() - cap} more error(s) not shown")
    return out


def _clean_children(
    kids: tuple[str, ...], root_id: str, node_keys: KeysView[str], parent: dict[str, str]
) -> bool:
    """The common case in one set operation: distinct, known, not the root, parentless."""
    kid_set = set(kids)
    return (
        len(kid_set) == len(kids)
        and root_id not in kid_set
        and kid_set <= node_keys
        and not any(k in parent for k in kids)  # set.isdisjoint(dict) would walk the dict
    )


def _loc(manifest: Manifest, nid: str, node: Node) -> str:
    return "root" if node is manifest.root else f"nodes/{nid}"


def check_structure(
    manifest: Manifest, limits: Limits = DEFAULT_LIMITS, *, warnings: bool = True
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Structure checks on a schema-valid manifest: (errors, warnings).

    A clean manifest is confirmed by a few whole-manifest set operations; only when that fails
    does the node-by-node pass run to name every problem. ``warnings=False`` skips the cost
    consistency warnings (a loader that only needs a usable manifest).
    """
    fast = _clean_warnings(manifest, limits, warnings=warnings)
    if fast is not None:
        return (), fast
    return _detailed_structure(manifest, limits)


def _cost_warnings(manifest: Manifest, levels: list[list[str]]) -> list[str]:
    """Warnings from ``levels`` (node ids by depth, depth 1 first): tier vs depth, a baseline
    above the budget, subtree sums that do not add up."""
    nodes = manifest.nodes
    warns = [
        f"nodes/{nid}/tier: tier {tier} but depth {d}"
        for d, level in enumerate(levels, start=1)
        for nid in level
        if (tier := nodes[nid].tier) is not None and tier != d
    ]
    baseline = manifest.variant.manifest_tokens
    if baseline is not None and baseline > manifest.variant.budget:
        warns.append(
            f"variant: manifest_tokens {baseline} exceed the budget {manifest.variant.budget}"
        )
    for nid, node in nodes.items():
        kids = node.children
        if not kids or node.subtree_tokens is None:
            continue
        sub = [nodes[c].subtree_tokens if c in nodes else None for c in kids]
        if None not in sub:
            total = sum(x for x in sub if x is not None)
            if total != node.subtree_tokens:
                warns.append(
                    f"nodes/{nid}/subtree_tokens: {node.subtree_tokens} but children sum to {total}"
                )
    return warns


_ID = attrgetter("id")
_CHILDREN = attrgetter("children")
_LINKS = attrgetter("links")
_PAYLOAD = attrgetter("payload")
_REF = attrgetter("ref")
_TO = attrgetter("to")
_AFTER_SCHEME = itemgetter(slice(7, None))


def _clean_warnings(
    manifest: Manifest, limits: Limits, *, warnings: bool = True
) -> tuple[str, ...] | None:
    """Warnings if the structure is clean, None at the first sign of any error.

    Every whole-manifest pass is a ``map``/``filter``/``chain`` over attribute getters, so the
    per-node work runs in C; only the rare shapes (ids present but not all equal to their
    keys, payload refs in another scheme) fall back to a Python-level comprehension."""
    nodes = manifest.nodes
    root = manifest.root
    root_id = manifest.root_id
    if len(nodes) + 1 > limits.max_nodes or root_id in nodes:
        return None
    keys = list(nodes)
    vals = list(nodes.values())
    ids = list(map(_ID, vals))
    if (
        ids != keys
        and ids.count(None) != len(ids)
        and any(i is not None and i != k for i, k in zip(ids, keys, strict=True))
    ):
        return None  # an id that differs from its key
    kid_fields = list(map(_CHILDREN, vals))
    kid_lists = list(filter(None, kid_fields))
    # Branch id -> children (compress and filter keep the same, non-empty, entries); leaves
    # are absent, so the descent below reads no node and builds no 10k-entry map.
    branch_kids = dict(zip(compress(keys, kid_fields), kid_lists, strict=True))
    if root.children:
        kid_lists.append(root.children)
    if kid_lists and max(map(len, kid_lists)) > limits.max_children:
        return None
    refs = list(chain.from_iterable(kid_lists))
    ref_set = set(refs)
    if len(ref_set) != len(refs) or len(refs) != len(nodes) or ref_set != nodes.keys():
        return None  # a duplicate, a second parent, an unknown id, the root, or an orphan
    link_lists = list(filter(None, map(_LINKS, vals)))
    if root.links:
        link_lists.append(root.links)
    if link_lists:
        if max(map(len, link_lists)) > limits.max_links:
            return None
        targets = set(map(_TO, chain.from_iterable(link_lists)))
        if not targets <= nodes.keys() | {root_id}:
            return None
    payloads = list(map(_PAYLOAD, vals))
    has_payload = list(map(is_not, payloads, repeat(None)))
    leaf_keys = list(compress(keys, has_payload))
    payload_refs = list(map(_REF, compress(payloads, has_payload)))
    if root.payload is not None:
        leaf_keys.append(root_id)
        payload_refs.append(root.payload.ref)
    # Usually every leaf points at itself (node://<its id>): one list comparison confirms it.
    if payload_refs != list(map("node://".__add__, leaf_keys)):
        if all(map(str.startswith, payload_refs, repeat("node://"))):
            pointed = set(map(_AFTER_SCHEME, payload_refs))
        else:
            pointed = {r[7:] for r in payload_refs if r.startswith("node://")}
        if not pointed <= set(leaf_keys):
            return None  # a dangling payload ref, or one that points at a branch
    # Every node is referenced exactly once and the root never: a forest hanging from the
    # root plus possibly detached cycles. Level-by-level descent finds both and the depth.
    levels: list[list[str]] = []
    level = list(root.children or ())
    seen = 0
    get = branch_kids.get
    while level:
        if len(levels) >= limits.max_depth:
            return None
        levels.append(level)
        seen += len(level)
        level = list(chain.from_iterable(filter(None, map(get, level))))
    if seen != len(nodes):
        return None  # a cycle detached from the root
    if not warnings:
        return ()
    return tuple(_cost_warnings(manifest, levels)[: limits.max_errors])


def _detailed_structure(
    manifest: Manifest, limits: Limits = DEFAULT_LIMITS
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The node-by-node pass that names every structural error.

    Errors: id != key, the root id reused as a node key, unknown or duplicate child refs, a node
    with several parents, the root as a child, cycles, orphans, dangling links and ``node://``
    payload refs, and the size limits. Warnings: ``tier`` disagreeing with depth, a baseline
    above the budget, ``subtree_tokens`` that do not add up.
    """
    errs = _Errors(limits.max_errors)
    warns: list[str] = []

    def at(nid: str, node: Node) -> str:
        return _loc(manifest, nid, node)

    root_id = manifest.root_id
    nodes = manifest.nodes
    if len(nodes) + 1 > limits.max_nodes:
        errs.add(f"nodes: {len(nodes) + 1} nodes exceed the limit of {limits.max_nodes}")
        return errs.final(), ()
    if root_id in nodes:
        errs.add(f"nodes/{root_id}: the root id {root_id!r} is also used as a node key")

    parent: dict[str, str] = {}
    node_keys = nodes.keys()
    every: list[tuple[str, Node]] = [(root_id, manifest.root), *nodes.items()]
    for nid, node in every:
        if node is not manifest.root and node.id is not None and node.id != nid:
            errs.add(at(nid, node) + f"/id: id {node.id!r} does not match its key {nid!r}")
        kids = node.children or ()
        if len(kids) > limits.max_children:
            errs.add(
                _loc(manifest, nid, node)
                + f"/children: {len(kids)} children exceed {limits.max_children}"
            )
            continue
        if not kids:
            pass
        elif _clean_children(kids, root_id, node_keys, parent):
            parent.update(dict.fromkeys(kids, nid))
            kids = ()
        seen_here: set[str] = set()
        for i, cid in enumerate(kids):
            if cid in seen_here:
                errs.add(at(nid, node) + f"/children[{i}]: duplicate child ref {cid!r}")
                continue
            seen_here.add(cid)
            if cid == root_id:
                errs.add(
                    _loc(manifest, nid, node)
                    + f"/children[{i}]: the root {cid!r} cannot be a child"
                )
            elif cid not in nodes:
                errs.add(at(nid, node) + f"/children[{i}]: unknown child id {cid!r}")
            elif cid in parent:
                errs.add(
                    _loc(manifest, nid, node)
                    + f"/children[{i}]: {cid!r} already has parent {parent[cid]!r} "
                    "(a node has a single parent)"
                )
            else:
                parent[cid] = nid
        links = node.links or ()
        if len(links) > limits.max_links:
            errs.add(at(nid, node) + f"/links: {len(links)} links exceed {limits.max_links}")
        for i, link in enumerate(links[: limits.max_links]):
            if not manifest.has(link.to):
                errs.add(
                    _loc(manifest, nid, node)
                    + f"/links[{i}]: dangling link to unknown id {link.to!r}"
                )
        payload = node.payload
        if payload is not None and payload.ref.startswith("node://"):
            target = payload.ref[7:]
            if target not in nodes and target != root_id:
                errs.add(
                    _loc(manifest, nid, node)
                    + f"/payload/ref: dangling payload ref {payload.ref!r}"
                )
            elif target != nid and not manifest.get(target).is_leaf:
                errs.add(
                    _loc(manifest, nid, node) + f"/payload/ref: {payload.ref!r} points at a branch"
                )

    # Breadth-first from the root over first-parent edges only: iterative, each node once.
    depth: dict[str, int] = {root_id: 0}
    queue: deque[str] = deque([root_id])
    too_deep = False
    while queue:
        nid = queue.popleft()
        d = depth[nid]
        level_kids = manifest.root.children if nid == root_id else nodes[nid].children
        for cid in level_kids or ():
            if parent.get(cid) != nid or cid in depth:
                continue
            depth[cid] = d + 1
            if d + 1 > limits.max_depth:
                too_deep = True
                continue
            queue.append(cid)
    if too_deep:
        errs.add(f"root: the tree is deeper than the limit of {limits.max_depth} levels")

    unreached = [nid for nid in nodes if nid not in depth]
    if unreached and not too_deep:
        cycles = _cycles(unreached, parent)
        for cyc in cycles:
            shown = " -> ".join(cyc[:8]) + (" -> ..." if len(cyc) > 8 else "")
            errs.add(f"nodes: cycle in children: {shown} -> {cyc[0]}")
        in_cycle = {n for c in cycles for n in c}
        orphans = [n for n in unreached if n not in in_cycle]
        if orphans:
            head = ", ".join(repr(o) for o in orphans[:10])
            more = f" and {len(orphans) - 10} more" if len(orphans) > 10 else ""
            errs.add(
                f"nodes: {len(orphans)} orphan node(s) not reachable from the root: {head}{more}"
            )

    by_level: dict[int, list[str]] = {}
    for k, v in depth.items():
        if k != root_id:
            by_level.setdefault(v, []).append(k)
    warns.extend(_cost_warnings(manifest, [by_level[d] for d in sorted(by_level)]))
    return errs.final(), tuple(warns[: limits.max_errors])


def _cycles(unreached: list[str], parent: dict[str, str]) -> list[list[str]]:
    """Cycles among unreachable nodes, following the single recorded parent of each."""
    state: dict[str, int] = {}
    found: list[list[str]] = []
    for start in unreached:
        if start in state:
            continue
        path: list[str] = []
        pos: dict[str, int] = {}
        cur: str | None = start
        while cur is not None and cur not in state:
            state[cur] = 1
            pos[cur] = len(path)
            path.append(cur)
            cur = parent.get(cur)
        if cur is not None and cur in pos:
            found.append(list(reversed(path[pos[cur] :])))
        for n in path:
            state[n] = 2
    return found


# Control tokens of the chat formats a navigator renders through: ChatML and its kin
# (``<|im_end|>``, ``<|endoftext|>``, ``<|eot_id|>`` ...) and Qwen's tool tags. A chat
# template refuses text that contains one (it could end a message or forge a turn), so a
# descriptor carrying one cannot be shown to a model.
RESERVED_CHAT_TOKEN = re.compile(r"<\|[^\s|<>]{1,64}\|>|</?tool_(?:call|response)>")


def _shown_texts(nid: str, node: Node) -> Iterator[tuple[str, str]]:
    """(field, text) of everything a navigator may render for a node."""
    yield "id", nid
    for name in ("title", "what", "when"):
        value = getattr(node, name)
        if value:
            yield name, value
    for i, keyword in enumerate(node.keywords or ()):
        yield f"keywords[{i}]", keyword
    for i, link in enumerate(node.links or ()):
        yield f"links[{i}]/why", link.why or ""
    for key, value in (node.facets or {}).items():
        yield f"facets/{key}", f"{key}={value}"


def reserved_tokens(nid: str, node: Node) -> list[str]:
    """``field: 'token'`` for each reserved chat token in what a navigator renders."""
    found = []
    for name, text in _shown_texts(nid, node):
        if "<" in text and (match := RESERVED_CHAT_TOKEN.search(text)) is not None:
            found.append(f"{name}: {match.group()!r}")
    return found


def chat_token_errors(manifest: Manifest, limits: Limits = DEFAULT_LIMITS) -> tuple[str, ...]:
    """One error per node field that holds a reserved chat token (see
    :data:`RESERVED_CHAT_TOKEN`): the render of a model prompt would refuse it."""
    errs = _Errors(limits.max_errors)
    for nid, node in [(manifest.root_id, manifest.root), *manifest.nodes.items()]:
        for hit in reserved_tokens(nid, node):
            field, _, token = hit.partition(": ")
            errs.add(
                f"{_loc(manifest, nid, node)}/{field}: contains the reserved chat token "
                f"{token}, which a model's chat template refuses to render; remove or reword it"
            )
    return errs.final()


def _parse(data: bytes | str | Mapping[str, Any], limits: Limits) -> Manifest:
    """The model of ``data``. JSON text may start with a UTF-8 byte order mark, which is
    dropped (RFC 8259 lets a parser ignore it, and Windows editors write one); an object with
    a repeated key is refused, since which value wins is up to the parser."""
    if isinstance(data, Mapping):
        return Manifest.model_validate(data)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if len(raw) > limits.max_bytes:
        raise ManifestInvalid(
            [f"<document>: {len(raw)} bytes exceed the limit of {limits.max_bytes}"]
        )
    raw = raw.removeprefix(codecs.BOM_UTF8)
    manifest = Manifest.model_validate_json(raw)
    # Checked after the model accepted the text, so malformed JSON keeps pydantic's message;
    # the second pass is the standard library's C scanner with a small hook.
    try:
        json.loads(raw, object_pairs_hook=unique_keys)
    except DuplicateKey as exc:
        raise ManifestInvalid([f"<document>: {exc}"]) from None
    return manifest


def validate_manifest(
    data: bytes | str | Mapping[str, Any] | Manifest,
    limits: Limits = DEFAULT_LIMITS,
    *,
    warnings: bool = True,
    chat_tokens: bool = True,
) -> ValidationReport:
    """Parse and check everything; never raises for bad input, returns the errors instead.

    ``chat_tokens=False`` skips :func:`chat_token_errors`: a loader whose manifest may never
    reach a model (or that reports such nodes per case, as ``pcx eval`` does) still loads it."""
    try:
        manifest = data if isinstance(data, Manifest) else _parse(data, limits)
    except ManifestInvalid as exc:
        return ValidationReport(errors=exc.errors)
    except ValidationError as exc:
        return ValidationReport(errors=tuple(_format_pydantic(exc, limits.max_errors)))
    except RecursionError:
        return ValidationReport(errors=("<document>: JSON nested too deeply",))
    errors, warns = check_structure(manifest, limits, warnings=warnings)
    if chat_tokens:
        errors = (*errors, *chat_token_errors(manifest, limits))[: limits.max_errors + 1]
    return ValidationReport(errors=errors, warnings=warns, manifest=manifest)


def _read_manifest_file(path: Path, limits: Limits) -> bytes:
    """The file's bytes through a bounded read of regular files only."""
    from picocontext.files import InputFileError, read_bounded

    try:
        return read_bounded(path, limits.max_bytes)
    except InputFileError as exc:
        raise ManifestInvalid([f"cannot read {exc.message}"], str(path)) from None


def load_manifest(
    data: bytes | str | Mapping[str, Any] | Path, limits: Limits = DEFAULT_LIMITS
) -> Manifest:
    """A fully validated manifest, or :class:`ManifestInvalid` listing every problem.

    ``str`` is JSON text; pass a :class:`~pathlib.Path` to read a file.
    """
    source = "manifest"
    if isinstance(data, Path):
        source = str(data)
        data = _read_manifest_file(data, limits)
    # Warnings and reserved chat tokens are pcx validate's; a navigation names such nodes.
    report = validate_manifest(data, limits, warnings=False, chat_tokens=False)
    if not report.ok or report.manifest is None:
        raise ManifestInvalid(report.errors, source)
    return report.manifest


def dump_json(manifest: Manifest) -> str:
    return json.dumps(manifest.to_dict(), indent=2, ensure_ascii=False) + "\n"
