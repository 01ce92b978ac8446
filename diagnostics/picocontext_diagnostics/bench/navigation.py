"""``scripts/bench.sh navigation [--corpus NAME]``: navigation quality on corpora nobody here
wrote.

``--corpus stdlib`` (the default) is described below. ``--corpus manpages`` (Debian manual
pages, :mod:`picocontext_diagnostics.bench.manpages`) and ``--corpus pytest-docs`` (pytest's
Sphinx docs, :mod:`picocontext_diagnostics.bench.pytest_docs`) are third-party corpora derived
at run time; their cases were written before any manifest of them was built (the rule is in
``resources/corpora/<name>/README.md``). For those, every named navigator of
:data:`picocontext.manifest.routing.NAVIGATORS` runs at 4k and 32k, with two reference lines:
the oracle (opens exactly the target's path, same budget) and a flat BM25 ranking of all
leaves (top-1 over their descriptors, and over their full text, budget ignored).

``--expand-model NAME`` (e.g. ``qwen2.5-coder-0.5b``) also runs ``subtree-expand`` on every
corpus: that local model rewrites each query once (cached under the user cache directory,
``expansions/NAME.json``; the seconds per query cover the calls made in this run only).
``--embed-model NAME`` also runs ``subtree-embed`` (:mod:`picocontext.manifest.embedrank`):
that model's mean-pooled hidden states embed every leaf descriptor and query once (cached
under the user cache directory, ``embeddings/``; the seconds per text cover this run's calls).

``--llm-model NAME [--llm-cases N]`` (third-party corpora) adds the LLM navigator at 4k over
the first N cases (default 10; every call prefills the whole frontier, slow on a small CPU):
``llm`` decodes freely (an invalid reply is re-prompted once), ``llm-constrained`` decodes
its verb and node id under a grammar of the valid options. Seconds per call, re-prompts and
invalid replies are printed and written under ``llm`` in the JSON.

The stdlib corpus is the docstrings of the running Python's standard library
(:mod:`picocontext_diagnostics.bench.stdlib_docs`, ~40 everyday modules); the cases are
``resources/corpora/stdlib/cases.json`` (questions written as a user asks them, without the
target's name). In one run:

1. ``pcx build --kind docs --budgets 4k,32k`` with our offline engine;
2. the reference's ``pcx build --fake`` (askfaro-progressive-context 0.5.1) on the same folder;
3. our eval harness (:func:`picocontext.manifest.eval.run_eval`, KeywordNavigator, view
   ``full``, the same protocol text charged) on every manifest at 4k and 32k: navigation
   success, first-hop precision, oracle reachability and the flat-list baseline.

The reference builder, its install and the mapping of case targets to each builder's node ids
are :mod:`picocontext_diagnostics.bench.navigation_reference`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import platformdirs

from picocontext import ModelError
from picocontext.cli import run_command
from picocontext.manifest import (
    NAVIGATORS,
    CachedEmbedder,
    DescriptorIndex,
    EvalReport,
    KeywordNavigator,
    LLMNavigator,
    Manifest,
    NavCase,
    QueryExpander,
    load_cases,
    make_navigator,
    mean_pool,
    run_eval,
    terms,
)
from picocontext_diagnostics.bench import manpages, pytest_docs
from picocontext_diagnostics.bench.navigation_reference import (
    cases_for,
    ensure_reference,
    load_lenient,
    run_reference_build,
)
from picocontext_diagnostics.bench.stdlib_docs import NAV_MODULES, write_corpus

ROOT = Path(__file__).resolve().parents[3]
CASES = ROOT / "resources" / "corpora" / "stdlib" / "cases.json"
BUDGETS = (4096, 32768)


def score(
    manifest: Manifest,
    cases: list[NavCase],
    budget: int,
    navigator: str = "keyword",
    expansion: Expansion | None = None,
    embedding: Embedding | None = None,
) -> dict[str, Any]:
    expander = expansion.expander(manifest) if expansion is not None else None
    embedder = embedding.embedder if embedding is not None else None
    nav = (
        KeywordNavigator()
        if navigator == "keyword"
        else make_navigator(navigator, expander=expander, embedder=embedder)
    )
    report: EvalReport = run_eval(manifest, cases, nav, budget=budget)
    if expansion is not None and expander is not None:
        expansion.keep(expander)
    if embedding is not None:
        embedding.keep()
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


def expansions_path(model: str) -> Path:
    return Path(platformdirs.user_cache_dir("picocontext")) / "expansions" / f"{model}.json"


class Expansion:
    """A local model loaded once for ``subtree-expand``; its answers cached on disk."""

    def __init__(self, model_name: str) -> None:
        from picocontext.models import load_model

        self.name = model_name
        self.model = load_model(model_name, prefix_cache=False, constrained=False)
        self.cache = QueryExpander.load(expansions_path(model_name))
        self.calls = 0
        self.seconds = 0.0
        self.hint = ""

    def expander(self, manifest: Manifest) -> QueryExpander:
        """An expander whose hint is the root line of the first manifest of the corpus (one
        hint per corpus: the 32k variant's root lists its branches differently, and the
        model is asked once per query, not once per variant)."""
        self.hint = self.hint or manifest.root.what
        return QueryExpander(self.model, hint=self.hint, cache=self.cache)

    def keep(self, expander: QueryExpander) -> None:
        self.cache.update(expander.cache)
        self.calls += expander.calls
        self.seconds += expander.seconds
        QueryExpander(self.model, cache=self.cache).save(expansions_path(self.name))

    def summary(self) -> dict[str, Any]:
        per = self.seconds / self.calls if self.calls else 0.0
        return {"model": self.name, "calls": self.calls, "seconds_per_query": round(per, 2)}


EMBED_BATCH = 16  # texts per forward pass: ~6x faster per text than one at a time on CPU


class Embedding:
    """A local model loaded once for ``subtree-embed``; its descriptor embeddings cached on
    disk (:class:`picocontext.manifest.CachedEmbedder`)."""

    def __init__(self, model_name: str) -> None:
        from picocontext.models import load_model

        self.name = model_name
        self.model = load_model(model_name, prefix_cache=False, constrained=False)
        self.embedder = CachedEmbedder(self.embed, model_id=self.model.model_id)

    def embed(self, texts: Sequence[str]) -> Any:
        """Mean-pooled final hidden states, batched by length so padding stays small."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        rows: dict[int, Any] = {}
        for start in range(0, len(order), EMBED_BATCH):
            chunk = order[start : start + EMBED_BATCH]
            states = self.model.hidden_states_batch([texts[i] for i in chunk])
            for i, vec in zip(chunk, mean_pool(states, self.model.hidden_size), strict=True):
                rows[i] = vec
        return [rows[i] for i in range(len(texts))]

    def keep(self) -> None:
        self.embedder.save()

    def summary(self) -> dict[str, Any]:
        e = self.embedder
        per = e.seconds / e.embedded if e.embedded else 0.0
        return {
            "model": self.name,
            "embedded": e.embedded,
            "cached": e.cached,
            "seconds_per_text": round(per, 3),
        }


