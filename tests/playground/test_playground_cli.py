"""Command-line parsing, settings validation and platform selection (no window, no model)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picocontext_playground import cli
from picocontext_playground.errors import SetupError
from picocontext_playground.qtenv import choose_platform, has_display
from picocontext_playground.settings import ComparisonSettings, ModelChoice, Task


def parse(*argv: str) -> ComparisonSettings:
    return cli.settings_from_args(cli.build_parser().parse_args(list(argv)))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (cli.REPORT_ENV, cli.IMAGE_ENV, cli.MODEL_DIR_ENV):
        monkeypatch.delenv(name, raising=False)


def test_smoke_is_the_order_lookup() -> None:
    settings = parse("--smoke", "--backend", "scripted")
    assert settings.task is Task.ORDER_LOOKUP and settings.model is ModelChoice.SCRIPTED
    assert settings.policies == ("append-only", "editable")


@pytest.mark.parametrize(
    ("word", "task"),
    [
        ("retention", Task.RETENTION),
        ("state-updates", Task.STATE_UPDATES),
        ("stateUpdates", Task.STATE_UPDATES),
        ("state_updates", Task.STATE_UPDATES),
    ],
)
def test_episode_smoke_tasks(word: str, task: Task) -> None:
    settings = parse("--episode-smoke", word, "--pressure", "--model", "scripted")
    assert settings.task is task and settings.pressure and settings.noise_lines == 48


def test_normal_episode_uses_the_fixture_noise() -> None:
    assert parse("--episode-smoke", "retention", "--backend", "scripted").noise_lines is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--smoke", "--pressure"], "--pressure applies to --episode-smoke only"),
        (["--episode-smoke", "order-lookup"], "retention, state-updates, revisions"),
        (["--episode-smoke", "lamps"], "unknown task 'lamps'"),
        (["--smoke", "--policies", "append-only,bogus"], "unknown policy 'bogus'"),
        (["--smoke", "--policies", "editable,editable"], "only once"),
        (["--smoke", "--policies", ","], "--policies names no policy"),
        (["--smoke", "--backend", "scripted", "--model", "smollm2-135m"], "uses no model"),
        (["--smoke", "--model-dir", "/definitely/not/here"], "does not exist"),
    ],
)
def test_bad_arguments_are_setup_errors(argv: list[str], message: str) -> None:
    with pytest.raises(SetupError, match=message):
        parse(*argv)


def test_model_and_model_dir_are_exclusive(tmp_path: Path) -> None:
    with pytest.raises(SetupError, match="either --model or --model-dir"):
        parse("--smoke", "--model", "smollm2-135m", "--model-dir", str(tmp_path))


def test_model_directory_from_flag_or_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = parse("--smoke", "--model-dir", str(tmp_path))
    assert settings.model is ModelChoice.DIRECTORY and settings.model_dir == tmp_path
    monkeypatch.setenv(cli.MODEL_DIR_ENV, str(tmp_path))
    from_env = parse("--episode-smoke", "retention")
    assert from_env.model is ModelChoice.DIRECTORY and from_env.model_dir == tmp_path
    # an explicit model or the scripted backend wins over the environment
    assert parse("--smoke", "--model", "qwen3-1.7b-4bit").model is ModelChoice.QWEN3
    assert parse("--smoke", "--backend", "scripted").model_dir is None


def test_decoding_flags() -> None:
    settings = parse("--smoke", "--model", "qwen3-1.7b-4bit", "--constrained", "--no-prefix-cache")
    assert settings.constrained and not settings.prefix_cache
    assert "decoding: constrained" in settings.describe()
    assert "prefix cache: off" in settings.describe()


def test_run_returns_2_with_a_message_on_setup_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["--smoke", "--pressure"]) == 2
    err = capsys.readouterr().err
    assert err == "picocontext: error: --pressure applies to --episode-smoke only\n"
    assert cli.run(["--no-such-flag"]) == 2
    assert "unrecognized arguments" in capsys.readouterr().err
    assert cli.run(["--smoke", "--episode-smoke", "retention"]) == 2


def test_report_and_image_need_a_smoke_mode(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["--backend", "scripted", "--report", "x.txt"]) == 2
    assert "apply to --smoke" in capsys.readouterr().err


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--smoke", "--episode-smoke", "--report", "--image", "--model-dir"):
        assert flag in out


def test_window_mode_without_a_display_explains(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    assert cli.run(["--backend", "scripted"]) == 2
    assert "no display found" in capsys.readouterr().err


def test_platform_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("DISPLAY", ":0")
    assert has_display() and choose_platform(headless=False) is None
    assert choose_platform(headless=True) == "offscreen"  # smoke runs never need a display
    monkeypatch.delenv("QT_QPA_PLATFORM")
    monkeypatch.delenv("DISPLAY")
    assert not has_display() and choose_platform(headless=False) == "offscreen"
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    assert choose_platform(headless=True) == "xcb"  # an explicit choice always wins


@given(
    st.sampled_from(["retention", "state-updates", "order-lookup"]),
    st.lists(st.booleans(), min_size=13, max_size=13),
)
def test_task_parse_ignores_case_and_separator_style(word: str, upper: list[bool]) -> None:
    variant = "".join(c.upper() if u else c for c, u in zip(word, upper, strict=False))
    assert Task.parse(variant.replace("-", "_")) is Task(word)


@given(st.text(min_size=1, max_size=20))
def test_task_parse_rejects_everything_else_with_setup_error(text: str) -> None:
    known = {"retention", "state-updates", "order-lookup", "stateupdates", "lamp", "order"}
    if text.strip().lower().replace("_", "-") in known:
        return
    with pytest.raises(SetupError, match="unknown task"):
        Task.parse(text)


def test_settings_validation() -> None:
    with pytest.raises(ValueError, match="needs a model directory"):
        ComparisonSettings(model=ModelChoice.DIRECTORY)
    with pytest.raises(ValueError, match="applies only to the local-directory"):
        ComparisonSettings(model=ModelChoice.SMOLLM2, model_dir=Path("."))
    with pytest.raises(ValueError):
        ComparisonSettings(policies=())
    assert ComparisonSettings(task=Task.ORDER_LOOKUP, pressure=True).noise_lines is None


def test_parser_is_argparse() -> None:
    assert isinstance(cli.build_parser(), argparse.ArgumentParser)


def test_decoding_switches_and_model_are_spelled_like_every_other_command(tmp_path: Path) -> None:
    # --constrained / --prefix-cache take on|off (bare means on), --model a name or a directory,
    # as in `picocontext eval`.
    assert parse("--smoke", "--constrained").constrained
    assert not parse("--smoke", "--constrained", "off").constrained
    assert not parse("--smoke", "--prefix-cache", "off").prefix_cache
    assert parse("--smoke", "--prefix-cache", "on").prefix_cache
    assert not parse("--smoke", "--no-prefix-cache").prefix_cache
    settings = parse("--smoke", "--model", str(tmp_path))
    assert settings.model is ModelChoice.DIRECTORY and settings.model_dir == tmp_path
    with pytest.raises(SetupError, match="neither a known model"):
        parse("--smoke", "--model", str(tmp_path / "nowhere"))
    with pytest.raises(SetupError, match="contradicts"):
        parse("--smoke", "--no-prefix-cache", "--prefix-cache", "on")
