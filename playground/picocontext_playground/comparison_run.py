"""The lifetime of one comparison in the window: its worker, the ``QThread`` it runs in and the
:class:`picocontext.CancelToken` that stops it.

:class:`ComparisonRun` is the one place those three are created, started, cancelled and
released, so the window only renders what the worker reports. A run goes through
:meth:`~ComparisonRun.prepare` (the caller connects the worker's signals),
:meth:`~ComparisonRun.start` and, once the thread has ended, ``ended``; the garbage collector is
held for as long as the thread runs (:mod:`picocontext_playground.gcguard`).
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

from picocontext import CancelToken
from picocontext_playground import gcguard
from picocontext_playground.model_loader import ModelCache
from picocontext_playground.settings import ComparisonSettings
from picocontext_playground.worker import ComparisonWorker


class ComparisonRun(QObject):
    """Thread, worker and cancel token of the comparison in progress (all ``None`` when
    idle). ``ended`` fires on the GUI thread after the thread finished and was released."""

    ended = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.qthread: QThread | None = None
        self.worker: ComparisonWorker | None = None
        self.cancel: CancelToken | None = None

    @property
    def running(self) -> bool:
        return self.qthread is not None

    def prepare(
        self, settings: ComparisonSettings, cache: ModelCache, resume: bool = False
    ) -> ComparisonWorker:
        """A worker for ``settings`` with a fresh cancel token, moved to a new thread that
        :meth:`start` starts; from here on the run counts as running."""
        cancel = CancelToken()
        thread = QThread(self)
        worker = ComparisonWorker(settings, cache, cancel, resume)
        worker.moveToThread(thread)
        thread.started.connect(worker.run)
        # Direct: quit() is thread-safe, and a queued call would wait for the GUI thread, which
        # may itself be blocked in shutdown() waiting for this thread.
        worker.done.connect(thread.quit, Qt.ConnectionType.DirectConnection)
        thread.finished.connect(self._thread_finished)
        self.qthread, self.worker, self.cancel = thread, worker, cancel
        return worker

    def start(self) -> None:
        """Start the prepared thread."""
        assert self.qthread is not None, "prepare() first"
        gcguard.hold()  # cycles are collected on the GUI thread only (see gcguard)
        self.qthread.start()

    def discard(self) -> None:
        """Forget a run that could not be started."""
        self.qthread, self.worker, self.cancel = None, None, None

    def stop(self) -> bool:
        """Cancel the run at the worker's next check; whether there was a run to stop."""
        if self.cancel is None or not self.running:
            return False
        self.cancel.cancel()
        return True

    def shutdown(self, timeout_ms: int) -> bool:
        """Cancel any run and wait up to ``timeout_ms`` for its thread; whether it ended."""
        thread = self.qthread
        if thread is None:
            return True
        if self.cancel is not None:
            self.cancel.cancel()
        thread.quit()  # the event loop ends as soon as the running slot returns
        return thread.wait(timeout_ms)

    @Slot()
    def _thread_finished(self) -> None:
        thread, worker = self.qthread, self.worker
        self.discard()
        if worker is not None:
            worker.deleteLater()
        if thread is not None:
            thread.deleteLater()
        gcguard.release()
        self.ended.emit()


__all__ = ["ComparisonRun"]