def print_embedding(summary: dict[str, Any]) -> None:
    print(
        f"subtree-embed: {summary['model']}, {summary['embedded']} texts embedded this run "
        f"({summary['seconds_per_text']} s per text), {summary['cached']} served from the "
        "cache (descriptors and queries)"
    )


def nav_row(
    manifest: Manifest,
    cases: list[NavCase],
    name: str,
    budget: int,
    expansion: Expansion | None = None,
    embedding: Embedding | None = None,
) -> dict[str, Any]:
    expander = expansion.expander(manifest) if expansion is not None else None
    embedder = embedding.embedder if embedding is not None else None
    nav = make_navigator(name, expander=expander, embedder=embedder)
    report = run_eval(manifest, cases, nav, budget=budget)
    if expansion is not None and expander is not None:
        expansion.keep(expander)
    if embedding is not None:
        embedding.keep()
    return report_row(manifest, report)


def target_opened(report: EvalReport) -> float:
    """The stricter success: the target node itself was opened (for a document cut into
    pages, its list of pages revealed) rather than one of its pages read."""
    hits = sum(r.success and r.path[-1] == r.target for r in report.cases)
    return hits / max(len(report.cases), 1)


def first_leaf_right(manifest: Manifest, report: EvalReport) -> float:
    """The share of cases whose first leaf opened was the target (or one of its pages): a
    navigator that reads several leaves reaches more targets than it picks first."""
    hits = 0
    for r in report.cases:
        first = next((i for i in r.path if manifest.get(i).is_leaf or i == r.target), None)
        hits += first is not None and (first == r.target or r.target in manifest.ancestors(first))
    return hits / max(len(report.cases), 1)


