"""``scripts/bench.sh navigation``: navigation quality on a real corpus nobody here wrote.

The corpus is the docstrings of the running Python's standard library
(:mod:`picocontext_diagnostics.bench.stdlib_docs`, ~40 everyday modules); the cases are
``resources/corpora/stdlib/cases.json`` (questions written as a user asks them, without the
target's name). In one run:

1. ``pcx build --kind docs --budgets 4k,32k`` with our offline engine;
2. the reference's ``pcx build --fake`` (askfaro-progressive-context 0.5.1) on the same folder;
3. our eval harness (:func:`picocontext.manifest.eval.run_eval`, KeywordNavigator, view
   ``full``, the same protocol text charged) on every manifest at 4k and 32k: navigation
   success, first-hop precision, oracle reachability and the flat-list baseline.

The reference is installed with ``pip install --no-deps --target`` into the user cache the
first time (it is a zero-dependency wheel). If it cannot be installed, its rows say why.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import ValidationError

from picocontext.build import path_id
from picocontext.cli import run_command
from picocontext.manifest import (
    EvalReport,
    KeywordNavigator,
    Manifest,
    NavCase,
    load_cases,
    run_eval,
)
from picocontext_diagnostics.bench.stdlib_docs import NAV_MODULES, write_corpus

REFERENCE = "askfaro-progressive-context==0.5.1"
ROOT = Path(__file__).resolve().parents[3]
CASES = ROOT / "resources" / "corpora" / "stdlib" / "cases.json"
BUDGETS = (4096, 32768)


def reference_dir() -> Path:
    return Path(platformdirs.user_cache_dir("picocontext")) / "reference" / "askfaro-0.5.1"


def ensure_reference() -> tuple[Path | None, str]:
    target = reference_dir()
    if (target / "askfaro_progressive_context" / "cli.py").is_file():
        return target, "cached"
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target"]
    proc = subprocess.run(
        [*cmd, str(target), REFERENCE], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        return None, f"could not install {REFERENCE}: {proc.stderr.strip()[-300:]}"
    return target, "installed"


def run_reference_build(corpus: Path, out: Path, ref: Path) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(ref)}
    code = "import sys; from askfaro_progressive_context.cli import main; sys.exit(main())"
    args = ["build", str(corpus), "--kind", "docs", "--budgets", "4k,32k", "--fake"]
    args += ["--out", str(out), "--source-id", "stdlib"]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"reference build failed: {proc.stderr.strip()[-500:]}")
    return time.perf_counter() - t0, proc.stdout


def load_lenient(path: Path) -> tuple[Manifest, list[str]]:
    """Load a manifest; when the reference wrote lines over the schema limit (its B2) or
    duplicate child refs (its B1), clip/dedupe them so it can still be scored, and say so."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    notes: list[str] = []
    try:
        return Manifest.model_validate(data), notes
    except ValidationError:
        pass
    for node in [data["root"], *data["nodes"].values()]:
        for key in ("what", "when"):
            if isinstance(node.get(key), str) and len(node[key]) > 160:
                node[key] = node[key][:160]
                notes.append(f"clipped an over-long {key}")
        if isinstance(node.get("children"), list):
            seen = list(dict.fromkeys(node["children"]))
            if len(seen) != len(node["children"]):
                notes.append("dropped duplicate child refs")
            node["children"] = seen
    return Manifest.model_validate(data), sorted(set(notes))


