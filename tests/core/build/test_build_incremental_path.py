"""Incremental rebuilds call the engine on the changed leaf's path only (issue 7's build bench).

A changed page re-contrasts its group, and a contrast rewrites every member's line; siblings
outside the path must nevertheless keep the line the previous build gave them, so they are not
graded, repaired or re-described again. Per-budget shaping must not move unchanged pages into
new clusters either. Checked for every page of two small corpora (a narrow folder and a wide
folder that shaping clusters) and, in subprocesses, under different hash seeds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from picocontext.build.adapters import load_source
from picocontext.build.compiler import BuildOptions, BuildResult, compile_tree
from picocontext.build.describe import DescriptorCache
from picocontext.build.engines.base import Grade
from picocontext.build.engines.offline import OfflineEngine
from picocontext.build.ir import SourceNode
from picocontext.build.quality import Descriptor

SHARED = "valve pump pressure flow pipe"
TOPICS = [
    ("Priming the pump", "prime, air, bleed, screw, cap"),
    ("Pressure relief", "relief, spring, burst, vent, limit"),
    ("Flow meter", "meter, pulse, litre, count, calibrate"),
    ("Check valve", "backflow, flap, seat, reverse, hinge"),
    ("Pipe sizing", "diameter, friction, length, elbow, loss"),
    ("Pump curve", "head, duty, point, impeller, speed"),
    ("Frost draining", "winter, drain, plug, freeze, crack"),
    ("Sensor wiring", "cable, gland, terminal, shield, ground"),
]
OPTS_4K = BuildOptions(budgets=(4096,))
EXTRA = [
    "filter",
    "strainer",
    "gauge",
    "tank",
    "float",
    "switch",
    "timer",
    "relay",
    "fuse",
    "seal",
    "gasket",
    "bearing",
]


class GradingEngine(OfflineEngine):
    """The offline engine plus a self-grade, as an LLM engine would: every graded line is an
    engine call, so a sibling whose line is rewritten shows up in the call log."""

    name = "offline-graded"

    def grade(
        self, node: SourceNode, desc: Descriptor, siblings: Sequence[Descriptor]
    ) -> Grade | None:
        del node, siblings
        return Grade(score=0.9 if len(desc.when) > 12 else 0.2, reason="when is too short")


def page(title: str, words: str, n: int) -> str:
    return (
        f"# {title}\n\nThe {title.lower()} step uses the {SHARED} with {words}.\n\n"
        f"Details: {words}; {SHARED}; note {n} mentions {EXTRA[n % len(EXTRA)]} and "
        f"{EXTRA[(n * 5 + 3) % len(EXTRA)]}.\n"
    )


def narrow(root: Path) -> list[Path]:
    files = []
    for i, (title, words) in enumerate(TOPICS):
        folder = root / ("pumps" if i < 5 else "care")
        folder.mkdir(parents=True, exist_ok=True)
        f = folder / f"{title.lower().replace(' ', '-')}.md"
        f.write_text(page(title, words, i), encoding="utf-8")
        files.append(f)
    return files


def wide(root: Path) -> list[Path]:
    """40 pages in one folder: at a 2k budget shaping clusters them."""
    folder = root / "handbook"
    folder.mkdir(parents=True)
    files = []
    for i in range(40):
        title, words = TOPICS[i % len(TOPICS)]
        extra = ", ".join(EXTRA[(i + k) % len(EXTRA)] for k in range(3))
        f = folder / f"note-{i:02d}.md"
        f.write_text(page(f"{title} {i}", f"{words}, {extra}", i), encoding="utf-8")
        files.append(f)
    return files


def leaf_id(root: Path, f: Path) -> str:
    tree = load_source(root, "docs", "docs")
    origins = {n.id: n.origin for n in tree.root.walk() if n.is_leaf}
    matches = [nid for nid, o in origins.items() if o and Path(o).name == f.name]
    assert len(matches) == 1, (f, origins)
    return matches[0]


def rebuild(
    root: Path, opts: BuildOptions, cache: DescriptorCache, changed: str, engine: OfflineEngine
) -> BuildResult:
    tree = load_source(root, "docs", "docs")
    return compile_tree(
        tree, engine, opts, cache=cache, incremental=True, watch=frozenset({changed})
    )


def check_every_page(root: Path, files: list[Path], opts: BuildOptions, stride: int = 1) -> None:
    first = compile_tree(load_source(root, "docs", "docs"), GradingEngine(), opts)
    assert first.stats.engine_calls.get("grade", 0) > 0
    for f in files[::stride]:
        changed = leaf_id(root, f)
        original = f.read_text(encoding="utf-8")
        f.write_text(original + "\nAlso covers the bypass manifold and its isolator.\n")
        try:
            again = rebuild(root, opts, first.cache, changed, GradingEngine())
        finally:
            f.write_text(original, encoding="utf-8")
        assert ("describe_leaf", changed) in again.log.calls
        assert again.log.outside == [], (changed, again.log.outside)
        # Same page ids, same tree shape around the change.
        for budget in opts.budgets:
            assert set(again.manifests[budget].leaf_ids) == set(first.manifests[budget].leaf_ids)


def test_narrow_folder_rebuild_stays_on_the_changed_path(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    files = narrow(root)
    check_every_page(root, files, BuildOptions(budgets=(4096,)))


def test_sibling_lines_are_kept_and_the_changed_line_still_contrasts(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    files = narrow(root)
    opts = BuildOptions(budgets=(4096,))
    first = compile_tree(load_source(root, "docs", "docs"), GradingEngine(), opts)
    changed = leaf_id(root, files[0])
    files[0].write_text(files[0].read_text() + "\nAlso covers the bypass manifold.\n")
    again = rebuild(root, opts, first.cache, changed, GradingEngine())
    before, after = first.manifests[4096], again.manifests[4096]
    siblings = [c for c in after.children_of(after.parents[changed]) if c != changed]
    assert siblings
    for sid in siblings:
        assert after.get(sid).what == before.get(sid).what
        assert after.get(sid).when == before.get(sid).when
    assert "manifold" in (after.get(changed).when + " ".join(after.get(changed).keywords or ()))


def test_wide_clustered_folder_rebuild_stays_on_the_changed_path(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    files = wide(root)
    opts = BuildOptions(budgets=(2048, 8192))
    first = compile_tree(load_source(root, "docs", "docs"), GradingEngine(), opts)
    assert any(v.clusters > 0 for v in first.variants), "the corpus must exercise clustering"
    check_every_page(root, files, opts, stride=3)


def test_two_rebuilds_in_a_row_stay_on_their_paths(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    files = wide(root)
    opts = BuildOptions(budgets=(2048,))
    cache = compile_tree(load_source(root, "docs", "docs"), GradingEngine(), opts).cache
    for f in (files[4], files[17]):
        changed = leaf_id(root, f)
        f.write_text(f.read_text() + "\nAlso covers the bypass manifold.\n")
        result = rebuild(root, opts, cache, changed, GradingEngine())
        assert result.log.outside == []
        cache = result.cache
    # A third rebuild with nothing changed makes no call at all.
    tree = load_source(root, "docs", "docs")
    assert compile_tree(tree, GradingEngine(), opts, cache=cache, incremental=True).log.calls == []


SCRIPT = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
import test_build_incremental_path as t
from picocontext.build.adapters import load_source
from picocontext.build.compiler import BuildOptions, compile_tree
root = Path(sys.argv[1])
files = sorted(root.rglob("*.md"))
opts = BuildOptions(budgets=(2048,))
first = compile_tree(load_source(root, "docs", "docs"), t.GradingEngine(), opts)
f = files[7]
changed = t.leaf_id(root, f)
f.write_text(f.read_text() + "\nAlso covers the bypass manifold.\n")
again = t.rebuild(root, opts, first.cache, changed, t.GradingEngine())
print(json.dumps({"outside": again.log.outside, "calls": again.log.calls,
                  "manifest": again.manifests[2048].to_dict()}, sort_keys=True))
"""