class _ContentBM25:
    """Flat BM25 over the leaves' full text: a reference line no budget-honest navigator can
    use (it reads payloads nobody opened)."""

    def __init__(self, leaves: dict[str, str]) -> None:
        self.bags = {i: _bag(t) for i, t in leaves.items()}
        df: dict[str, int] = {}
        for bag in self.bags.values():
            for t in bag:
                df[t] = df.get(t, 0) + 1
        n = max(len(self.bags), 1)
        self.idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
        self.avg = sum(sum(b.values()) for b in self.bags.values()) / n

    def top(self, query: str) -> str | None:
        q = set(terms(query))
        best: tuple[float, str] | None = None
        for nid, bag in self.bags.items():
            norm = 1.2 * (0.25 + 0.75 * sum(bag.values()) / self.avg)
            s = sum(self.idf[t] * bag[t] * 2.2 / (bag[t] + norm) for t in q if t in bag)
            if s > 0 and (best is None or (s, nid) > best):
                best = (s, nid)
        return best[1] if best else None


def _bag(text: str) -> dict[str, int]:
    bag: dict[str, int] = {}
    for t in terms(text):
        bag[t] = bag.get(t, 0) + 1
    return bag


def _owner(manifest: Manifest, leaf: str, target: str) -> bool:
    """A flat hit counts when it is the target or one of its pages/sections."""
    return leaf == target or target in manifest.ancestors(leaf)


def flat_rows(manifest: Manifest, cases: list[NavCase], leaves: dict[str, str]) -> dict[str, Any]:
    index = DescriptorIndex(manifest)
    content = _ContentBM25({i: leaves.get(i, "") for i in manifest.leaf_ids})
    desc_hits = sum(_owner(manifest, index.best_leaf(c.query) or "", c.target) for c in cases)
    text_hits = sum(_owner(manifest, content.top(c.query) or "", c.target) for c in cases)
    n = len(cases)
    return {
        "bm25_descriptors": round(desc_hits / n, 3),
        "bm25_content": round(text_hits / n, 3),
    }


def gates(stats: dict[str, Any]) -> dict[str, Any]:
    """The build's descriptor-quality measures: distinctiveness (worst sibling similarity,
    groups over the collision threshold, lines flagged vacuous) and lexical fidelity."""
    return {
        "max_sibling_similarity": stats["max_sibling_similarity"],
        "colliding_groups": stats["colliding_groups"],
        "vacuity_flagged": stats["vacuity_flagged"],
        "fidelity_mean": stats["fidelity_mean"],
        "fidelity_flagged": stats["fidelity_flagged"],
    }


THIRD_PARTY = {
    "manpages": ("docs", manpages.ensure_corpus),
    "pytest-docs": ("files", pytest_docs.ensure_corpus),
}


def third_party_ids(name: str, corpus: Path) -> dict[str, str]:
    if name == "manpages":
        return manpages.page_ids(corpus)
    return pytest_docs.origin_ids(corpus)