def reference_slug(text: str) -> str:
    """The reference's slugify: lowercase, runs of non-alphanumerics become one ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "node"


def ours_target(qual: str, module: str) -> str:
    return path_id([module, qual])


def module_of(qual: str) -> str:
    for name in sorted(NAV_MODULES, key=len, reverse=True):
        if qual.startswith(name + "."):
            return name
    return qual.split(".")[0]


def cases_for(manifest: Manifest, raw: list[NavCase], mapper: str) -> tuple[list[NavCase], int]:
    out = []
    missing = 0
    for c in raw:
        if mapper == "ours":
            tid = ours_target(c.target, module_of(c.target))
        else:
            tid = reference_slug(c.target)
        if tid in manifest.nodes:
            out.append(NavCase(query=c.query, target=tid))
        else:
            missing += 1
    return out, missing


def score(manifest: Manifest, cases: list[NavCase], budget: int) -> dict[str, Any]:
    report: EvalReport = run_eval(manifest, cases, KeywordNavigator(), budget=budget)
    return {
        "navigation_success": round(report.navigation_success, 3),
        "first_hop_precision": round(report.first_hop_precision, 3),
        "oracle_success": round(report.oracle_success, 3),
        "flat_list_success": round(report.flat_list_success, 3),
        "flat_list_tokens": report.flat_list_tokens,
        "first_view_tokens": report.first_view_tokens,
        "avg_tokens_to_answer": round(report.avg_tokens_to_answer, 1),
        "avg_hops": round(report.avg_hops, 2),
        "misses": [
            {"query": r.query, "target": r.target, "route": list(r.path), "why": r.stop_reason}
            for r in report.cases
            if not r.success
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "navigation.json")
    p.add_argument("--no-reference", action="store_true")
    args = p.parse_args(argv)
    raw = load_cases(CASES)
    results: dict[str, Any] = {
        "python": platform.python_version(),
        "modules": len(NAV_MODULES),
        "cases": len(raw),
        "navigator": "keyword",
        "view": "full",
    }
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "stdlib"
        results["documents"] = write_corpus(corpus, NAV_MODULES)
        ours_out = Path(tmp) / "ours"
        t0 = time.perf_counter()
        argv_build = [str(corpus), "--kind", "docs", "--budgets", "4k,32k"]
        argv_build += ["--out", str(ours_out), "--source-id", "stdlib", "--quiet", "--json"]
        rc = run_command("pcx", ["build", *argv_build], prog="pcx")
        results["ours_build_seconds"] = round(time.perf_counter() - t0, 2)
        if rc != 0:
            raise SystemExit(f"our build failed with exit code {rc}")
        rows: dict[str, Any] = {}
        for b in BUDGETS:
            label = f"{b // 1024}k"
            m, _ = load_lenient(ours_out / f"stdlib.pcx.{label}.json")
            cs, missing = cases_for(m, raw, "ours")
            rows[f"ours@{label}"] = {**score(m, cs, b), "cases": len(cs), "missing": missing}
        ref = None if args.no_reference else ensure_reference()
        if ref is None or ref[0] is None:
            why = "skipped (--no-reference)" if ref is None else ref[1]
            for b in BUDGETS:
                rows[f"reference@{b // 1024}k"] = {"error": why}
        else:
            ref_out = Path(tmp) / "ref"
            secs, _ = run_reference_build(corpus, ref_out, ref[0])
            results["reference_build_seconds"] = round(secs, 2)
            for b in BUDGETS:
                label = f"{b // 1024}k"
                m, notes = load_lenient(ref_out / f"stdlib.pcx.{label}.json")
                cs, missing = cases_for(m, raw, "reference")
                row = {**score(m, cs, b), "cases": len(cs), "missing": missing, "notes": notes}
                rows[f"reference@{label}"] = row
    results["rows"] = rows
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    head = f"{'build@budget':<16}{'success':>9}{'1st-hop':>9}{'oracle':>8}{'flat':>7}"
    head += f"{'1st view':>10}{'tok/answer':>12}"
    print(
        f"{results['documents']} docstring documents, {len(raw)} cases, Python {results['python']}"
    )
    print(head)
    for name, r in rows.items():
        if "error" in r:
            print(f"{name:<16}  {r['error']}")
            continue
        print(
            f"{name:<16}{r['navigation_success']:>9.0%}{r['first_hop_precision']:>9.0%}"
            f"{r['oracle_success']:>8.0%}{r['flat_list_success']:>7.0%}"
            f"{r['first_view_tokens']:>10}{r['avg_tokens_to_answer']:>12.0f}"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
