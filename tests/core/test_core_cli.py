"""The one ``picocontext`` tree: commands found as plug-ins, the app as the default command,
and the top-level handler (one line on stderr for every error, tracebacks only with --debug)."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picocontext import cli

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "resources" / "manifests" / "homelab" / "homelab.pcx.2k.json"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_built_in_fallback_list_is_what_pyproject_registers() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["entry-points"][cli.ENTRY_POINT_GROUP] == cli.BUILTIN_COMMANDS
    from picocontext.manifest import cli as pcx

    assert project["entry-points"][pcx.ENTRY_POINT_GROUP] == pcx.BUILTIN_PCX_COMMANDS
    aliases = {k: v for k, v in project["scripts"].items()}
    assert aliases == {
        "picocontext": "picocontext.cli:main",
        "picocontext-eval": "picocontext.cli:eval_main",
        "picocontext-distill": "picocontext.cli:distill_main",
        "pcx": "picocontext.cli:pcx_main",
    }


def test_every_command_is_in_the_generated_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0 and out.startswith("usage: picocontext")
    for name in ("app", "eval", "pcx", "distill", "tables"):
        assert f"    {name} " in out
    code, out, _ = run(capsys, "pcx", "--help")
    assert code == 0 and all(n in out for n in ("validate", "show", "eval", "schema", "build"))


def test_no_command_or_app_flags_run_the_app(capsys: pytest.CaptureFixture[str]) -> None:
    commands = cli.find_commands()
    assert cli._with_default_command([], commands) == ["app"]
    assert cli._with_default_command(["--smoke"], commands) == ["app", "--smoke"]
    assert cli._with_default_command(["pcx", "show"], commands) == ["pcx", "show"]
    code, _, err = run(capsys, "--smoke", "--pressure")
    assert code == 2
    assert err == "picocontext app: error: --pressure applies to --episode-smoke only\n"


@pytest.mark.parametrize(("word", "close"), [("evl", "eval"), ("distil", "distill")])
def test_a_mistyped_command_is_named_not_blamed_on_app(
    word: str, close: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, word, "--profile", "retention")
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"picocontext: error: unknown command {word!r} — ")
    assert f"did you mean {close!r}?" in err and "commands: app, " in err


def test_a_third_party_command_registers_like_a_built_in(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def register(subparsers: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = subparsers.add_parser("hello", help="greet")
        parser.add_argument("who")
        parser.set_defaults(func=lambda args: print(f"hello {args.who}") or 3)
        return parser

    monkeypatch.setattr(cli, "find_commands", lambda: {**_real_commands(), "hello": register})
    assert run(capsys, "hello", "you")[:2] == (3, "hello you\n")
    assert cli.run_command("hello", ["x"], prog="hello", registrar=register) == 3


_REAL = cli.find_commands


def _real_commands() -> dict[str, cli.Registrar]:
    return _REAL()


def _crashing(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser("crash", help="a bug")

    def boom(args: argparse.Namespace) -> int:
        raise RuntimeError("this is a bug\nsecond line")

    parser.set_defaults(func=boom)
    return parser


def test_a_bug_is_one_line_unless_debug(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    monkeypatch.setattr(cli, "find_commands", lambda: {"crash": _crashing})
    code, _, err = run(capsys, "crash")
    assert code == cli.EXIT_BUG and len(err.splitlines()) == 1
    assert "bug" in err and "RuntimeError: this is a bug" in err and "--debug" in err
    assert "Traceback" not in err
    code, _, err = run(capsys, "crash", "--debug")
    assert code == cli.EXIT_BUG and "Traceback" in err and "second line" in err
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    assert "Traceback" in run(capsys, "crash")[2]


def test_usage_errors_are_one_line_naming_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "pcx", "validate")
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("picocontext pcx validate: error: ")
    assert err.rstrip().endswith(" — see picocontext pcx validate --help")
    code, _, err = run(capsys, "eval", "--bogus")
    assert code == 2 and err == (
        "picocontext eval: error: unknown option --bogus — see picocontext eval --help\n"
    )


def _bad_inputs(tmp: Path) -> list[tuple[str, ...]]:
    missing, folder = str(tmp / "missing.json"), str(tmp)
    cases = str(MANIFEST.parent / "cases.json")
    corpus = str(tmp / "corpus")
    commands: list[tuple[str, ...]] = []
    for bad in (missing, folder):
        commands += [
            ("pcx", "validate", bad),
            ("pcx", "show", bad),
            ("pcx", "eval", bad, cases),
            ("pcx", "eval", str(MANIFEST), bad),
            ("pcx", "schema", "--check", bad),
            ("eval", "--config", bad),
            ("distill", "--corpus", corpus, "map", "--known", bad),
            ("distill", "--corpus", corpus, "sync", "--sessions", bad),
            ("tables", bad),
        ]
    a_file = tmp / "docs" / "a.md"
    commands += [
        ("app", "--smoke", "--model-dir", missing),
        ("app", "--smoke", "--model-dir", str(a_file)),
        ("pcx", "build", missing, "--kind", "docs", "--out", str(tmp / "out")),
        ("pcx", "eval", str(MANIFEST), cases, "--leaves", missing),
        ("distill", "--corpus", str(tmp / "none"), "map"),
        ("distill", "--corpus", str(tmp / "none"), "sync", "--docs", missing),
    ]
    return commands


def test_bad_files_give_one_clear_line_and_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nsome text\n", encoding="utf-8")
    corpus = str(tmp_path / "corpus")
    assert run(capsys, "distill", "--corpus", corpus, "sync", "--docs", str(docs))[0] == 0
    for argv in _bad_inputs(tmp_path):
        code, _, err = run(capsys, *argv)
        lines = err.strip().splitlines()
        assert code == 2, (argv, err)
        assert len(lines) == 1 and "Traceback" not in err, (argv, err)
        assert str(tmp_path) in lines[0] or "missing" in lines[0], (argv, err)


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--max-hops", "-1"), ("--min-success", "nan"), ("--min-success", "inf"), ("--reserve", "-5")],
)
def test_pcx_eval_refuses_values_that_would_make_the_run_meaningless(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "pcx", "eval", str(MANIFEST), str(MANIFEST), flag, value)
    assert code == 2 and len(err.splitlines()) == 1 and flag in err


@given(st.text(max_size=30))
def test_bounded_numbers_are_exact_in_range_or_refused_in_one_message(text: str) -> None:
    import argparse
    import math

    from picocontext.cli import bounded

    whole = bounded(0, 10**30, whole=True)
    try:
        value = whole(text)
    except argparse.ArgumentTypeError as exc:
        assert str(exc).startswith("expected a whole number from 0 to")
        assert "\n" not in str(exc)
    else:
        assert isinstance(value, int) and value == int(text) and 0 <= value <= 10**30
    seconds = bounded(0, 60, label="seconds from 0 to a minute")
    try:
        number = seconds(text)
    except argparse.ArgumentTypeError as exc:
        assert str(exc) == f"expected seconds from 0 to a minute, not {text!r}"
    else:
        assert math.isfinite(number) and 0 <= number <= 60
