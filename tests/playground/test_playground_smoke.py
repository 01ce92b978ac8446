"""Headless smoke: the real window runs, then the report and a PNG of that window are written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from picocontext_playground.settings import ComparisonSettings, ModelChoice, Task
from picocontext_playground.smoke import (
    EXIT_CHECKS_FAILED,
    EXIT_OK,
    EXIT_SETUP,
    EXIT_STOPPED,
    IMAGE_WIDTH,
    run_smoke,
)

REPO = Path(__file__).resolve().parents[2]


def distinct_colors(image: QImage, step: int = 7) -> int:
    seen: set[int] = set()
    for y in range(0, image.height(), step):
        for x in range(0, image.width(), step):
            seen.add(image.pixel(x, y))
    return len(seen)


def test_smoke_writes_report_and_window_png(qt_app: QApplication, tmp_path: Path) -> None:
    report, image = tmp_path / "out" / "report.txt", tmp_path / "out" / "window.png"
    lines: list[str] = []
    settings = ComparisonSettings(task=Task.STATE_UPDATES, model=ModelChoice.SCRIPTED)
    assert run_smoke(settings, report, image, echo=lines.append) == EXIT_OK
    text = report.read_text(encoding="utf-8")
    assert text.startswith("PicoContext playground report\nTask: State updates\n")
    assert "Editable · step-4: context passed, answer passed" in lines
    assert f"Report: {report}" in lines
    png = QImage(str(image))
    assert not png.isNull()
    assert png.width() == IMAGE_WIDTH and png.height() > 1000
    assert distinct_colors(png) > 40  # text, bars, highlights: not a blank or flat image
    assert any(line.startswith(f"Image: {image} ({IMAGE_WIDTH}x") for line in lines)


def test_smoke_order_lookup_without_outputs_prints_the_report(
    qt_app: QApplication,
) -> None:
    lines: list[str] = []
    settings = ComparisonSettings(task=Task.ORDER_LOOKUP, model=ModelChoice.SCRIPTED)
    assert run_smoke(settings, None, None, echo=lines.append) == EXIT_OK
    report = next(line for line in lines if line.startswith("PicoContext playground report"))
    assert "EXACT NEXT INPUT" in report and "Task: Order lookup" in report


def test_smoke_exits_2_when_the_model_cannot_load(qt_app: QApplication, tmp_path: Path) -> None:
    lines: list[str] = []
    settings = ComparisonSettings(model=ModelChoice.DIRECTORY, model_dir=tmp_path)
    errors: list[str] = []
    code = run_smoke(
        settings, tmp_path / "r.txt", tmp_path / "i.png", echo=lines.append, fail=errors.append
    )
    assert code == EXIT_SETUP
    assert len(errors) == 1 and errors[0].startswith("picocontext app: error: ")
    assert not (tmp_path / "r.txt").exists() and not (tmp_path / "i.png").exists()


def test_smoke_exits_2_when_the_report_cannot_be_written(
    qt_app: QApplication, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    lines: list[str] = []
    settings = ComparisonSettings(task=Task.ORDER_LOOKUP, model=ModelChoice.SCRIPTED)
    code = run_smoke(settings, blocker / "report.txt", None, echo=lines.append, fail=lines.append)
    assert code == EXIT_SETUP
    assert lines[-1].startswith("picocontext app: error: cannot write output")


def test_exit_codes_are_distinct() -> None:
    assert len({EXIT_OK, EXIT_STOPPED, EXIT_SETUP, EXIT_CHECKS_FAILED}) == 4
    assert (EXIT_SETUP, EXIT_CHECKS_FAILED) == (2, 3)  # the rule of every command


def _headless_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("QT_QPA_PLATFORM", None)  # the command must choose offscreen by itself
    env["PICOCONTEXT_SMOKE_REPORT"] = str(tmp_path / "env-report.txt")
    env["PICOCONTEXT_SMOKE_IMAGE"] = str(tmp_path / "env-image.png")
    return env


def test_command_runs_with_no_display_and_uses_the_environment_paths(tmp_path: Path) -> None:
    # Under pressure append-only fails its answer check: the run completes and exits 3.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "picocontext_playground",
            "--episode-smoke",
            "retention",
            "--pressure",
            "--backend",
            "scripted",
        ],
        env=_headless_env(tmp_path),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    assert "Append-only · step-4: context passed, answer failed" in proc.stdout
    text = (tmp_path / "env-report.txt").read_text(encoding="utf-8")
    assert "context pressure on" in text
    assert not QImage(str(tmp_path / "env-image.png")).isNull()


def test_command_setup_error_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "picocontext_playground", "--smoke", "--model-dir", "/nope/x"],
        env=_headless_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "model directory /nope/x does not exist" in proc.stderr


def test_flags_win_over_environment_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from picocontext_playground import cli, smoke

    seen: list[tuple[Path | None, Path | None]] = []

    def fake_smoke(
        settings: ComparisonSettings, report: Path | None, image: Path | None, **_: Any
    ) -> int:
        seen.append((report, image))
        return 0

    monkeypatch.setattr(smoke, "run_smoke", fake_smoke)
    monkeypatch.setenv(cli.REPORT_ENV, str(tmp_path / "env.txt"))
    monkeypatch.setenv(cli.IMAGE_ENV, str(tmp_path / "env.png"))
    assert cli.run(["--smoke", "--backend", "scripted"]) == 0
    assert cli.run(["--smoke", "--backend", "scripted", "--report", str(tmp_path / "f.txt")]) == 0
    monkeypatch.delenv(cli.REPORT_ENV)
    monkeypatch.delenv(cli.IMAGE_ENV)
    assert cli.run(["--episode-smoke", "state-updates", "--pressure", "--backend", "scripted"]) == 0
    assert seen == [
        (tmp_path / "env.txt", tmp_path / "env.png"),
        (tmp_path / "f.txt", tmp_path / "env.png"),
        (
            Path("out/smoke-state-updates-pressure.txt"),
            Path("out/smoke-state-updates-pressure.png"),
        ),
    ]
