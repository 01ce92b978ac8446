"""Per-budget shaping (B4) and the build's self-check (B2): every variant validates, fits its
baseline and reaches every leaf by an oracle within the budget; otherwise nothing is emitted."""

from __future__ import annotations

from pathlib import Path

import pytest

from picocontext.build.adapters import load_source
from picocontext.build.compiler import BuildOptions, compile_tree
from picocontext.build.engines.offline import OfflineEngine
from picocontext.build.errors import SelfCheckFailed
from picocontext.build.ir import SourceTree
from picocontext.build.shape import oracle_cost, paginate, self_check
from picocontext.manifest.model import Manifest
from picocontext.manifest.session import DEFAULT_PROTOCOL
from picocontext.manifest.tokens import HeuristicCounter
from picocontext.manifest.validate import validate_manifest

TOPICS = [
    "pump valve pressure water flow",
    "lamp light brightness spectrum photoperiod",
    "soil compost nitrogen bed mulch",
    "vent roof airflow humidity fan",
    "seed tray germination sowing label",
    "harvest crate cold room weight",
]


def wide_corpus(root: Path, n: int = 120, big: bool = False) -> None:
    folder = root / "notes"
    folder.mkdir(parents=True)
    for i in range(n):
        words = TOPICS[i % len(TOPICS)]
        body = f"# Note {i:03d} on {words.split()[0]}\n\nThis note covers {words} for bed {i}.\n"
        body += f"\n{words} detail paragraph number {i}. " * 3
        (folder / f"note-{i:03d}.md").write_text(body, encoding="utf-8")
    if big:
        paras = "\n\n".join(
            f"Paragraph {k} about irrigation manifolds and drip lines." * 6 for k in range(120)
        )
        (root / "manual.md").write_text(f"# Irrigation manual\n\n{paras}\n", encoding="utf-8")


def widest(m: Manifest) -> int:
    return max([len(m.root.children or ())] + [len(n.children or ()) for n in m.nodes.values()])


def test_b4_variants_are_shaped_per_budget_and_every_leaf_is_reachable(tmp_path: Path) -> None:
    wide_corpus(tmp_path, n=50)
    tree = load_source(tmp_path, "docs", "wide")
    res = compile_tree(tree, OfflineEngine(), BuildOptions(budgets=(2048, 32768)))
    small, large = res.manifests[2048], res.manifests[32768]
    # The 50-entry folder cannot be revealed whole in 2k: it was re-clustered there only.
    assert widest(small) < 50 <= widest(large)
    assert len(small.nodes) > len(large.nodes)
    counter = HeuristicCounter()
    for budget, m in res.manifests.items():
        assert (m.variant.manifest_tokens or 0) <= budget
        assert validate_manifest(m.to_dict()).ok
        for leaf in m.leaf_ids:
            cost = oracle_cost(m, leaf, counter)
            assert cost is not None and cost <= budget, (budget, leaf)
    reports = {v.budget: v for v in res.variants}
    assert reports[2048].oracle_reachable == 1.0 and reports[2048].clusters > 0
    assert reports[32768].clusters == 0


def test_b4_the_same_tree_unshaped_would_not_be_navigable(tmp_path: Path) -> None:
    """The peer's behaviour (one tree for every budget): at 2k the folder's reveal alone is
    bigger than the budget, so the oracle fails -- which is exactly what shaping prevents."""
    wide_corpus(tmp_path, n=50)
    tree = load_source(tmp_path, "docs", "wide")
    res = compile_tree(tree, OfflineEngine(), BuildOptions(budgets=(32768,)))
    flat = res.manifests[32768]
    as_2k = Manifest.model_validate(
        {
            **flat.to_dict(),
            "variant": {"budget": 2048, "manifest_tokens": flat.variant.manifest_tokens},
        }
    )
    check = self_check(as_2k, HeuristicCounter())
    assert not check.ok and check.unreachable


def test_big_leaf_is_paged_only_where_it_does_not_fit(tmp_path: Path) -> None:
    wide_corpus(tmp_path, n=12, big=True)
    tree = load_source(tmp_path, "docs", "w")
    res = compile_tree(tree, OfflineEngine(), BuildOptions(budgets=(4096, 65536)))
    small, large = res.manifests[4096], res.manifests[65536]
    assert small.get("manual").is_branch and large.get("manual").is_leaf
    pages = small.children_of("manual")
    assert len(pages) >= 2 and pages[0] == "manual~p1"
    store = res.leaves[4096]
    rejoined = "\n\n".join(store[p] for p in pages)
    assert rejoined.strip() == res.leaves[65536]["manual"].strip()


def test_paginate_keeps_every_paragraph_verbatim() -> None:
    counter = HeuristicCounter()
    text = "\n\n".join(f"para {i} " + "x" * (50 + i) for i in range(40))
    pages = paginate(text, 200, counter)
    assert all(counter.count(p) <= 200 for p in pages)
    assert "\n\n".join(pages) == text


def test_b2_impossible_budget_raises_self_check_failed(corpora: Path) -> None:
    tree = load_source(corpora / "docs", "docs", "docs")
    with pytest.raises(SelfCheckFailed) as info:
        compile_tree(tree, OfflineEngine(), BuildOptions(budgets=(120,)))
    assert info.value.budget == 120
    assert any("baseline" in p or "oracle" in p for p in info.value.problems)


def test_self_check_reports_structure_errors() -> None:
    data = {
        "pcx_version": "0.2",
        "source": {"id": "s", "kind": "docs"},
        "variant": {"budget": 4096, "manifest_tokens": 10},
        "root": {"id": "r", "what": "w", "when": "w", "children": ["a", "a"]},
        "nodes": {"a": {"what": "w", "when": "w", "payload": {"ref": "node://a"}}},
    }
    check = self_check(Manifest.model_validate(data), HeuristicCounter())
    assert any("duplicate child ref" in p for p in check.problems)


def _passes(tree: SourceTree, budget: int, protocol: str | None) -> bool:
    try:
        compile_tree(
            tree, OfflineEngine(), BuildOptions(budgets=(budget,), check_protocol=protocol)
        )
    except SelfCheckFailed:
        return False
    return True


def test_the_self_check_charges_the_protocol_the_reader_is_shown(tmp_path: Path) -> None:
    # A reader shown a one-line protocol has room the default protocol's text would take: at
    # the smallest budget that passes with it, the default protocol must not pass.
    wide_corpus(tmp_path, n=12)
    tree = load_source(tmp_path, "docs", "small")
    short = "Lines: id [kind] title: what."
    low, high = 64, 4096
    assert _passes(tree, high, short) and not _passes(tree, low, short)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if _passes(tree, mid, short) else (mid, high)
    assert not _passes(tree, high, None)
    assert _passes(tree, high + 2 * HeuristicCounter().count(DEFAULT_PROTOCOL), None)
