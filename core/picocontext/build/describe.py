"""The descriptor pipeline: bottom-up, one sibling group at a time, with a Merkle-keyed cache.

For every branch, once all its children have drafts:

1. **contrast** the children while the worst pair is at or above ``collision_threshold``
   (at most ``max_contrast_rounds`` rounds; stop early when a round does not improve);
2. **grade and repair**: each child is checked for vacuity, (LLM) self-grade and (LLM)
   predict-then-verify fidelity; failing ones are regenerated with the reasons as feedback,
   then *re-graded*, and the group is *re-contrasted* if a repair brought back a collision --
   up to ``max_repairs`` times (B22);
3. only then is the branch itself described, from its children's *final* descriptors, so a
   parent never summarizes lines that were later rewritten (B22).

Keys (:func:`leaf_key`, :func:`group_key`, :func:`branch_key`) hash everything a descriptor
depends on -- content, title, hint, keywords, facets, frontmatter, the engine signature (which
includes the engine version, prompt version and corpus statistics) and, for groups and
branches, the keys below them. An unchanged subtree therefore makes zero engine calls (B3).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from picocontext.build.engines.base import DescriptorEngine
from picocontext.build.errors import BuildError
from picocontext.build.ir import SourceNode
from picocontext.build.quality import Descriptor, vacuity_flags, worst_pair
from picocontext.cancel import CancelToken

CACHE_VERSION = 2
Progress = Callable[[int], None]


def _h(*parts: str) -> str:
    digest = hashlib.sha256()
    for p in parts:
        digest.update(p.encode("utf-8", errors="surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()[:32]


def _items(d: Mapping[str, str]) -> str:
    return json.dumps(sorted(d.items()), ensure_ascii=False, separators=(",", ":"))


def leaf_key(sig: str, node: SourceNode) -> str:
    return _h(
        sig,
        "leaf",
        node.title,
        node.hint,
        node.format,
        node.content,
        "\x1f".join(node.keywords),
        _items(node.facets),
        _items(node.meta),
    )


def group_key(sig: str, parent: SourceNode, child_keys: list[str]) -> str:
    return _h(sig, "group", parent.title, parent.hint, *child_keys)


def member_key(sig: str, parent: SourceNode, child_key: str) -> str:
    """A child's place in its group: the final (contrasted, graded) line it was given there is
    kept by the next incremental build as long as neither the child nor the parent changed."""
    return _h(sig, "member", parent.id, parent.title, parent.hint, child_key)


def branch_key(sig: str, node: SourceNode, gkey: str) -> str:
    return _h(
        sig,
        "branch",
        node.title,
        node.hint,
        "\x1f".join(node.keywords),
        _items(node.facets),
        _items(node.meta),
        gkey,
    )


class PipelineOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    collision_threshold: float = 0.5
    max_contrast_rounds: int = 2
    max_repairs: int = 1
    grade_threshold: float = 0.7
    fidelity_repair_below: float = 2.5


class CallLog:
    """Every engine call, as (kind, node id). With ``watch`` (ids of changed leaves) it also
    lists the calls made for nodes whose subtree contains none of them -- the incremental
    benchmark's "outside the changed path"."""

    def __init__(self, watch: frozenset[str] = frozenset()) -> None:
        self.calls: list[tuple[str, str]] = []
        self.watch = watch
        self.outside: list[tuple[str, str]] = []

    def add(self, kind: str, node: SourceNode) -> None:
        self.calls.append((kind, node.id))
        if self.watch and not any(leaf.id in self.watch for leaf in node.leaves()):
            self.outside.append((kind, node.id))

    def undo(self) -> None:
        """Drop the last call: the engine declined (an offline engine does not grade)."""
        last = self.calls.pop()
        if self.outside and self.outside[-1] == last:
            self.outside.pop()

    def count(self, kind: str | None = None) -> int:
        return sum(1 for k, _ in self.calls if kind is None or k == kind)


