"""``scripts/bench.sh distill``: a generated 10,000-leaf conversation corpus through the
distiller with the deterministic fake summarizer and the lexical embedder.

Measures, on a fresh corpus in a temporary directory:

* full build — wall time and the number of summarizer / embed / CAS / node writes;
* no-op work — an empty sweep, a forced rollup over the unchanged tree, and a full reconcile of
  all 10,000 unchanged units (target: zero summarizer, embed and CAS calls, under 1 s);
* a one-leaf edit — summarizer calls against the edited leaf's depth (longest root-to-leaf
  path) and against the spec's locality bound (1 + its ancestors before and after);
* the map diff after that edit (``prune_unchanged``) against the full map, in lines and bytes
  of the JSON an agent would receive.

Each measurement runs in two layouts: ``default`` (the library defaults: id-keyed splits and
deferred views) and ``reference`` (SemHash splits and eager views, as fabriq does). With
deferred views the build and the edit leave view summaries pending; the bench then writes them
all (``Distiller.complete``) and reports those calls separately, so deferred work is counted,
not hidden.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from picocontext.distill import (
    DistillConfig,
    Distiller,
    FakeSummarizer,
    LexicalEmbedder,
    Unit,
    ancestors,
    depth_to,
)

TOPICS = {
    "kiln": "relay element thermocouple cone firing schedule controller shelf",
    "garden": "tomato compost irrigation seedling frost mulch trellis aphid",
    "bike": "chain derailleur brake pad tyre pressure spoke hub cassette",
    "taxes": "receipt deduction invoice deadline quarterly estimate ledger form",
    "travel": "train ticket hotel booking passport luggage transfer itinerary",
    "cooking": "sourdough starter hydration oven crumb proof flour salt",
    "network": "router firmware dhcp lease subnet vlan firewall port",
    "music": "chord scale metronome tempo practice fingering tuning string",
}


def generate(leaves: int, seed: int = 7) -> list[Unit]:
    """Conversations of 50 turns; each conversation keeps to one topic, days cycle over 30."""
    rnd = random.Random(seed)
    names = sorted(TOPICS)
    units = []
    for i in range(leaves):
        conv = i // 50
        topic = names[conv % len(names)]
        words = TOPICS[topic].split()
        question = " ".join(rnd.choice(words) for _ in range(8))
        answer = " ".join(rnd.choice(words) for _ in range(12))
        units.append(
            Unit(
                source_kind="turn",
                unit_id=f"c{conv:04d}:t{i % 50:02d}",
                text=f"User: {topic} question {i}: {question}\nAssistant: {answer} ({i % 97})",
                scopes=(("conversation", f"c{conv:04d}"), ("day", f"2026-11-{1 + conv % 30:02d}")),
                budget=48,
            )
        )
    return units


def _io(d: Distiller) -> dict[str, int]:
    c = d.counters.snapshot()
    return {
        "summaries": c["summaries"],
        "embed_calls": c["embed_calls"],
        "cas_writes": d.cas.writes,
        "cas_reads": d.cas.reads,
        "node_writes": d.store.node_writes,
    }


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in before}


def _timed(d: Distiller, fn: Callable[[], object]) -> dict[str, Any]:
    before = _io(d)
    started = time.perf_counter()
    fn()
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 4), **_delta(before, _io(d))}


LAYOUTS: dict[str, dict[str, str]] = {
    "default": {},
    "reference": {"views": "eager", "split_key": "semhash"},
    # Not run unless asked: what id-keyed splits alone buy (every view still under the root).
    "eager-id": {"views": "eager"},
}


def run(leaves: int, corpus: Path, layout: str = "default") -> dict[str, Any]:
    units = generate(leaves)
    d = Distiller.open(
        corpus,
        FakeSummarizer(),
        LexicalEmbedder(256),
        config=DistillConfig.model_validate(
            {"recipe_version": "bench-v1", "corpus": "bench", **LAYOUTS[layout]}
        ),
    )
    result: dict[str, Any] = {"layout": layout, "leaves": leaves, **LAYOUTS[layout]}
    result["full_build"] = _timed(d, lambda: d.reconcile("turn", units))
    result["full_build"]["pending_views"] = len(d.pending_ids())
    result["full_build_deferred_views"] = _timed(d, d.complete)
    levels = {lv: 0 for lv in (0, 1, 2)}
    for n in d.store.nodes():
        levels[n.level] += 1
    result["nodes"] = {"total": sum(levels.values()), "by_level": levels}
    result["intermediates"] = sum(1 for n in d.store.nodes() if "#" in n.id)
    result["noop_sweep_empty_queue"] = _timed(d, d.sweep)
    result["noop_rollup_forced"] = _timed(d, d.rollup)
    result["noop_reconcile_all_units"] = _timed(d, lambda: d.reconcile("turn", units))

    known = d.snapshot(with_summaries=False).known_hashes()
    leaf_parents = len(d.store.get(units[leaves // 2].node_id).parent_ids)  # type: ignore[union-attr]
    tools = d.tools()
    full_map = tools.map().wire()
    edited = units[leaves // 2]
    leaf_id = edited.node_id
    anc_before = ancestors(d, leaf_id)
    new_unit = edited.model_copy(update={"text": edited.text + " (edited: one more fact)"})
    result["one_leaf_edit"] = _timed(
        d, lambda: d.reconcile("turn", [*units[: leaves // 2], new_unit, *units[leaves // 2 + 1 :]])
    )
    anc_after = ancestors(d, leaf_id)
    depth = depth_to(d, leaf_id)
    calls = result["one_leaf_edit"]["summaries"]
    created = sorted(set(d.snapshot(with_summaries=False).known_hashes()) - set(known))
    bound = 1 + len(anc_before | anc_after | set(created))
    pending = d.pending_ids()
    # The map an agent gets right after the edit, before any pending view is written (its
    # ContentHashes are already exact; writing the summaries changes no ContentHash).
    diff = tools.map(known_hashes=known, prune_unchanged=True).wire()
    flagged = tools.map(known_hashes=known).wire()
    deferred = _timed(d, d.complete)
    result["one_leaf_edit"].update(
        {
            "leaf": leaf_id,
            "leaf_parents": leaf_parents,
            "leaf_depth": depth,
            "calls_le_depth_plus_1": calls <= depth + 1,
            "ancestors_before_or_after": len(anc_before | anc_after),
            "created_intermediates": len(created),
            "locality_bound": bound,
            "calls_le_locality_bound": calls <= bound,
            "pending_views": pending,
            "deferred_view_calls": deferred["summaries"],
            "deferred_view_seconds": deferred["seconds"],
            "total_calls_with_views": calls + deferred["summaries"],
            "total_le_locality_bound": calls + deferred["summaries"] <= bound,
        }
    )
    result["map"] = {
        "full_lines": len(full_map["lines"]),
        "full_bytes": len(json.dumps(full_map, separators=(",", ":"))),
        "diff_lines": len(diff["lines"]),
        "diff_changed_lines": sum(1 for x in diff["lines"] if not x.get("unchanged")),
        "diff_bytes": len(json.dumps(diff, separators=(",", ":"))),
        "flag_only_bytes": len(json.dumps(flagged, separators=(",", ":"))),
    }
    result["map"]["diff_fraction_of_full"] = round(
        result["map"]["diff_bytes"] / result["map"]["full_bytes"], 5
    )
    d.close()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.sh distill", description=__doc__)
    parser.add_argument("--leaves", type=int, default=10_000)
    parser.add_argument("--output", type=Path, default=Path("out/bench/distill.json"))
    parser.add_argument("--corpus", type=Path, default=None, help="keep the corpus here")
    parser.add_argument(
        "--layout",
        action="append",
        choices=sorted(LAYOUTS),
        default=None,
        help="default (deferred views, id splits), reference (eager, SemHash) or eager-id "
        "(eager, id splits); repeatable; default and reference unless given",
    )
    args = parser.parse_args(argv)
    layouts = args.layout or ["default", "reference"]
    results: dict[str, Any] = {}
    for layout in layouts:
        if args.corpus is not None:
            results[layout] = run(args.leaves, args.corpus / layout, layout)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                results[layout] = run(args.leaves, Path(tmp) / "corpus", layout)
    output = {
        "layouts": results,
        "machine": {"python": sys.version.split()[0], "platform": platform.platform()},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(output, indent=2) + "\n", encoding="utf-8")
    for layout, result in results.items():
        print(f"== layout {layout} {LAYOUTS[layout] or '(library defaults)'}")
        _report(result)
    print(f"wrote {args.output}")
    return 0


def _report(result: dict[str, Any]) -> None:
    fb, views, noop, edit, m = (
        result["full_build"],
        result["full_build_deferred_views"],
        result["noop_reconcile_all_units"],
        result["one_leaf_edit"],
        result["map"],
    )
    print(
        f"full build: {result['leaves']} leaves -> {result['nodes']['total']} nodes in "
        f"{fb['seconds']:.2f}s ({fb['summaries']} summaries, {fb['embed_calls']} embed calls); "
        f"{fb['pending_views']} view summaries deferred, written later in "
        f"{views['seconds']:.2f}s ({views['summaries']} summaries)"
    )
    print(
        f"no-op reconcile of all units: {noop['seconds']:.3f}s, summaries={noop['summaries']} "
        f"embeds={noop['embed_calls']} cas_writes={noop['cas_writes']} "
        f"cas_reads={noop['cas_reads']} node_writes={noop['node_writes']}; forced rollup "
        f"{result['noop_rollup_forced']['seconds']:.3f}s"
    )
    print(
        f"one-leaf edit: {edit['summaries']} summaries (leaf has {edit['leaf_parents']} parents, "
        f"depth {edit['leaf_depth']}, so <= depth + 1: {edit['calls_le_depth_plus_1']}), "
        f"{edit['seconds']:.3f}s; {len(edit['pending_views'])} views pending, written later "
        f"with {edit['deferred_view_calls']} summaries in {edit['deferred_view_seconds']:.3f}s; "
        f"total {edit['total_calls_with_views']} vs locality bound {edit['locality_bound']} "
        f"(1 + {edit['ancestors_before_or_after']} ancestors before/after + "
        f"{edit['created_intermediates']} created, overlaps counted once)"
    )
    print(
        f"map: full {m['full_lines']} lines / {m['full_bytes']} B; diff {m['diff_lines']} lines / "
        f"{m['diff_bytes']} B ({m['diff_fraction_of_full']:.2%})"
    )


if __name__ == "__main__":
    raise SystemExit(main())
