"""``scripts/bench.sh build``: a full build and a one-file-changed incremental rebuild of a
>= 1,000-document corpus (the standard library's docstrings, methods included), ours vs the
reference (askfaro-progressive-context 0.5.1, ``--fake``), in one run.

For each builder it reports wall time and descriptor-engine calls. After the change (one
sentence appended to one document) it reports every engine call of the rebuild and how many
touched a node *outside* the changed document's path (the document and its ancestors, in
any budget variant) -- our target is zero. Ours is then also rebuilt, from the same full
build's cache, with each of ``--sweep`` other documents changed in turn (spread evenly over the
sorted corpus), and the worst outside count over all of them is reported. The reference is
driven through its API (``compile_source(prior_manifest=...)``), since its CLI cannot rebuild
incrementally.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picocontext.build import BuildOptions, OfflineEngine, compile_tree, load_source
from picocontext_diagnostics.bench.navigation import ROOT
from picocontext_diagnostics.bench.navigation_reference import ensure_reference
from picocontext_diagnostics.bench.stdlib_docs import BUILD_EXTRA, NAV_MODULES, write_corpus

CHANGED = "shutil/shutil.copytree.md"
CHANGED_ID = "shutil/shutil.copytree"
APPEND = "\nThis sentence was appended by the incremental benchmark.\n"

REFERENCE_DRIVER = r"""
import json, sys, time
from pathlib import Path
from askfaro_progressive_context.build.adapters import get_adapter
from askfaro_progressive_context.build.compiler import compile_source
from askfaro_progressive_context.build.descriptors import FakeDescriptorModel

corpus, changed, append = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
calls = []

class Counting(FakeDescriptorModel):
    def describe_leaf(self, node, *, feedback=None):
        calls.append(("describe_leaf", node.id))
        return super().describe_leaf(node, feedback=feedback)

    def describe_branch(self, node, children, *, feedback=None):
        calls.append(("describe_branch", node.id))
        return super().describe_branch(node, children, feedback=feedback)

def load():
    a = get_adapter("docs")
    a = a() if isinstance(a, type) else a
    return a.load(corpus, source_id="stdlib")

t0 = time.perf_counter(); c0 = time.process_time()
first = compile_source(load(), Counting(), [4096, 32768])
full_s = time.perf_counter() - t0; full_cpu = time.process_time() - c0
full_calls = len(calls)
prior = first.manifests[32768]
path = corpus / changed
path.write_text(path.read_text() + append)
calls.clear()
t0 = time.perf_counter(); c0 = time.process_time()
tree = load()
again = compile_source(tree, Counting(), [4096, 32768], prior_manifest=prior)
inc_s = time.perf_counter() - t0; inc_cpu = time.process_time() - c0
nodes = sum(1 for _ in tree.root.walk())
print(json.dumps({"full_seconds": full_s, "full_calls": full_calls, "nodes": nodes,
                  "full_cpu": full_cpu, "incremental_cpu": inc_cpu,
                  "incremental_seconds": inc_s, "incremental_calls": calls,
                  "stats": {k: again.stats.get(k) for k in ("reused", "regenerated")}}))
"""


def _leaf_ids(corpus: Path) -> dict[str, str]:
    """Relative file path -> leaf id, from the adapter's own origins."""
    tree = load_source(corpus, "docs", "stdlib")
    out: dict[str, str] = {}
    for node in tree.root.walk():
        if node.is_leaf and node.origin:
            origin = Path(node.origin)
            rel = origin.relative_to(corpus) if origin.is_absolute() else origin
            out[rel.as_posix()] = node.id
    return out


