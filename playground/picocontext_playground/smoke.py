"""Headless smoke runs: the same window, the same button, then a report and a screenshot.

The run goes through :class:`~picocontext_playground.window.MainWindow` exactly as a click on
**Run comparison** would (worker thread, signals, rendering). When it ends, the report is
written (the extension chooses text, JSON or HTML) and the real window — enlarged so every
result pane is visible — is grabbed with ``QWidget.grab`` into a PNG. Nothing is drawn
separately for the image.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from PySide6.QtCore import QBuffer, QEventLoop, QIODevice, QTimer
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QApplication

from picocontext.cli import error_line
from picocontext_playground.errors import SetupError
from picocontext_playground.model_loader import ModelCache
from picocontext_playground.policy_column import COLUMN_MIN_WIDTH
from picocontext_playground.qtenv import application, require_glyphs
from picocontext_playground.reports import check_report_path, check_writable, render
from picocontext_playground.results import ComparisonResult
from picocontext_playground.settings import ComparisonSettings
from picocontext_playground.textreport import render_report, summary_block, write_atomically
from picocontext_playground.window import MainWindow

PROG = "picocontext app"
EXIT_OK = 0
EXIT_STOPPED = 1
EXIT_SETUP = 2
EXIT_CHECKS_FAILED = 3
IMAGE_WIDTH = 1400
MAX_IMAGE_HEIGHT = 6000
MAX_IMAGE_WIDTH = 3200
MAX_PANE_HEIGHT = 2400


def capture_width(columns: int) -> int:
    """Wide enough that every policy column gets at least its minimum width."""
    return max(IMAGE_WIDTH, columns * (COLUMN_MIN_WIDTH + 20) + 60)


def fit_for_capture(window: MainWindow, width: int | None = None) -> None:
    """Resize the window so the scroll area shows all results without scrolling (capped)."""
    app = QApplication.instance()
    # Each column at least as wide as its tab bar, so no tab label is cut in the image.
    tabs = max((c.tabs.tabBar().sizeHint().width() for c in window.columns.values()), default=0)
    width = width or min(
        MAX_IMAGE_WIDTH,
        max(capture_width(len(window.columns)), len(window.columns) * (tabs + 40) + 60),
    )
    window.resize(width, window.height())
    if app is not None:
        app.processEvents()
    for column in window.columns.values():
        column.expand_for_capture(MAX_PANE_HEIGHT)
    if app is not None:
        app.processEvents()
    chrome = window.height() - window.results_scroll.viewport().height()
    content = window.results.sizeHint().height()
    window.resize(width, min(MAX_IMAGE_HEIGHT, max(window.height(), chrome + content + 4)))
    if app is not None:
        app.processEvents()


def grab_png(window: MainWindow) -> bytes:
    """The window as PNG bytes, grabbed from the real widget tree."""
    pixmap: QPixmap = window.grab()
    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not pixmap.save(buffer, "PNG"):
        raise SetupError("Qt could not encode the window as PNG")
    return bytes(buffer.data().data())


def run_in_window(
    window: MainWindow, interrupt: Callable[[], bool] | None = None, resume: bool = False
) -> ComparisonResult | None:
    """Press Run comparison (or Resume) and wait (in a local event loop) until the run has
    ended."""
    loop = QEventLoop()
    window.run_finished.connect(lambda _result: loop.quit())
    ticker = QTimer()
    ticker.setInterval(100)  # lets Python deliver Ctrl-C while Qt waits

    def tick() -> None:
        if interrupt is not None and interrupt():
            window.stop()

    ticker.timeout.connect(tick)
    ticker.start()
    QTimer.singleShot(0, lambda: window.start_comparison(resume))
    loop.exec()
    ticker.stop()
    return window.result


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def run_smoke(
    settings: ComparisonSettings,
    report_path: Path | None,
    image_path: Path | None,
    *,
    cache: ModelCache | None = None,
    echo: Callable[[str], None] = print,
    resume: bool = False,
    fail: Callable[[str], None] | None = None,
) -> int:
    """Run one comparison headlessly; write the report and the PNG; return the exit code:
    0 when the run completed and every policy passed, 3 when it completed with a failed check
    (the report says which), 1 when it was stopped, 2 when it could not start. Progress goes
    to ``echo``; the one line saying why it could not start goes to ``fail`` (stderr by
    default)."""
    fail = fail or _to_stderr
    try:
        if report_path is not None:
            check_report_path(report_path, "report")
        if image_path is not None:
            check_writable(image_path, "image")
    except SetupError as exc:
        fail(error_line(PROG, f"cannot write output: {exc.message}"))
        return EXIT_SETUP
    app = application()
    require_glyphs(app)
    interrupted = False

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupted
        interrupted = True

    previous = signal.signal(signal.SIGINT, on_sigint)
    window = MainWindow(settings, cache)
    try:
        window.resize(IMAGE_WIDTH, 1000)
        window.show()
        window.status_changed.connect(echo)
        result = run_in_window(window, lambda: interrupted, resume)
        if result is None:
            fail(error_line(PROG, window.last_error or "the comparison did not start"))
            return EXIT_SETUP
        if report_path is not None:
            write_atomically(report_path, render(result, report_path).encode("utf-8"))
            echo(f"Report: {report_path}")
        else:
            echo(render_report(result))
        if image_path is not None:
            fit_for_capture(window)
            write_atomically(image_path, grab_png(window))
            echo(f"Image: {image_path} ({window.width()}x{window.height()})")
        for outcome in result.outcomes:
            for line in summary_block(outcome):
                echo(line)
        if not result.completed:
            return EXIT_STOPPED
        return EXIT_OK if all(o.passed for o in result.outcomes) else EXIT_CHECKS_FAILED
    except OSError as exc:
        fail(error_line(PROG, f"cannot write output: {exc}"))
        return EXIT_SETUP
    finally:
        signal.signal(signal.SIGINT, previous)
        window.shutdown()
        window.close()
        window.deleteLater()
        app.processEvents()