class LLMBench:
    """One local chat model driving the LLM navigator free and constrained on a case subset."""

    def __init__(self, model_name: str, cases: int) -> None:
        from picocontext.models import load_model

        self.name = model_name
        self.cases = cases
        self.model = load_model(model_name, prefix_cache=True, constrained=False)
        self.stats: dict[str, Any] = {"model": model_name, "cases": cases}

    def rows(self, manifest: Manifest, cases: list[NavCase], label: str) -> dict[str, Any]:
        rows: dict[str, Any] = {}
        subset = cases[: self.cases]
        self.stats["of_cases"] = len(cases)
        free = LLMNavigator(self.model)
        for nav in (free, LLMNavigator(self.model, decoding="constrained")):
            self.model.reset_cache()  # each navigator starts cold
            report = run_eval(manifest, subset, nav, budget=int(label[:-1]) * 1024)
            rows[f"{nav.name}@{label}"] = report_row(manifest, report)
            per = nav.seconds / nav.calls if nav.calls else 0.0
            self.stats[f"{nav.name}@{label}"] = {
                "calls": nav.calls,
                "seconds_per_call": round(per, 2),
                "reprompts": nav.reprompts,
                "invalid_replies": nav.invalid,
                "errors": report.errors,
                "first_replies": [reply for _, reply in nav.transcript[:8]],
            }
        return rows


def report_row(manifest: Manifest, report: EvalReport) -> dict[str, Any]:
    """One row of the navigation table for an eval report (:func:`nav_row`, the LLM rows)."""
    return {
        "success": round(report.navigation_success, 3),
        "target_opened": round(target_opened(report), 3),
        "first_leaf_right": round(first_leaf_right(manifest, report), 3),
        "first_hop_precision": round(report.first_hop_precision, 3),
        "avg_hops": round(report.avg_hops, 2),
        "avg_tokens_to_answer": round(report.avg_tokens_to_answer, 1),
        "avg_shown_tokens": round(report.avg_shown_tokens, 1),
        "oracle_success": round(report.oracle_success, 3),
        "avg_oracle_tokens": round(report.avg_oracle_tokens, 1),
        "first_view_tokens": report.first_view_tokens,
        "misses": [
            {"query": r.query, "target": r.target, "route": [*r.path], "steps": [*r.looks]}
            for r in report.cases
            if not r.success
        ],
    }


def print_llm(stats: dict[str, Any]) -> None:
    print(
        f"llm rows: {stats['model']}, the first {stats['cases']} of {stats.get('of_cases', '?')}"
        " cases only (a subset: compare them with each other, not with the full rows)"
    )
    for name, s in stats.items():
        if isinstance(s, dict):
            print(
                f"  {name}: {s['calls']} calls, {s['seconds_per_call']} s per call, "
                f"{s['reprompts']} re-prompts, {s['invalid_replies']} invalid replies, "
                f"{s['errors']} case errors"
            )


