"""Incremental rebuilds (B3): keys cover content, title, frontmatter, hints and the engine; an
unchanged subtree makes zero engine calls, a change re-describes only its path."""

from __future__ import annotations

import shutil
from pathlib import Path

from picocontext.build.adapters import load_source
from picocontext.build.compiler import BuildOptions, BuildResult, compile_tree
from picocontext.build.describe import DescriptorCache
from picocontext.build.engines.offline import OfflineEngine

OPTS = BuildOptions(budgets=(4096,))


def build(
    src: Path, cache: DescriptorCache | None = None, engine: OfflineEngine | None = None
) -> BuildResult:
    tree = load_source(src, "docs", "docs")
    return compile_tree(
        tree, engine or OfflineEngine(), OPTS, cache=cache, incremental=cache is not None
    )


def copy_docs(corpora: Path, tmp_path: Path) -> Path:
    src = tmp_path / "docs"
    shutil.copytree(corpora / "docs", src)
    return src


def path_ids(result: BuildResult, leaf: str) -> set[str]:
    m = result.manifests[4096]
    return {*m.ancestors(leaf), leaf}


def test_unchanged_rebuild_makes_zero_engine_calls(corpora: Path, tmp_path: Path) -> None:
    src = copy_docs(corpora, tmp_path)
    first = build(src)
    again = build(src, first.cache)
    assert again.log.calls == []
    assert again.manifests[4096].to_dict() == first.manifests[4096].to_dict()


def test_b3_frontmatter_only_change_is_rebuilt_and_only_on_its_path(
    corpora: Path, tmp_path: Path
) -> None:
    src = copy_docs(corpora, tmp_path)
    first = build(src)
    page = src / "install" / "index.md"
    page.write_text(
        page.read_text().replace(
            "description: Mount the controller box, wire the sensors and flash the firmware.",
            "description: Bolt the enclosure to a post and run the mains cable first.",
        )
    )
    second = build(src, first.cache)
    assert second.log.calls, "a frontmatter change must regenerate"
    touched = {nid for _, nid in second.log.calls}
    assert touched <= path_ids(second, "install/index")
    node = second.manifests[4096].get("install/index")
    assert "Bolt the enclosure" in node.what  # no stale line kept


def test_b3_title_and_keyword_changes_regenerate(corpora: Path, tmp_path: Path) -> None:
    src = copy_docs(corpora, tmp_path)
    first = build(src)
    page = src / "install" / "sensors.md"
    page.write_text(page.read_text().replace("# Wiring sensor pods", "# Cabling the sensor pods"))
    second = build(src, first.cache)
    assert ("describe_leaf", "install/sensors") in second.log.calls
    assert second.manifests[4096].get("install/sensors").title == "Cabling the sensor pods"
    ops = src / "operate" / "index.md"
    ops.write_text(
        ops.read_text().replace("keywords: [dashboard, routine]", "keywords: [checklist]")
    )
    third = build(src, second.cache)
    assert ("describe_leaf", "operate/index") in third.log.calls
    assert {nid for _, nid in third.log.calls} <= path_ids(third, "operate/index")


def test_engine_change_invalidates_everything(corpora: Path, tmp_path: Path) -> None:
    src = copy_docs(corpora, tmp_path)
    first = build(src)
    other = build(src, first.cache, engine=OfflineEngine(n_terms=4))
    assert other.log.count("describe_leaf") == len(first.manifests[4096].leaf_ids)


def test_cache_round_trips_through_disk(corpora: Path, tmp_path: Path) -> None:
    src = copy_docs(corpora, tmp_path)
    first = build(src)
    path = tmp_path / "cache.json"
    first.cache.save(path)
    loaded = DescriptorCache.load(path)
    assert loaded is not None
    assert build(src, loaded).log.calls == []
    path.write_text("{corrupt")
    assert DescriptorCache.load(path) is None


def test_clustered_rebuild_makes_no_calls_outside_the_changed_path(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    topics = ["pump valve pressure", "lamp light spectrum", "soil compost mulch", "vent fan air"]
    for i in range(60):
        words = topics[i % 4]
        text = f"# Note {i}\n\nAbout {words} in bed {i}. The {words} schedule for bed {i}.\n"
        (folder / f"n{i:02d}.md").write_text(text)
    opts = BuildOptions(budgets=(2048, 16384))
    first = compile_tree(load_source(tmp_path, "docs", "d"), OfflineEngine(), opts)
    assert any(v.clusters for v in first.variants)
    changed = folder / "n07.md"
    changed.write_text(changed.read_text() + "\nA new sentence about valve gaskets.\n")
    again = compile_tree(
        load_source(tmp_path, "docs", "d"),
        OfflineEngine(),
        opts,
        cache=first.cache,
        incremental=True,
        watch=frozenset({"notes/n07"}),
    )
    assert ("describe_leaf", "notes/n07") in again.log.calls
    assert again.log.outside == []