class DescriptorCache:
    """key -> descriptor (nodes) and key -> final descriptors (groups). In memory for one
    build (variants share it), on disk between builds for ``--incremental``."""

    def __init__(self, signature: str = "") -> None:
        self.signature = signature
        self.nodes: dict[str, Descriptor] = {}
        self.groups: dict[str, list[Descriptor]] = {}
        self.extra: dict[str, Any] = {}
        self.hits = 0
        self.misses = 0
        self.group_used: set[str] = set()
        self.node_used: set[str] = set()
        # grades, fidelity scores and repairs, keyed by what they depend on
        self.checks: dict[str, float | None] = {}
        self.check_used: set[str] = set()
        self.reasons: dict[str, str] = {}
        # member key -> the final line a child had in its group, and the members that were
        # left ungraded there. ``prior_members`` holds the previous build's (read-only): only
        # those pin siblings, so a full build never depends on its own shaping attempts' order.
        self.members: dict[str, Descriptor] = {}
        self.member_ungraded: set[str] = set()
        self.member_used: set[str] = set()
        self.prior_members: dict[str, Descriptor] = {}
        self.prior_ungraded: frozenset[str] = frozenset()
        # Shaping the previous build settled on: cluster layouts (see shape.LayoutMemory) and,
        # per budget, the attempt that passed; an incremental build tries both first.
        self.layouts: dict[str, Any] = {}
        self.shaping: dict[str, dict[str, Any]] = {}

    def to_json(self) -> dict[str, Any]:
        return {
            "version": CACHE_VERSION,
            "signature": self.signature,
            "extra": self.extra,
            "nodes": {k: v.model_dump() for k, v in self.nodes.items()},
            "groups": {k: [d.model_dump() for d in v] for k, v in self.groups.items()},
            "checks": self.checks,
            "reasons": self.reasons,
            "members": {k: v.model_dump() for k, v in sorted(self.members.items())},
            "member_ungraded": sorted(self.member_ungraded),
            "layouts": dict(sorted(self.layouts.items())),
            "shaping": self.shaping,
        }

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> DescriptorCache | None:
        """The cache at ``path``, or None when missing, corrupt or of another version."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
                return None
            cache = cls(str(data.get("signature", "")))
            cache.extra = dict(data.get("extra") or {})
            cache.nodes = {k: Descriptor.model_validate(v) for k, v in data["nodes"].items()}
            cache.groups = {
                k: [Descriptor.model_validate(d) for d in v] for k, v in data["groups"].items()
            }
            cache.checks = {
                str(k): (None if v is None else float(v)) for k, v in data["checks"].items()
            }
            cache.reasons = {str(k): str(v) for k, v in data["reasons"].items()}
            cache.members = {
                str(k): Descriptor.model_validate(v) for k, v in data["members"].items()
            }
            cache.member_ungraded = {str(k) for k in data["member_ungraded"]}
            cache.layouts = dict(data["layouts"])
            cache.shaping = {str(k): dict(v) for k, v in data["shaping"].items()}
            return cache
        except (OSError, ValueError, KeyError, TypeError):
            return None


class GroupReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    parent: str
    worst: float
    pair: tuple[str, str] | None


class DescribeResult(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    descriptors: dict[str, Descriptor]
    keys: dict[str, str]
    groups: tuple[GroupReport, ...]
    vacuity: dict[str, tuple[str, ...]]
    ungraded: tuple[str, ...]
    engine_fidelity: dict[str, float]


def describe_tree(
    root: SourceNode,
    engine: DescriptorEngine,
    cache: DescriptorCache,
    options: PipelineOptions,
    log: CallLog,
    progress: Progress | None = None,
    cancel: CancelToken | None = None,
) -> DescribeResult:
    sig = engine.signature
    final: dict[str, Descriptor] = {}
    keys: dict[str, str] = {}
    groups: list[GroupReport] = []
    vacuity: dict[str, tuple[str, ...]] = {}
    ungraded: list[str] = []
    fidelity: dict[str, float] = {}
    # Drafts of nodes whose group has not been finalized yet.
    draft: dict[str, Descriptor] = {}

    def node_desc(node: SourceNode) -> Descriptor:
        key = keys[node.id]
        cache.node_used.add(key)
        hit = cache.nodes.get(key)
        if hit is not None:
            cache.hits += 1
            return hit
        cache.misses += 1
        if node.is_leaf:
            log.add("describe_leaf", node)
            d = engine.describe_leaf(node)
        else:
            log.add("describe_branch", node)
            d = engine.describe_branch(node, [(c, final[c.id]) for c in node.children])
        cache.nodes[key] = d
        return d

    for node in root.post_order():
        if cancel is not None:
            cancel.check()
        if node.is_leaf:
            keys[node.id] = leaf_key(sig, node)
            draft[node.id] = node_desc(node)
            if progress:
                progress(1)
            continue
        if node.id in keys:
            raise BuildError(f"duplicate node id {node.id!r} in the source tree")
        kids = node.children
        gkey = group_key(sig, node, [keys[c.id] for c in kids])
        cache.group_used.add(gkey)
        cached = cache.groups.get(gkey)
        mkeys = [member_key(sig, node, keys[c.id]) for c in kids]
        left: set[str] = set()  # member keys left ungraded in this group
        if cached is not None and len(cached) == len(kids):
            cache.hits += 1
            descs = list(cached)
            left = {mk for mk in mkeys if mk in cache.member_ungraded or mk in cache.prior_ungraded}
        else:
            cache.misses += 1
            # Siblings whose own subtree and parent did not change since the previous build keep
            # the line they had there: re-contrasting a changed group rewrites only the changed
            # members, so an incremental rebuild calls the engine on the changed path alone.
            pinned = {
                i: cache.prior_members[mk]
                for i, mk in enumerate(mkeys)
                if mk in cache.prior_members
            }
            start = [pinned.get(i, draft[c.id]) for i, c in enumerate(kids)]
            failed: list[str] = []
            descs = _finish_group(
                node,
                start,
                engine,
                options,
                log,
                final,
                failed,
                fidelity,
                cache,
                keys,
                frozenset(pinned),
            )
            left = {mk for mk, c in zip(mkeys, kids, strict=True) if c.id in failed}
            left |= {mkeys[i] for i in pinned if mkeys[i] in cache.prior_ungraded}
            cache.groups[gkey] = descs
        for c, mk, d in zip(kids, mkeys, descs, strict=True):
            cache.member_used.add(mk)
            cache.members[mk] = d
            if mk in left:
                cache.member_ungraded.add(mk)
                ungraded.append(c.id)
            else:
                cache.member_ungraded.discard(mk)
        for c, d in zip(kids, descs, strict=True):
            final[c.id] = d
            flags = vacuity_flags(c.title, d)
            if flags:
                vacuity[c.id] = tuple(flags)
        score, i, j = worst_pair(descs)
        groups.append(
            GroupReport(
                parent=node.id, worst=score, pair=(kids[i].id, kids[j].id) if i >= 0 else None
            )
        )
        keys[node.id] = branch_key(sig, node, gkey)
        draft[node.id] = node_desc(node)
        if progress:
            progress(1)
    final[root.id] = draft[root.id]
    return DescribeResult(
        descriptors=final,
        keys=keys,
        groups=tuple(groups),
        vacuity=vacuity,
        ungraded=tuple(ungraded),
        engine_fidelity=fidelity,
    )


def _contrast_loop(
    parent: SourceNode,
    kids: list[SourceNode],
    descs: list[Descriptor],
    engine: DescriptorEngine,
    options: PipelineOptions,
    log: CallLog,
    force_first: bool,
    fixed: frozenset[int] = frozenset(),
) -> list[Descriptor]:
    """``fixed``: members whose lines are kept (pinned by the previous build); the engine sees
    them as context, only the others are rewritten."""
    worst = worst_pair(descs)[0]
    for rnd in range(max(options.max_contrast_rounds, 1)):
        if worst < options.collision_threshold and not (force_first and rnd == 0):
            break
        log.add("contrast", parent)
        got = engine.contrast(parent, list(zip(kids, descs, strict=True)))
        if len(got) != len(descs):
            raise BuildError(f"engine {engine.name} returned {len(got)} of {len(descs)} items")
        new = [descs[i] if i in fixed else d for i, d in enumerate(got)]
        new_worst = worst_pair(new)[0]
        if new_worst > worst and not (force_first and rnd == 0):
            break  # the round made it worse: keep what we had
        improved = new_worst < worst
        descs, worst = new, new_worst
        if not improved and rnd > 0:
            break
    return descs


def _dj(d: Descriptor) -> str:
    return d.model_dump_json()


def _finish_group(
    parent: SourceNode,
    descs: list[Descriptor],
    engine: DescriptorEngine,
    options: PipelineOptions,
    log: CallLog,
    final: Mapping[str, Descriptor],
    ungraded: list[str],
    fidelity: dict[str, float],
    cache: DescriptorCache,
    keys: Mapping[str, str],
    fixed: frozenset[int] = frozenset(),
) -> list[Descriptor]:
    """Contrast, then grade/repair with re-grading and re-contrast (B22). Grades, fidelity
    scores and repairs are cached on everything they depend on. Members in ``fixed`` keep the
    final line the previous build gave them (they were graded then): they are context for the
    contrast but are never rewritten, graded or repaired again, so an incremental rebuild
    makes no engine call for a sibling outside the changed path."""
    kids = parent.children
    sig = engine.signature

    def grade(node: SourceNode, d: Descriptor, siblings: list[Descriptor]) -> str | None:
        key = _h(sig, "grade", keys[node.id], _dj(d), *map(_dj, siblings))
        cache.check_used.add(key)
        if key not in cache.checks:
            log.add("grade", node)
            g = engine.grade(node, d, siblings)
            if g is None:
                log.undo()
                cache.checks[key] = None
            else:
                bad = g.failed or g.score < options.grade_threshold
                cache.checks[key] = g.score if not g.failed else -1.0
                if bad:
                    why = g.reason or "the grade could not be read"
                    cache.reasons[key] = (
                        why if g.failed else f"grade {g.score:.2f}: {g.reason}".rstrip(": ")
                    )
        score = cache.checks[key]
        if score is None:
            return None
        if score < 0 or score < options.grade_threshold:
            return cache.reasons.get(key, "the grade could not be read")
        return None

    def fid(node: SourceNode, d: Descriptor) -> float | None:
        key = _h(sig, "fidelity", keys[node.id], _dj(d))
        cache.check_used.add(key)
        if key not in cache.checks:
            log.add("fidelity", node)
            value = engine.fidelity(node, d)
            if value is None:
                log.undo()
            cache.checks[key] = value
        return cache.checks[key]

    def repair(node: SourceNode, why: str, current: Descriptor) -> Descriptor:
        grand = [(g, final[g.id]) for g in node.children]
        why = f"{why}. Rejected lines: what={current.what!r} when={current.when!r}"
        key = _h(sig, "repair", keys[node.id], why, *(_dj(d) for _, d in grand))
        hit = cache.nodes.get(key)
        cache.node_used.add(key)
        if hit is not None:
            return hit
        if node.is_leaf:
            log.add("repair_leaf", node)
            out = engine.describe_leaf(node, feedback=why)
        else:
            log.add("repair_branch", node)
            out = engine.describe_branch(node, grand, feedback=why)
        cache.nodes[key] = out
        return out

    if len(fixed) == len(kids):
        return list(descs)
    if len(kids) >= 2:
        # Round one always runs: contrast is what turns shared words into distinguishing ones.
        descs = _contrast_loop(parent, kids, descs, engine, options, log, True, fixed)
    for attempt in range(options.max_repairs + 1):
        failing: list[tuple[int, str]] = []
        for i, (node, d) in enumerate(zip(kids, descs, strict=True)):
            if i in fixed:
                fkey = _h(sig, "fidelity", keys[node.id], _dj(d))
                known = cache.checks.get(fkey)
                if fkey in cache.checks:
                    cache.check_used.add(fkey)
                if known is not None:
                    fidelity[node.id] = known
                continue
            reasons = vacuity_flags(node.title, d)
            bad = grade(node, d, [x for j, x in enumerate(descs) if j != i])
            if bad:
                reasons.append(bad)
            f = fid(node, d)
            if f is not None:
                fidelity[node.id] = f
                if f < options.fidelity_repair_below:
                    reasons.append(f"the content does not match what the line promises ({f:.1f}/5)")
            if reasons:
                failing.append((i, "; ".join(reasons)))
        if not failing:
            break
        if attempt == options.max_repairs:
            ungraded.extend(kids[i].id for i, _ in failing)
            break
        for i, why in failing:
            descs[i] = repair(kids[i], why, descs[i])
        if len(kids) >= 2 and worst_pair(descs)[0] >= options.collision_threshold:
            descs = _contrast_loop(parent, kids, descs, engine, options, log, False, fixed)
    return descs