def run_third_party(
    name: str,
    out: Path,
    navigators: Sequence[str],
    expansion: Expansion | None = None,
    llm: LLMBench | None = None,
    embedding: Embedding | None = None,
    build_model: str | None = None,
) -> int:
    """``build_model``: describe the corpus with the LLM engine on that local model instead
    of the offline engine (the seconds per described node are reported)."""
    kind, ensure = THIRD_PARTY[name]
    try:
        corpus, n_docs = ensure()
    except (manpages.CorpusUnavailable, pytest_docs.CorpusUnavailable) as exc:
        print(f"{name}: the corpus is not available here: {exc}", file=sys.stderr)
        return 2
    raw = load_cases(ROOT / "resources" / "corpora" / name / "cases.json")
    ids = third_party_ids(name, corpus)
    results: dict[str, Any] = {"corpus": name, "documents": n_docs, "cases": len(raw)}
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        built = Path(tmp) / "out"
        t0, wall = time.process_time(), time.perf_counter()
        argv_build = [str(corpus), "--kind", kind, "--budgets", "4k,32k", "--out", str(built)]
        if build_model is not None:
            argv_build += ["--engine", "llm", "--model", build_model]
        stats = io.StringIO()
        with contextlib.redirect_stdout(stats):
            rc = run_command(
                "pcx",
                ["build", *argv_build, "--source-id", "corpus", "--quiet", "--json"],
                prog="pcx",
            )
        results["build_cpu_seconds"] = round(time.process_time() - t0, 2)
        if rc != 0:
            raise SystemExit(f"our build failed with exit code {rc}")
        built_stats = json.loads(stats.getvalue())
        results["gates"] = gates(built_stats)
        results["build_engine"] = f"llm:{build_model}" if build_model else "offline"
        if build_model is not None:
            seconds = time.perf_counter() - wall
            calls = sum(built_stats.get("engine_calls", {}).values())
            results["build_wall_seconds"] = round(seconds, 1)
            results["engine_calls"] = built_stats.get("engine_calls", {})
            results["seconds_per_node"] = round(seconds / max(built_stats["nodes"], 1), 2)
            results["seconds_per_call"] = round(seconds / max(calls, 1), 2)
        for b in BUDGETS:
            label = f"{b // 1024}k"
            m, _ = load_lenient(built / f"corpus.pcx.{label}.json")
            leaves = json.loads((built / f"corpus.leaves.{label}.json").read_text("utf-8"))
            cases = [NavCase(query=c.query, target=ids[c.target]) for c in raw]
            results[f"nodes@{label}"] = len(m.nodes)
            results[f"leaves@{label}"] = len(m.leaf_ids)
            for nav in navigators:
                rows[f"{nav}@{label}"] = nav_row(m, cases, nav, b)
            if expansion is not None:
                rows[f"subtree-expand@{label}"] = nav_row(m, cases, "subtree-expand", b, expansion)
            if embedding is not None:
                row = nav_row(m, cases, "subtree-embed", b, embedding=embedding)
                rows[f"subtree-embed@{label}"] = row
            if llm is not None and b == 4096:
                rows.update(llm.rows(m, cases, label))
            rows[f"flat@{label}"] = flat_rows(m, cases, leaves)
    results["rows"] = rows
    if expansion is not None:
        results["expansion"] = expansion.summary()
    if embedding is not None:
        results["embedding"] = embedding.summary()
    if llm is not None:
        results["llm"] = llm.stats
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print_third_party(results)
    if llm is not None:
        print_llm(llm.stats)
    print(f"wrote {out}")
    return 0