@pytest.mark.parametrize("seeds", [("0", "1", "4242")])
def test_rebuild_is_the_same_under_every_hash_seed(tmp_path: Path, seeds: tuple[str, ...]) -> None:
    outs = []
    for seed in seeds:
        root = tmp_path / seed / "docs"
        wide(root)
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(root), str(Path(__file__).parent)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        assert data["outside"] == []
        outs.append(json.dumps(data, sort_keys=True))
    assert len(set(outs)) == 1


def test_the_saved_cache_keeps_lines_layouts_and_shape(tmp_path: Path) -> None:
    """The CLI's path: the cache goes through a file between the builds."""
    root = tmp_path / "docs"
    files = wide(root)
    opts = BuildOptions(budgets=(2048,))
    first = compile_tree(load_source(root, "docs", "docs"), GradingEngine(), opts)
    saved = tmp_path / "cache.json"
    first.cache.save(saved)
    loaded = DescriptorCache.load(saved)
    assert loaded is not None
    assert loaded.members and loaded.layouts and "2048" in loaded.shaping
    changed = leaf_id(root, files[9])
    files[9].write_text(files[9].read_text() + "\nAlso covers the bypass manifold.\n")
    again = rebuild(root, opts, loaded, changed, GradingEngine())
    assert again.log.calls and again.log.outside == []


def test_a_cache_of_the_previous_format_is_ignored(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    narrow(root)
    first = compile_tree(load_source(root, "docs", "docs"), GradingEngine(), OPTS_4K)
    data = first.cache.to_json()
    data["version"] = 1
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert DescriptorCache.load(path) is None


def test_a_changed_page_copying_a_sibling_is_contrasted_not_the_sibling(tmp_path: Path) -> None:
    """The worst case for a collision: the page becomes a copy of its sibling. The group is
    re-contrasted, but only the changed page's line may move."""
    root = tmp_path / "docs"
    files = narrow(root)
    first = compile_tree(load_source(root, "docs", "docs"), GradingEngine(), OPTS_4K)
    victim, twin = files[1], files[2]
    changed = leaf_id(root, victim)
    victim.write_text(twin.read_text().replace("# Flow meter", "# Flow meter notes"))
    again = rebuild(root, OPTS_4K, first.cache, changed, GradingEngine())
    assert again.log.outside == []
    before, after = first.manifests[4096], again.manifests[4096]
    twin_id = leaf_id(root, twin)
    assert after.get(twin_id).when == before.get(twin_id).when
    assert ("contrast", after.parents[changed]) in again.log.calls


class PickyEngine(GradingEngine):
    """Never passes one page, so the first build leaves it ungraded."""

    name = "offline-picky"

    def grade(
        self, node: SourceNode, desc: Descriptor, siblings: Sequence[Descriptor]
    ) -> Grade | None:
        if node.title.startswith("Pipe sizing"):
            return Grade(score=0.1, reason="too vague")
        return super().grade(node, desc, siblings)


def test_a_kept_sibling_left_ungraded_is_still_reported(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    files = narrow(root)
    first = compile_tree(load_source(root, "docs", "docs"), PickyEngine(), OPTS_4K)
    assert first.stats.ungraded == 1
    changed = leaf_id(root, files[0])  # a sibling of "Pipe sizing"
    files[0].write_text(files[0].read_text() + "\nAlso covers the bypass manifold.\n")
    again = rebuild(root, OPTS_4K, first.cache, changed, PickyEngine())
    assert again.log.outside == []
    assert again.stats.ungraded == 1
