"""Adapters: namespaced, collision-proof ids (B1), facets, and clear errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picocontext.build.adapters import load_source
from picocontext.build.adapters.files import markdown_sections, rst_sections
from picocontext.build.errors import ConfigError, SourceError
from picocontext.build.ir import IdRegistry, SourceTree, flatten_single_child, slug


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")


def ids_of(tree: SourceTree) -> list[str]:
    return [n.id for n in tree.root.walk()]


def test_b1_docs_index_pages_in_two_folders_both_survive(tmp_path: Path) -> None:
    write(tmp_path, "a/index.md", "# Alpha install\n\nInstall alpha.")
    write(tmp_path, "b/index.md", "# Beta install\n\nInstall beta.")
    tree = load_source(tmp_path, "docs", "d")
    ids = ids_of(tree)
    assert len(ids) == len(set(ids))
    titles = {n.title for n in tree.root.leaves()}
    assert titles == {"Alpha install", "Beta install"}
    assert "a/index" in ids and "b/index" in ids


def test_b1_folder_next_to_same_named_file(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "# File a\n\ntext")
    write(tmp_path, "a/inner.md", "# Inner\n\ntext")
    tree = load_source(tmp_path, "docs", "d")
    ids = ids_of(tree)
    assert len(ids) == len(set(ids)) == 4
    assert {"a", "a/", "a/inner"} <= set(ids)


def test_b1_tools_dotted_and_underscored_names_and_namespace_collision(tmp_path: Path) -> None:
    tools = [
        {"name": "x.y", "description": "dotted"},
        {"name": "x_y", "description": "underscored"},
        {"name": "x", "description": "a tool named like the namespace"},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(tools), encoding="utf-8")
    tree = load_source(path, "tools", "t")
    ids = ids_of(tree)
    assert len(ids) == len(set(ids))
    names = sorted(n.title for n in tree.root.leaves())
    assert names == ["x", "x.y", "x_y"]


def test_registry_suffixes_repeated_candidates() -> None:
    reg = IdRegistry(("r",))
    assert [reg.claim("r"), reg.claim("a"), reg.claim("a"), reg.claim("a")] == [
        "r~2",
        "a",
        "a~2",
        "a~3",
    ]


def test_slug_is_never_empty() -> None:
    assert slug("!!!") == "node"
    assert slug("Hello World.md") == "hello-world.md"


@pytest.mark.parametrize(
    "shape",
    [
        lambda: [{"type": "function", "function": {"name": "a.b", "description": "d"}}],
        lambda: {"tools": [{"name": "a.b", "description": "d"}]},
        lambda: {"a.b": {"description": "d"}},
    ],
)
def test_tools_accepts_the_three_shapes(tmp_path: Path, shape) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(shape()), encoding="utf-8")
    tree = load_source(path, "tools", "t")
    leaf = next(tree.root.leaves())
    assert leaf.title == "a.b"
    assert leaf.hint == "d"
    assert leaf.facets == {"kind": "tool", "namespace": "a"}


def test_tools_bad_json_is_a_source_error(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(SourceError, match="not valid JSON"):
        load_source(path, "tools", "t")
    path.write_text(json.dumps([{"description": "no name"}]), encoding="utf-8")
    with pytest.raises(SourceError, match="no 'name'"):
        load_source(path, "tools", "t")


def test_unknown_kind_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Unknown source kind"):
        load_source(tmp_path, "website", "x")


def test_every_sample_corpus_loads_with_unique_ids_and_facets(corpora: Path) -> None:
    for kind, rel in [
        ("tools", "tools/verdant-tools.json"),
        ("docs", "docs"),
        ("skills", "skills"),
        ("memory", "memory"),
        ("files", "files"),
    ]:
        tree = load_source(corpora / rel, kind, kind)
        ids = ids_of(tree)
        assert len(ids) == len(set(ids)), kind
        for leaf in tree.root.leaves():
            assert leaf.facets.get("kind"), (kind, leaf.id)


def test_docs_titles_hints_and_frontmatter_meta(corpora: Path) -> None:
    tree = load_source(corpora / "docs", "docs", "docs")
    by_id = {n.id: n for n in tree.root.walk()}
    install = by_id["install/index"]
    assert install.title == "Installing the controller"
    assert install.hint.startswith("Mount the controller box")
    assert install.meta["description"] == install.hint
    assert install.facets == {"kind": "doc", "folder": "install", "filetype": "md"}
    assert by_id["install/sensors"].title == "Wiring sensor pods"
    assert "---" not in install.content


def test_skills_categories_and_author_when(corpora: Path) -> None:
    tree = load_source(corpora / "skills", "skills", "s")
    cats = [c.title for c in tree.root.children]
    assert cats == ["Garden", "Office"]
    prune = next(n for n in tree.root.leaves() if n.title == "Prune tomato side shoots")
    assert "\n" not in prune.hint
    assert prune.meta["when"] == "the plants look bushy and fruit is small"
    assert prune.facets["category"] == "garden"


def test_memory_groups_by_inferred_namespace_and_skips_index(corpora: Path) -> None:
    tree = load_source(corpora / "memory", "memory", "m")
    namespaces = sorted(c.title for c in tree.root.children)
    assert namespaces == ["Knowledge", "Operational", "Self"]
    titles = {n.title for n in tree.root.leaves()}
    assert "Index of facts (skipped by the adapter)" not in titles
    quirk = next(n for n in tree.root.leaves() if n.title == "Vent motor quirk")
    assert quirk.facets == {"kind": "memory", "namespace": "knowledge", "type": "knowledge"}
    assert quirk.id == "knowledge/knowledge/vent-motor-quirk"


def test_files_adapter_infers_structure(corpora: Path) -> None:
    tree = load_source(corpora / "files", "files", "f")
    by_id = {n.id: n for n in tree.root.walk()}
    plan = by_id["notes/season-plan/"]
    assert [c.title for c in plan.children] == ["Spring crops", "Summer crops", "Autumn crops"]
    assert plan.children[0].facets["section"] == "Spring crops"
    module = by_id["code/watering.py/"]
    assert [c.title for c in module.children] == [
        "watering (module overview)",
        "watering.plan_runs",
        "watering.merge_runs",
        "watering.Pump",
    ]
    assert "def plan_runs(readings, threshold=0.3)" in module.children[1].content
    assert by_id["notes/calibration"].title == "Calibrating sensors"
    assert by_id["notes/pests"].facets["filetype"] == "txt"


def test_files_adapter_clusters_a_flat_folder(tmp_path: Path) -> None:
    topics = ["pumps valves water", "lights lamps brightness", "soil compost beds"]
    for i in range(30):
        words = topics[i % 3]
        write(tmp_path, f"n{i:02d}.txt", f"Note {i} about {words}. More on {words} here.")
    tree = load_source(tmp_path, "files", "f")
    assert len(tree.root.children) <= 12
    assert all(c.synthetic for c in tree.root.children if c.children)
    assert sum(1 for _ in tree.root.leaves()) == 30
    ids = ids_of(tree)
    assert len(ids) == len(set(ids))


def test_files_adapter_skips_unparseable_python_with_a_warning(tmp_path: Path) -> None:
    write(tmp_path, "bad.py", "def broken(:\n")
    write(tmp_path, "ok.txt", "Some text that is fine to read.")
    tree = load_source(tmp_path, "files", "f")
    assert any("bad.py" in w for w in tree.warnings)
    assert [n.title for n in tree.root.leaves()] == ["Ok"]


def test_empty_sources_are_errors(tmp_path: Path) -> None:
    for kind in ("docs", "skills", "memory", "files"):
        with pytest.raises(SourceError):
            load_source(tmp_path, kind, "x")
    with pytest.raises(SourceError, match="does not exist"):
        load_source(tmp_path / "missing", "docs", "x")


def test_sections_need_two_headings() -> None:
    assert markdown_sections("# One\ntext") == []
    secs = markdown_sections("intro\n## A\nx\n```\n## not a heading\n```\n## B\ny")
    assert [t for t, _ in secs] == ["A", "B"]
    assert "intro" in secs[0][1]
    rst = "Title\n=====\n\nAlpha\n-----\nx\n\nBeta\n----\ny"
    assert [t for t, _ in rst_sections(rst)] == ["Alpha", "Beta"]


def test_flatten_single_child_keeps_the_root() -> None:
    from picocontext.build.ir import SourceNode

    leaf = SourceNode(id="l", title="leaf", content="x")
    root = SourceNode(
        id="r", title="root", children=[SourceNode(id="a/", title="a", children=[leaf])]
    )
    assert flatten_single_child(root) == 1
    assert root.children == [leaf]
