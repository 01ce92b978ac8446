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

from picocontext_playground.comparison import ComparisonResult
from picocontext_playground.errors import SetupError
from picocontext_playground.models import ModelCache
from picocontext_playground.qtenv import application, require_glyphs
from picocontext_playground.reports import check_report_path, check_writable, render
from picocontext_playground.settings import ComparisonSettings
from picocontext_playground.textreport import render_report, summary_block, write_atomically
from picocontext_playground.window import COLUMN_MIN_WIDTH, MainWindow

EXIT_OK = 0
EXIT_STOPPED = 1
EXIT_SETUP = 2
IMAGE_WIDTH = 1400
MAX_IMAGE_HEIGHT = 6000
MAX_PANE_HEIGHT = 2400


def capture_width(columns: int) -> int:
    """Wide enough that every policy column gets at least its minimum width."""
    return max(IMAGE_WIDTH, columns * (COLUMN_MIN_WIDTH + 20) + 60)


def fit_for_capture(window: MainWindow, width: int | None = None) -> None:
    """Resize the window so the scroll area shows all results without scrolling (capped)."""
    app = QApplication.instance()
    width = width or capture_width(len(window.columns))
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
    window: MainWindow, interrupt: Callable[[], bool] | None = None
) -> ComparisonResult | None:
    """Press Run comparison and wait (in a local event loop) until the run has ended."""
    loop = QEventLoop()
    window.run_finished.connect(lambda _result: loop.quit())
    ticker = QTimer()
    ticker.setInterval(100)  # lets Python deliver Ctrl-C while Qt waits

    def tick() -> None:
        if interrupt is not None and interrupt():
            window.stop()

    ticker.timeout.connect(tick)
    ticker.start()
    QTimer.singleShot(0, window.start_comparison)
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
    fail: Callable[[str], None] | None = None,
) -> int:
    """Run one comparison headlessly; write the report and the PNG; return the exit code:
    0 when the run completed (failed checks included — the report says so), 1 when it was
    stopped, 2 when it could not start. Progress goes to ``echo``; the one line saying why
    it could not start goes to ``fail`` (stderr by default)."""
    fail = fail or _to_stderr
    try:
        if report_path is not None:
            check_report_path(report_path, "report")
        if image_path is not None:
            check_writable(image_path, "image")
    except SetupError as exc:
        fail(f"picocontext: cannot write output: {exc.message}")
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
        result = run_in_window(window, lambda: interrupted)
        if result is None:
            fail(f"picocontext: {window.last_error or 'the comparison did not start'}")
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
        return EXIT_OK if result.completed else EXIT_STOPPED
    except OSError as exc:
        echo(f"picocontext: cannot write output: {exc}")
        return EXIT_SETUP
    finally:
        signal.signal(signal.SIGINT, previous)
        window.shutdown()
        window.close()
        window.deleteLater()
        app.processEvents()
