"""``compile_tree``: source tree -> validated, shaped manifests for every budget.

Order: (optional) flatten single-child hops; corpus statistics (reused from the previous build
with ``incremental``); cross-links on the natural tree; then for each budget, shaping attempts
-- richest verbosity first, widest frontier first -- each one described (through the shared
Merkle-keyed cache, so only new groups cost engine calls), emitted and self-checked, until one
passes. A budget no attempt can satisfy raises :class:`SelfCheckFailed`; a failed quality gate
raises :class:`GateFailed`. Nothing is written here; :func:`write_outputs` writes a result
that passed.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from picocontext.build.adapters import load_source
from picocontext.build.describe import (
    CallLog,
    DescribeResult,
    DescriptorCache,
    PipelineOptions,
    describe_tree,
)
from picocontext.build.emit import (
    VERBOSITIES,
    Verbosity,
    build_manifest,
    leaf_store,
    llms_txt,
)
from picocontext.build.engines.base import DescriptorEngine
from picocontext.build.errors import ConfigError, GateFailed, SelfCheckFailed
from picocontext.build.ir import SourceNode, SourceTree, flatten_single_child
from picocontext.build.links import betweenness, graph_of, infer_links
from picocontext.build.quality import lexical_fidelity
from picocontext.build.shape import (
    CheckResult,
    LayoutMemory,
    initial_width,
    self_check,
    shape_tree,
    wide_reveals,
)
from picocontext.build.signals import IdfSnapshot, Signals, node_text
from picocontext.cancel import CancelToken
from picocontext.manifest.model import Manifest
from picocontext.manifest.runtime import ViewLevel
from picocontext.manifest.session import DEFAULT_PROTOCOL
from picocontext.manifest.tokens import HeuristicCounter, TextCounter
from picocontext.manifest.validate import dump_json

MIN_WIDTH = {"rich": 6, "standard": 5, "compact": 3}
LINE_GUESS = {"rich": 45.0, "standard": 32.0, "compact": 24.0}


class BuildOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    budgets: tuple[int, ...] = Field(min_length=1)
    collision_threshold: float = Field(default=0.5, ge=0, le=1)
    max_contrast_rounds: int = Field(default=2, ge=1)
    max_repairs: int = Field(default=1, ge=0)
    grade_threshold: float = Field(default=0.7, ge=0, le=1)
    max_collision: float | None = Field(default=None, ge=0, le=1)
    min_fidelity: float | None = Field(default=None, ge=1, le=5)
    fidelity: Literal["lexical", "engine"] = "lexical"
    cross_links: bool = False
    link_k: int = Field(default=3, ge=1)
    link_min_sim: float = Field(default=0.3, ge=0, le=1)
    flatten: bool = False
    reveal_share: float = Field(default=0.3, gt=0, le=1)
    leaf_share: float = Field(default=0.35, gt=0, le=1)
    max_attempts: int = Field(default=8, ge=1)
    # The protocol text the reader will be shown first. The self-check proves every leaf
    # reachable with it charged: a policy with a short protocol of its own must not be refused
    # a build because the default protocol (three times longer) would not have fitted.
    # ``None``: the default protocol, the manifest's own usage text.
    check_protocol: str | None = None
    # The view level the reader is shown (its frontier lines). The oracle walks at that level:
    # a policy that shows brief lines must not be refused a build because full lines (with
    # their "when" and keys, about twice as long) would not have fitted.
    check_view: ViewLevel = "full"


def _checked(manifest: Manifest, counter: TextCounter, options: BuildOptions) -> CheckResult:
    """The self-check with the protocol text the reader will be shown."""
    protocol = options.check_protocol if options.check_protocol is not None else DEFAULT_PROTOCOL
    return self_check(manifest, counter, protocol, view=options.check_view)


class Progress:
    """Receives progress; the CLI draws a bar, the API default is silent."""

    def start(self, label: str, total: int) -> None:
        del label, total

    def advance(self, n: int = 1) -> None:
        del n

    def finish(self) -> None:
        return None


class VariantReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    budget: int
    manifest_tokens: int
    nodes: int
    leaves: int
    depth: int
    max_width: int
    verbosity: str
    width: int
    leaf_cap: int
    clusters: int
    pages: int
    attempts: int
    oracle_reachable: float
    max_oracle_tokens: int
    max_sibling_similarity: float
    schema_checked: bool


class BuildStats(BaseModel):
    model_config = ConfigDict(frozen=True)

    source_id: str
    kind: str
    engine: str
    nodes: int
    leaves: int
    branches: int
    full_tokens: int
    engine_calls: dict[str, int]
    cache_hits: int
    cache_misses: int
    max_sibling_similarity: float
    colliding_groups: int
    worst_pairs: tuple[tuple[float, str, str], ...]
    vacuity_flagged: int
    ungraded: int
    fidelity_mean: float
    fidelity_flagged: int
    cross_links: int
    bridge_nodes: tuple[tuple[str, float], ...]
    warnings: tuple[str, ...]
    seconds: float
    incremental: bool
    # source entries the walk refused, each ``path: reason`` (a symlink leading outside the
    # source folder, a FIFO, a device): never read, never indexed
    skipped: tuple[str, ...] = ()


class BuildResult(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    source_id: str
    manifests: dict[int, Manifest]
    leaves: dict[int, dict[str, str]]
    llms_txt: str
    variants: tuple[VariantReport, ...]
    stats: BuildStats
    log: CallLog
    cache: DescriptorCache


def _depth_width(manifest: Manifest) -> tuple[int, int]:
    depth = max((n.tier or 0) for n in manifest.nodes.values()) if manifest.nodes else 0
    width = max(
        [len(manifest.root.children or ())]
        + [len(n.children or ()) for n in manifest.nodes.values()]
    )
    return depth, width


def compile_tree(
    tree: SourceTree,
    engine: DescriptorEngine,
    options: BuildOptions,
    *,
    counter: TextCounter | None = None,
    cache: DescriptorCache | None = None,
    incremental: bool = False,
    progress: Progress | None = None,
    cancel: CancelToken | None = None,
    watch: frozenset[str] = frozenset(),
) -> BuildResult:
    """``watch``: leaf ids known to have changed; the call log then lists every engine call
    made outside their paths (``result.log.outside``)."""
    t0 = time.perf_counter()
    counter = counter or HeuristicCounter()
    progress = progress or Progress()
    budgets = tuple(sorted(set(options.budgets)))
    if any(b < 1 for b in budgets):
        raise ConfigError("budgets must be positive integers")
    warnings = list(tree.warnings)
    canonical = tree.root
    if options.flatten:
        removed = flatten_single_child(canonical)
        if removed:
            warnings.append(f"flatten removed {removed} single-child hop(s)")
    leaves = [n for n in canonical.walk() if n.is_leaf and n is not canonical]
    if not leaves:
        raise ConfigError(f"source {tree.source_id!r} has no content to index")
    idf: IdfSnapshot | None = None
    if incremental and cache is not None and "idf" in cache.extra:
        try:
            idf = IdfSnapshot.from_json(cache.extra["idf"])
        except ValueError:
            idf = None
    if idf is None:
        idf = IdfSnapshot.from_texts(node_text(n) for n in leaves)
    signals = Signals(idf)
    engine.bind(signals)
    old = cache if incremental and cache is not None else None
    work = DescriptorCache(engine.signature)
    if old is not None:
        work.nodes.update(old.nodes)
        work.groups.update(old.groups)
        work.checks.update(old.checks)
        work.reasons.update(old.reasons)
        # Only the previous build's final lines pin unchanged siblings (see describe_tree).
        work.prior_members = dict(old.members)
        work.prior_ungraded = frozenset(old.member_ungraded)
    work.extra["idf"] = idf.to_json()
    layouts = LayoutMemory(old.layouts if old is not None else None)
    prior_shaping = old.shaping if old is not None else {}
    log = CallLog(watch)
    popts = PipelineOptions(
        collision_threshold=options.collision_threshold,
        max_contrast_rounds=options.max_contrast_rounds,
        max_repairs=options.max_repairs,
        grade_threshold=options.grade_threshold,
    )
    links = (
        infer_links(canonical, signals, k=options.link_k, min_sim=options.link_min_sim)
        if (options.cross_links)
        else {}
    )
    bridges: tuple[tuple[str, float], ...] = ()
    if links:
        bc = betweenness(graph_of(canonical, links))
        ranked = sorted(((k, v) for k, v in bc.items() if v > 0), key=lambda kv: (-kv[1], kv[0]))
        bridges = tuple(ranked[:5])

    manifests: dict[int, Manifest] = {}
    stores: dict[int, dict[str, str]] = {}
    reports: list[VariantReport] = []
    described: dict[int, DescribeResult] = {}
    n_nodes = sum(1 for _ in canonical.walk())
    origins = {n.id: n.origin for n in canonical.walk() if n.origin}
    for budget in budgets:
        progress.start(f"{budget} tokens", n_nodes)
        found = _shape_budget(
            tree,
            canonical,
            budget,
            budgets,
            engine,
            work,
            popts,
            log,
            counter,
            signals,
            links,
            options,
            progress,
            cancel,
            layouts,
            prior_shaping.get(str(budget)),
        )
        progress.finish()
        manifest, shaped_root, desc, check, verbosity, stats_s, attempts, state = found
        work.shaping[str(budget)] = state
        manifests[budget] = manifest
        stores[budget] = leaf_store(shaped_root)
        described[budget] = desc
        depth, width = _depth_width(manifest)
        reports.append(
            VariantReport(
                budget=budget,
                manifest_tokens=manifest.variant.manifest_tokens or 0,
                nodes=len(manifest.nodes) + 1,
                leaves=len(manifest.leaf_ids),
                depth=depth,
                max_width=width,
                verbosity=verbosity.name,
                width=stats_s[0],
                leaf_cap=stats_s[1],
                clusters=stats_s[2],
                pages=stats_s[3],
                attempts=attempts,
                oracle_reachable=check.reachable / max(check.leaves, 1),
                max_oracle_tokens=check.max_oracle_tokens,
                max_sibling_similarity=max((g.worst for g in desc.groups), default=0.0),
                schema_checked=check.schema_checked,
            )
        )
    work.layouts = layouts.current
    # Gates and quality stats over every emitted variant.
    pairs: list[tuple[float, str, str]] = []
    colliding: set[tuple[int, str]] = set()
    vacuity: set[str] = set()
    ungraded: set[str] = set()
    for budget, desc in described.items():
        for g in desc.groups:
            if g.pair is not None:
                pairs.append((round(g.worst, 4), *g.pair))
            if g.worst >= options.collision_threshold:
                colliding.add((budget, g.parent))
        vacuity.update(desc.vacuity)
        ungraded.update(desc.ungraded)
    pairs = sorted(set(pairs), key=lambda p: (-p[0], p[1], p[2]))
    worst = pairs[0][0] if pairs else 0.0
    biggest = manifests[budgets[-1]]
    fid_scores = _fidelity(biggest, stores[budgets[-1]], described[budgets[-1]], options)
    fid_mean = sum(fid_scores.values()) / len(fid_scores) if fid_scores else 5.0
    stats = BuildStats(
        source_id=tree.source_id,
        kind=tree.kind,
        engine=engine.signature,
        nodes=n_nodes,
        leaves=len(leaves),
        branches=n_nodes - len(leaves),
        full_tokens=biggest.full_tokens or 0,
        engine_calls=dict(Counter(k for k, _ in log.calls)),
        cache_hits=work.hits,
        cache_misses=work.misses,
        max_sibling_similarity=worst,
        colliding_groups=len(colliding),
        worst_pairs=tuple(pairs[:10]),
        vacuity_flagged=len(vacuity),
        ungraded=len(ungraded),
        fidelity_mean=round(fid_mean, 3),
        fidelity_flagged=sum(1 for v in fid_scores.values() if v < 3.0),
        cross_links=sum(len(v) for v in links.values()),
        bridge_nodes=bridges,
        warnings=tuple(warnings),
        seconds=round(time.perf_counter() - t0, 3),
        incremental=old is not None,
        skipped=tuple(tree.skipped),
    )
    failures = []
    if options.max_collision is not None and worst > options.max_collision:
        top = pairs[0]
        failures.append(
            f"--max-collision {options.max_collision}: siblings {top[1]!r} and {top[2]!r} are "
            f"{top[0]:.2f} alike"
        )
    if options.min_fidelity is not None and fid_mean < options.min_fidelity:
        failures.append(f"--min-fidelity {options.min_fidelity}: mean fidelity is {fid_mean:.2f}")
    if failures:
        raise GateFailed("quality gate failed: " + "; ".join(failures))
    _prune(work, described)
    return BuildResult(
        source_id=tree.source_id,
        manifests=manifests,
        leaves=stores,
        llms_txt=llms_txt(biggest, origins),
        variants=tuple(reports),
        stats=stats,
        log=log,
        cache=work,
    )


def _prune(cache: DescriptorCache, described: dict[int, DescribeResult]) -> None:
    """Keep only what this build used (in any shaping attempt), so the cache does not grow
    without bound while a rebuild that retraces the same attempts finds all of them."""
    del described
    cache.nodes = {k: v for k, v in cache.nodes.items() if k in cache.node_used}
    cache.checks = {k: v for k, v in cache.checks.items() if k in cache.check_used}
    cache.reasons = {k: v for k, v in cache.reasons.items() if k in cache.check_used}
    cache.groups = {k: v for k, v in cache.groups.items() if k in cache.group_used}
    cache.members = {k: v for k, v in cache.members.items() if k in cache.member_used}
    cache.member_ungraded &= cache.member_used


def _fidelity(
    manifest: Manifest,
    store: dict[str, str],
    desc: DescribeResult,
    options: BuildOptions,
) -> dict[str, float]:
    if options.fidelity == "engine" and desc.engine_fidelity:
        return dict(desc.engine_fidelity)
    from picocontext.build.quality import Descriptor

    out: dict[str, float] = {}
    for nid, node in manifest.nodes.items():
        d = Descriptor(what=node.what, when=node.when, keywords=tuple(node.keywords or ()))
        if node.is_leaf:
            content = store.get(nid, "")
        else:
            content = " ".join(
                (manifest.nodes[c].title or "") + " " + manifest.nodes[c].what
                for c in node.children or ()
            )
        out[nid] = lexical_fidelity(d, content or node.title or nid)
    return out


_Found = tuple[
    Manifest,
    SourceNode,
    DescribeResult,
    CheckResult,
    Verbosity,
    tuple[int, int, int, int],
    int,
    dict[str, Any],
]


def _prior_state(
    prior: dict[str, Any] | None,
) -> tuple[Verbosity, int, int, dict[str, int]] | None:
    """The shaping state the previous build settled on for this budget, if it is readable."""
    if not prior:
        return None
    try:
        verbosity = next(v for v in VERBOSITIES if v.name == prior["verbosity"])
        overrides = {str(k): int(v) for k, v in dict(prior["overrides"]).items()}
        return verbosity, int(prior["width"]), int(prior["leaf_cap"]), overrides
    except (KeyError, StopIteration, TypeError, ValueError):
        return None


def _shape_budget(
    tree: SourceTree,
    canonical: SourceNode,
    budget: int,
    budgets: tuple[int, ...],
    engine: DescriptorEngine,
    cache: DescriptorCache,
    popts: PipelineOptions,
    log: CallLog,
    counter: TextCounter,
    signals: Signals,
    links: dict[str, list[tuple[str, str]]],
    options: BuildOptions,
    progress: Progress,
    cancel: CancelToken | None,
    layouts: LayoutMemory,
    prior: dict[str, Any] | None = None,
) -> _Found:
    last: CheckResult | None = None
    attempts = 0

    def state_of(v: Verbosity, w: int, cap: int, ov: dict[str, int]) -> dict[str, Any]:
        return {
            "verbosity": v.name,
            "width": w,
            "leaf_cap": cap,
            "overrides": dict(sorted(ov.items())),
        }

    def attempt(
        v: Verbosity, w: int, cap: int, ov: dict[str, int]
    ) -> tuple[SourceNode, tuple[int, int, int, int], DescribeResult, Manifest]:
        shaped, sstats = shape_tree(
            canonical,
            width=w,
            leaf_cap=cap,
            counter=counter,
            signals=signals,
            overrides=ov,
            layouts=layouts,
        )
        desc = describe_tree(
            shaped, engine, cache, popts, log, progress=progress.advance, cancel=cancel
        )
        manifest = build_manifest(
            shaped,
            desc.descriptors,
            source_id=tree.source_id,
            kind=tree.kind,
            budget=budget,
            siblings=budgets,
            counter=counter,
            verbosity=v,
            links=links,
        )
        stats = (sstats.width, sstats.leaf_cap, sstats.clusters, sstats.pages)
        return shaped, stats, desc, manifest

    # An incremental build first retries the shape the previous build settled on: while it
    # still passes the self-check, one edited page cannot reshape (and so re-describe) the
    # rest of the tree.
    settled = _prior_state(prior)
    if settled is not None:
        attempts += 1
        shaped, stats, desc, manifest = attempt(*settled)
        check = _checked(manifest, counter, options)
        if check.ok:
            return manifest, shaped, desc, check, settled[0], stats, attempts, dict(prior or {})
    for verbosity in VERBOSITIES:
        width = initial_width(budget, LINE_GUESS[verbosity.name], options.reveal_share)
        leaf_cap = max(16, int(budget * options.leaf_share))
        floor = MIN_WIDTH[verbosity.name]
        overrides: dict[str, int] = {}
        tried: set[tuple[int, int, tuple[tuple[str, int], ...]]] = set()
        while attempts < options.max_attempts * len(VERBOSITIES):
            state = (width, leaf_cap, tuple(sorted(overrides.items())))
            if state in tried:
                break
            tried.add(state)
            attempts += 1
            shaped, stats, desc, manifest = attempt(verbosity, width, leaf_cap, overrides)
            lines = [n.desc_tokens or 0 for n in manifest.nodes.values()]
            line_avg = sum(lines) / max(len(lines), 1)
            fitted = initial_width(budget, line_avg, options.reveal_share)
            if fitted < width * 0.85 and fitted >= floor:
                width = fitted
                continue
            # Any single reveal over its share is re-clustered narrower before checking.
            wide = wide_reveals(shaped, manifest, options.reveal_share * budget)
            merged = {k: min(v, overrides.get(k, width)) for k, v in wide.items()}
            if any(overrides.get(k) != v for k, v in merged.items()):
                overrides.update(merged)
                continue
            check = _checked(manifest, counter, options)
            if check.ok:
                done = state_of(verbosity, width, leaf_cap, overrides)
                return manifest, shaped, desc, check, verbosity, stats, attempts, done
            last = check
            if any(p.startswith(("schema:", "structure:")) for p in check.problems):
                raise SelfCheckFailed(budget, check.problems)
            # A leaf whose path fits but whose content does not is paged smaller; a path that
            # does not fit by itself needs a narrower tree.
            # An unreachable leaf bigger than a quarter of the budget is paged smaller; any
            # other unreachable leaf (or a path that does not fit at all) needs a narrower tree.
            big = {
                u
                for u, r in check.room.items()
                if r is not None and (manifest.nodes[u].tokens or 0) > 0.25 * budget
            }
            narrow = not check.room or len(big) < len(check.room)
            if big:
                leaf_cap = max(int(0.15 * budget), int(leaf_cap * 0.6), 32)
            if narrow:
                if width <= floor:
                    break
                width = max(floor, int(width * 0.7))
    problems = last.problems if last else ("no shaping attempt could be made",)
    raise SelfCheckFailed(budget, problems)


def compile_source(
    path: Path,
    kind: str,
    engine: DescriptorEngine,
    options: BuildOptions,
    *,
    source_id: str | None = None,
    counter: TextCounter | None = None,
    cache: DescriptorCache | None = None,
    incremental: bool = False,
    progress: Progress | None = None,
    cancel: CancelToken | None = None,
) -> BuildResult:
    """Load ``path`` with the ``kind`` adapter and compile it (see :func:`compile_tree`)."""
    sid = source_id or (path.stem if path.is_file() else path.resolve().name) or "source"
    tree = load_source(path, kind, sid)
    return compile_tree(
        tree,
        engine,
        options,
        counter=counter,
        cache=cache,
        incremental=incremental,
        progress=progress,
        cancel=cancel,
    )


def budget_label(budget: int) -> str:
    return f"{budget // 1024}k" if budget % 1024 == 0 else str(budget)


def write_outputs(result: BuildResult, out_dir: Path, cache_path: Path | None = None) -> list[Path]:
    """Write every file of a successful build atomically (temp file, then rename)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sid = result.source_id
    files: dict[Path, str] = {}
    for budget, manifest in result.manifests.items():
        label = budget_label(budget)
        files[out_dir / f"{sid}.pcx.{label}.json"] = dump_json(manifest)
        files[out_dir / f"{sid}.leaves.{label}.json"] = (
            json.dumps(result.leaves[budget], ensure_ascii=False, indent=1) + "\n"
        )
    files[out_dir / f"{sid}.llms.txt"] = result.llms_txt
    written = []
    for path, text in files.items():
        fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
        written.append(path)
    if cache_path is not None:
        result.cache.save(cache_path)
    return written
