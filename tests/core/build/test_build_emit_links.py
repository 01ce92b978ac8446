"""Emit (B2 self-validated, B16 llms.txt, B18 no stray keys, id == key) and cross-links that
scale (B14)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picocontext.build import links as links_mod
from picocontext.build.adapters import load_source
from picocontext.build.compiler import BuildOptions, compile_tree
from picocontext.build.engines.offline import OfflineEngine
from picocontext.build.ir import SourceNode, SourceTree
from picocontext.build.links import betweenness, infer_links
from picocontext.build.signals import IdfSnapshot, Signals, node_text
from picocontext.manifest.runtime import render_line
from picocontext.manifest.schema import schema_errors
from picocontext.manifest.session import DEFAULT_PROTOCOL
from picocontext.manifest.tokens import HeuristicCounter


@pytest.mark.parametrize(
    ("kind", "rel"),
    [
        ("tools", "tools/verdant-tools.json"),
        ("docs", "docs"),
        ("skills", "skills"),
        ("memory", "memory"),
        ("files", "files"),
    ],
)
def test_b2_b18_every_variant_passes_the_json_schema_and_ids_match_keys(
    corpora: Path, kind: str, rel: str
) -> None:
    tree = load_source(corpora / rel, kind, kind)
    res = compile_tree(tree, OfflineEngine(), BuildOptions(budgets=(2048, 8192), cross_links=True))
    for m in res.manifests.values():
        data = m.to_dict()
        assert schema_errors(data) == []
        assert all(node["id"] == key for key, node in data["nodes"].items())
        assert m.source.tokenizer == "heuristic:4chars"
        assert all((n.facets or {}).get("kind") for n in m.nodes.values() if n.is_leaf)


def test_costs_are_counted_on_what_the_runtime_renders(corpora: Path) -> None:
    tree = load_source(corpora / "docs", "docs", "docs")
    m = compile_tree(tree, OfflineEngine(), BuildOptions(budgets=(4096,))).manifests[4096]
    c = HeuristicCounter()
    for nid, node in m.nodes.items():
        assert node.desc_tokens == c.count(render_line(nid, node, "full"))
    expected = c.count(DEFAULT_PROTOCOL) + c.count(render_line(m.root_id, m.root, "full"))
    expected += sum(m.nodes[k].desc_tokens or 0 for k in m.root.children or ())
    assert m.variant.manifest_tokens == expected


def test_b16_multiline_hints_never_break_llms_bullets(tmp_path: Path) -> None:
    tools = [
        {"name": "a.first", "description": "Line one.\nWhen to use: line two.\n\n- not a bullet"},
        {"name": "a.second", "description": "Plain."},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(tools), encoding="utf-8")
    res = compile_tree(
        load_source(path, "tools", "t"), OfflineEngine(), BuildOptions(budgets=(4096,))
    )
    text = res.llms_txt
    bullets = [ln for ln in text.splitlines() if ln.startswith("- [")]
    assert len(bullets) == 2
    assert not any(ln.startswith("- not a bullet") for ln in text.splitlines())
    for m in res.manifests.values():
        for node in m.nodes.values():
            assert "\n" not in node.what and "\n" not in node.when


def test_llms_txt_links_leaves_to_their_files(corpora: Path) -> None:
    res = compile_tree(
        load_source(corpora / "docs", "docs", "d"), OfflineEngine(), BuildOptions(budgets=(4096,))
    )
    assert "](install/sensors.md): " in res.llms_txt
    assert res.llms_txt.startswith("# d\n\n> ")


def _topic_tree(n_groups: int, per_group: int) -> SourceTree:
    vocab = [f"w{i}" for i in range(400)]
    root = SourceNode(id="r", title="root")
    k = 0
    for g in range(n_groups):
        group = SourceNode(id=f"g{g}/", title=f"group {g}")
        for i in range(per_group):
            words = " ".join(vocab[(k * 7 + j * 13) % 400] for j in range(12))
            group.children.append(
                SourceNode(id=f"g{g}/n{i}", title=f"n{k}", content=f"common text {words}")
            )
            k += 1
        root.children.append(group)
    return SourceTree(source_id="s", kind="docs", root=root)


def test_b14_links_use_an_inverted_index_not_all_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _topic_tree(20, 100)  # 2,000 leaves
    leaves = list(tree.root.leaves())
    signals = Signals(IdfSnapshot.from_texts(node_text(n) for n in leaves))
    calls = 0
    real = links_mod.cosine  # type: ignore[attr-defined]

    def counting(a: dict[str, float], b: dict[str, float]) -> float:
        nonlocal calls
        calls += 1
        return real(a, b)

    monkeypatch.setattr(links_mod, "cosine", counting)
    out = infer_links(tree.root, signals, k=3, min_sim=0.2, max_candidates=50)
    n = len(leaves)
    assert calls <= n * 50 < n * (n - 1) // 2
    group_of = {leaf.id: leaf.id.split("/")[0] for leaf in leaves}
    for src, targets in out.items():
        assert len(targets) <= 3
        for to, why in targets:
            assert group_of[to] != group_of[src]  # see-also crosses branches
            assert why.startswith("both cover ")


def test_betweenness_finds_the_bridge() -> None:
    # two triangles joined through "m"
    adj = {
        "a": ["b", "c"],
        "b": ["a", "c"],
        "c": ["a", "b", "m"],
        "m": ["c", "x"],
        "x": ["m", "y", "z"],
        "y": ["x", "z"],
        "z": ["x", "y"],
    }
    bc = betweenness(adj, pivots=100)  # pivots >= nodes: exact
    assert max(bc, key=lambda k: bc[k]) == "m"
    assert bc["a"] == 0.0
    approx = betweenness(adj, pivots=3)
    assert max(approx, key=lambda k: approx[k]) in {"m", "c", "x"}