def sweep(corpus: Path, first: Any, opts: BuildOptions, n: int) -> list[dict[str, Any]]:
    """Rebuild once per changed document, for ``n`` documents spread over the corpus."""
    ids = _leaf_ids(corpus)
    names = sorted(ids)
    picks = [names[(i * len(names)) // n] for i in range(n)] if n > 0 else []
    rows = []
    for rel in picks:
        path = corpus / rel
        original = path.read_text(encoding="utf-8")
        path.write_text(original + APPEND, encoding="utf-8")
        try:
            again = compile_tree(
                load_source(corpus, "docs", "stdlib"),
                OfflineEngine(),
                opts,
                cache=first.cache,
                incremental=True,
                watch=frozenset({ids[rel]}),
            )
        finally:
            path.write_text(original, encoding="utf-8")
        rows.append(
            {"changed": rel, "calls": len(again.log.calls), "outside": len(again.log.outside)}
        )
    return rows


def ours(corpus: Path, n_sweep: int = 0) -> dict[str, Any]:
    opts = BuildOptions(budgets=(4096, 32768))
    t0, c0 = time.perf_counter(), time.process_time()
    first = compile_tree(load_source(corpus, "docs", "stdlib"), OfflineEngine(), opts)
    full_s, full_cpu = time.perf_counter() - t0, time.process_time() - c0
    path = corpus / CHANGED
    original = path.read_text(encoding="utf-8")
    path.write_text(original + APPEND, encoding="utf-8")
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        tree = load_source(corpus, "docs", "stdlib")
        again = compile_tree(
            tree,
            OfflineEngine(),
            opts,
            cache=first.cache,
            incremental=True,
            watch=frozenset({CHANGED_ID}),
        )
        inc_s, inc_cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        path.write_text(original, encoding="utf-8")
    outside = again.log.outside
    swept = sweep(corpus, first, opts, n_sweep)
    return {
        "documents": first.stats.leaves,
        "nodes": first.stats.nodes,
        "full_seconds": round(full_s, 2),
        "full_cpu_seconds": round(full_cpu, 2),
        "full_engine_calls": len(first.log.calls),
        "variants": [v.model_dump() for v in first.variants],
        "incremental_seconds": round(inc_s, 2),
        "incremental_cpu_seconds": round(inc_cpu, 2),
        "incremental_engine_calls": len(again.log.calls),
        "incremental_calls_outside_changed_path": len(outside),
        "incremental_calls": again.log.calls,
        "outside_examples": outside[:10],
        "sweep": swept,
        "sweep_max_calls": max((r["calls"] for r in swept), default=0),
        "sweep_max_outside": max((r["outside"] for r in swept), default=0),
    }


def reference(corpus: Path) -> dict[str, Any]:
    ref, how = ensure_reference()
    if ref is None:
        return {"error": how}
    env = {**os.environ, "PYTHONPATH": str(ref)}
    proc = subprocess.run(
        [sys.executable, "-c", REFERENCE_DRIVER, str(corpus), CHANGED, APPEND],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-600:]}
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    ref_id = "shutil-copytree"
    calls = [tuple(c) for c in data["incremental_calls"]]
    ancestors = {ref_id, "shutil", "r"}
    outside = [c for c in calls if c[1] not in ancestors]
    return {
        "nodes": data["nodes"],
        "full_seconds": round(data["full_seconds"], 2),
        "full_cpu_seconds": round(data["full_cpu"], 2),
        "full_engine_calls": data["full_calls"],
        "incremental_seconds": round(data["incremental_seconds"], 2),
        "incremental_cpu_seconds": round(data["incremental_cpu"], 2),
        "incremental_engine_calls": len(calls),
        "incremental_calls_outside_changed_path": len(outside),
        "stats": data["stats"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "build.json")
    p.add_argument("--no-reference", action="store_true")
    p.add_argument(
        "--sweep", type=int, default=6, help="also rebuild with each of N other documents changed"
    )
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "stdlib"
        n = write_corpus(corpus, NAV_MODULES + BUILD_EXTRA, methods=True)
        if n < 1000:
            raise SystemExit(f"the corpus has only {n} documents; the benchmark needs 1,000")
        if args.sweep < 0:
            raise SystemExit("--sweep must be >= 0")
        ours_row = ours(corpus, args.sweep)
        ref_row = {"error": "skipped"} if args.no_reference else reference(corpus)
    result = {"documents": n, "changed": CHANGED, "ours": ours_row, "reference": ref_row}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"{n} documents; one changed: {CHANGED}")
    print(
        f"{'builder':<11}{'full cpu s':>11}{'calls':>8}{'incr cpu s':>11}{'calls':>8}{'outside':>9}"
    )
    for name, row in (("ours", ours_row), ("reference", ref_row)):
        if "error" in row:
            print(f"{name:<11}  {row['error'][:200]}")
            continue
        print(
            f"{name:<11}{row['full_cpu_seconds']:>11.2f}{row['full_engine_calls']:>8}"
            f"{row['incremental_cpu_seconds']:>11.2f}{row['incremental_engine_calls']:>8}"
            f"{row['incremental_calls_outside_changed_path']:>9}"
        )
    if ours_row["sweep"]:
        print(
            f"  ours, {len(ours_row['sweep'])} other one-file changes: at most "
            f"{ours_row['sweep_max_calls']} calls, at most {ours_row['sweep_max_outside']} outside"
        )
    for v in ours_row["variants"]:
        print(
            f"  ours {v['budget']:>6}: baseline {v['manifest_tokens']}, depth {v['depth']}, "
            f"widest {v['max_width']}, {v['verbosity']}, oracle {v['oracle_reachable']:.0%}"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