def print_third_party(results: dict[str, Any]) -> None:
    g = results["gates"]
    print(f"{results['corpus']}: {results['documents']} documents, {results['cases']} cases")
    if "seconds_per_node" in results:
        print(
            f"descriptors: {results['build_engine']}, {results['build_wall_seconds']} s "
            f"({results['seconds_per_node']} s per node, {results['seconds_per_call']} s per "
            f"engine call: {results['engine_calls']})"
        )
    print(
        f"gates: worst sibling similarity {g['max_sibling_similarity']}, colliding groups "
        f"{g['colliding_groups']}, vacuous lines {g['vacuity_flagged']}, lexical fidelity "
        f"{g['fidelity_mean']} (flagged {g['fidelity_flagged']})"
    )
    print(
        f"{'navigator@budget':<24}{'success':>9}{'strict':>8}{'1st-leaf':>9}{'1st-hop':>9}"
        f"{'hops':>6}{'tok/answer':>12}{'shown':>8}"
    )
    oracle_shown: set[str] = set()
    for name, r in results["rows"].items():
        if name.startswith("flat@"):
            label = name.split("@")[1]
            print(
                f"{'bm25 flat, descriptors@' + label:<24}{r['bm25_descriptors']:>9.0%}"
                f"   (full text: {r['bm25_content']:.0%}, budget ignored)"
            )
            continue
        print(
            f"{name:<24}{r['success']:>9.0%}{r['target_opened']:>8.0%}"
            f"{r['first_leaf_right']:>9.0%}{r['first_hop_precision']:>9.0%}"
            f"{r['avg_hops']:>6.1f}{r['avg_tokens_to_answer']:>12.0f}{r['avg_shown_tokens']:>8.0f}"
        )
        label = name.split("@")[1]
        if label not in oracle_shown:
            oracle_shown.add(label)
            print(
                f"{'oracle@' + label:<24}{r['oracle_success']:>9.0%}{'':>32}"
                f"{r['avg_oracle_tokens']:>12.0f}"
            )
    if "expansion" in results:
        e = results["expansion"]
        print(
            f"subtree-expand: {e['model']}, {e['calls']} model calls this run, "
            f"{e['seconds_per_query']} s per query (cached answers are not timed)"
        )
    if "embedding" in results:
        print_embedding(results["embedding"])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--corpus", choices=["stdlib", *THIRD_PARTY], default="stdlib")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--no-reference", action="store_true")
    p.add_argument(
        "--navigators", default=",".join(NAVIGATORS), help="comma-separated navigator names"
    )
    p.add_argument(
        "--expand-model",
        default=None,
        help="also run subtree-expand with this local model (e.g. qwen2.5-coder-0.5b)",
    )
    p.add_argument(
        "--embed-model",
        default=None,
        help="also run subtree-embed on this local model's hidden states (qwen2.5-coder-0.5b)",
    )
    p.add_argument(
        "--build-model",
        default=None,
        help="build with the LLM descriptor engine on this local model (third-party corpora)",
    )
    add_llm_options(p)
    args = p.parse_args(argv)
    if args.llm_model and args.corpus == "stdlib":
        p.error("--llm-model runs on the third-party corpora (--corpus manpages|pytest-docs)")
    if args.build_model and args.corpus == "stdlib":
        p.error("--build-model runs on the third-party corpora (--corpus manpages|pytest-docs)")
    expansion = Expansion(args.expand_model) if args.expand_model else None
    embedding = Embedding(args.embed_model) if args.embed_model else None
    if args.corpus != "stdlib":
        out = args.out or ROOT / "out" / "bench" / f"navigation-{args.corpus}.json"
        llm = LLMBench(args.llm_model, args.llm_cases) if args.llm_model else None
        navs = args.navigators.split(",")
        return run_third_party(
            args.corpus, out, navs, expansion, llm, embedding, build_model=args.build_model
        )
    args.out = args.out or ROOT / "out" / "bench" / "navigation.json"
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
            for nav in args.navigators.split(","):
                if nav != "keyword":
                    row = {**score(m, cs, b, nav), "cases": len(cs), "missing": missing}
                    rows[f"ours/{nav}@{label}"] = row
            if expansion is not None:
                row = score(m, cs, b, "subtree-expand", expansion)
                rows[f"ours/subtree-expand@{label}"] = {**row, "cases": len(cs), "missing": missing}
            if embedding is not None:
                row = score(m, cs, b, "subtree-embed", embedding=embedding)
                rows[f"ours/subtree-embed@{label}"] = {**row, "cases": len(cs), "missing": missing}
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
    if expansion is not None:
        results["expansion"] = expansion.summary()
    if embedding is not None:
        results["embedding"] = embedding.summary()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    head = f"{'build@budget':<26}{'success':>9}{'1st-hop':>9}{'oracle':>8}{'flat':>7}"
    head += f"{'1st view':>10}{'tok/answer':>12}"
    print(
        f"{results['documents']} docstring documents, {len(raw)} cases, Python {results['python']}"
    )
    print(head)
    for name, r in rows.items():
        if "error" in r:
            print(f"{name:<26}  {r['error']}")
            continue
        print(
            f"{name:<26}{r['navigation_success']:>9.0%}{r['first_hop_precision']:>9.0%}"
            f"{r['oracle_success']:>8.0%}{r['flat_list_success']:>7.0%}"
            f"{r['first_view_tokens']:>10}{r['avg_tokens_to_answer']:>12.0f}"
        )
    if embedding is not None:
        print_embedding(results["embedding"])
    print(f"wrote {args.out}")
    return 0


def add_llm_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--llm-model",
        default=None,
        help="also run the LLM navigator, free and constrained, at 4k (e.g. qwen2.5-coder-0.5b)",
    )
    p.add_argument(
        "--llm-cases", type=int, default=10, help="how many cases (the first N) the LLM rows use"
    )


def run(argv: Sequence[str] | None = None) -> int:
    """:func:`main`, with a model that cannot be loaded (an unknown name, a failed fetch) as
    one line on stderr instead of a traceback."""
    try:
        return main(argv)
    except ModelError as exc:
        print(f"navigation: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run())
