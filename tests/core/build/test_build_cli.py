"""The ``pcx build`` CLI: budgets parsing (B15), presets that see explicit flags (B21), exit
codes, outputs that validate, progress, and ``--incremental``."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext.build.cli import add_arguments, apply_preset, main, parse_budgets, register, run
from picocontext.build.errors import ConfigError
from picocontext.manifest.validate import load_manifest


def test_budgets_labels() -> None:
    assert parse_budgets("4k,32k") == (4096, 32768)
    assert parse_budgets(" 31000 , 4K ,4k") == (31000, 4096)


@pytest.mark.parametrize("bad", ["4.5k", "", " ", "4k,", "k", "-1", "0", "4m", "4 k x", "1e3"])
def test_b15_bad_budgets_are_config_errors_with_the_item(bad: str) -> None:
    with pytest.raises(ConfigError, match="budgets"):
        parse_budgets(bad)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
def test_b15_budget_parser_never_crashes(text: str) -> None:
    try:
        out = parse_budgets(text)
    except ConfigError:
        return
    assert out and all(b >= 1 for b in out)


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(argv)


def test_b21_explicit_flag_equal_to_default_beats_the_preset() -> None:
    err = io.StringIO()
    args = _args(
        ["x", "--kind", "docs", "--preset", "tool-routing", "--collision-threshold", "0.5"]
    )
    apply_preset(args, err)
    assert args.collision_threshold == 0.5  # explicit, although equal to the default
    assert args.max_collision == 0.6  # filled by the preset
    assert "keeping your --collision-threshold" in err.getvalue()


def test_b21_explicit_negative_boolean_beats_the_preset() -> None:
    args = _args(["x", "--kind", "docs", "--preset", "low-budget", "--no-flatten"])
    apply_preset(args, io.StringIO())
    assert args.flatten is False
    assert args.budgets == "4k"


def test_defaults_without_preset() -> None:
    args = _args(["x", "--kind", "docs"])
    apply_preset(args, io.StringIO())
    assert args.budgets == "4k,32k" and args.flatten is False and args.max_collision is None


def test_build_writes_valid_variants_llms_and_cache(corpora: Path, tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    args = _args([str(corpora / "docs"), "--kind", "docs", "--out", str(tmp_path), "--cross-links"])
    assert run(args, out, err) == 0
    for label in ("4k", "32k"):
        m = load_manifest(tmp_path / f"docs.pcx.{label}.json")
        assert m.variant.budget == {"4k": 4096, "32k": 32768}[label]
        leaves = json.loads((tmp_path / f"docs.leaves.{label}.json").read_text())
        assert set(leaves) == set(m.leaf_ids)
    assert (tmp_path / "docs.llms.txt").read_text().startswith("# docs")
    assert (tmp_path / ".pcx-cache" / "docs.json").is_file()
    assert "oracle 100%" in out.getvalue()


def test_bad_budgets_exit_2_with_a_message(corpora: Path, tmp_path: Path) -> None:
    err = io.StringIO()
    rc = run(
        _args([str(corpora / "docs"), "--kind", "docs", "--budgets", "4.5k"]), io.StringIO(), err
    )
    assert rc == 2
    assert "'4.5k' is not a budget" in err.getvalue()


def test_missing_source_and_llm_without_model_exit_2(tmp_path: Path, corpora: Path) -> None:
    err = io.StringIO()
    assert run(_args([str(tmp_path / "nope"), "--kind", "docs"]), io.StringIO(), err) == 2
    assert "does not exist" in err.getvalue()
    err = io.StringIO()
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    args = _args(
        [str(corpora / "docs"), "--kind", "docs", "--engine", "llm", "--model-dir", str(empty)]
    )
    assert run(args, io.StringIO(), err) == 2
    assert "model directory" in err.getvalue()  # MLX or llama.cpp: the default engine's
    err = io.StringIO()
    args = _args(
        [str(corpora / "docs"), "--kind", "docs", "--engine", "llm", "--endpoint", "http://x"]
    )
    assert run(args, io.StringIO(), err) == 2
    assert "--endpoint needs --model" in err.getvalue()


def test_gate_failure_exits_3_and_writes_nothing(corpora: Path, tmp_path: Path) -> None:
    err = io.StringIO()
    args = _args(
        [str(corpora / "docs"), "--kind", "docs", "--out", str(tmp_path), "--min-fidelity", "5"]
    )
    assert run(args, io.StringIO(), err) == 3
    assert "--min-fidelity" in err.getvalue()
    assert not list(tmp_path.glob("*.json"))


def test_impossible_budget_exits_4_and_writes_nothing(corpora: Path, tmp_path: Path) -> None:
    err = io.StringIO()
    args = _args(
        [str(corpora / "docs"), "--kind", "docs", "--out", str(tmp_path), "--budgets", "100"]
    )
    assert run(args, io.StringIO(), err) == 4
    assert "self-check" in err.getvalue()
    assert not list(tmp_path.glob("*.json"))


def test_incremental_from_the_cli_makes_no_engine_calls_when_nothing_changed(
    corpora: Path, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    for f in (corpora / "docs").rglob("*.md"):
        dest = src / f.relative_to(corpora / "docs")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(f.read_text())
    out_dir = tmp_path / "out"
    base = [str(src), "--kind", "docs", "--out", str(out_dir), "--json", "--quiet"]
    out = io.StringIO()
    assert run(_args(base), out, io.StringIO()) == 0
    assert json.loads(out.getvalue())["engine_calls"]
    out = io.StringIO()
    assert run(_args([*base, "--incremental"]), out, io.StringIO()) == 0
    stats = json.loads(out.getvalue())
    assert stats["engine_calls"] == {} and stats["incremental"] is True


def test_progress_bar_on_stderr(corpora: Path, tmp_path: Path) -> None:
    err = io.StringIO()
    rc = run(
        _args([str(corpora / "skills"), "--kind", "skills", "--out", str(tmp_path)]),
        io.StringIO(),
        err,
    )
    assert rc == 0
    assert "building" in err.getvalue() and "nodes" in err.getvalue()


def test_register_adds_build_to_a_pcx_parser(corpora: Path, tmp_path: Path) -> None:
    parser = argparse.ArgumentParser(prog="pcx")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    args = parser.parse_args(
        ["build", str(corpora / "memory"), "--kind", "memory", "--out", str(tmp_path), "--quiet"]
    )
    assert args.func(args) == 0
    assert (
        main([str(corpora / "memory"), "--kind", "memory", "--out", str(tmp_path), "--quiet"]) == 0
    )
