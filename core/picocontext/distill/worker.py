"""The debounced, batched, single-flight worker around :meth:`Distiller.sweep`.

Marks are persisted first (the distiller's dirty queue), then a per-corpus window is armed: the
sweep fires after a quiet gap of ``debounce`` and never later than ``max_wait`` after the
window's first mark. On start the worker sweeps whatever a previous process left pending, so a
crash between mark and sweep loses nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from picocontext.distill.data import SweepReport, Unit
from picocontext.distill.distiller import Distiller
from picocontext.distill.errors import ConfigError

DEFAULT_DEBOUNCE = 1.0


def clamp_windows(debounce: float, max_wait: float | None) -> tuple[float, float]:
    """Debounce <= 0 becomes 1 s; max-wait <= 0 (or None) becomes 10x debounce; a max-wait
    below the debounce is raised to it."""
    if debounce <= 0:
        debounce = DEFAULT_DEBOUNCE
    if max_wait is None or max_wait <= 0:
        max_wait = 10 * debounce
    return debounce, max(max_wait, debounce)


def next_fire_delay(debounce: float, deadline: float, now: float) -> float:
    """``max(0, min(debounce, deadline - now))``."""
    return max(0.0, min(debounce, deadline - now))


class DistillWorker:
    """One background thread per corpus. ``on_sweep`` receives every sweep report."""

    def __init__(
        self,
        distiller: Distiller,
        debounce: float = DEFAULT_DEBOUNCE,
        max_wait: float | None = None,
        on_sweep: Callable[[SweepReport], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.distiller = distiller
        self.debounce, self.max_wait = clamp_windows(debounce, max_wait)
        self._on_sweep = on_sweep
        self._clock = clock
        self._cv = threading.Condition()
        self._deadline: float | None = None
        self._fire_at: float | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.sweeps = 0
        self.reports: list[SweepReport] = []
        self.window_delays: list[float] = []
        self._window_opened: float | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the thread; it first resumes anything left pending by an earlier process."""
        if self._thread is not None:
            raise ConfigError("This worker is already running.")
        self._stopping = False
        self._thread = threading.Thread(
            target=self._run, name=f"distill-{self.distiller.config.corpus}", daemon=True
        )
        with self._cv:
            self._fire_at = self._clock()  # recovery sweep right away
        self._thread.start()

    def stop(self, flush: bool = True) -> None:
        """Stop the thread; with ``flush`` a final sweep processes pending marks."""
        thread = self._thread
        if thread is None:
            return
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        thread.join()
        self._thread = None
        if flush:
            self._sweep()

    def __enter__(self) -> DistillWorker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- intake ------------------------------------------------------------------------------
    def mark(self, unit: Unit) -> None:
        """Persist the change, then (re)arm the window."""
        self.distiller.mark(unit)
        self._schedule()

    def mark_delete(self, source_kind: str, unit_id: str) -> None:
        self.distiller.mark_delete(source_kind, unit_id)
        self._schedule()

    def poke(self) -> None:
        """Arm the window for marks made directly on the distiller (e.g. a reconcile with
        ``sweep=False``); does nothing when nothing is pending."""
        if self.distiller.store.pending_count():
            self._schedule()

    def _schedule(self) -> None:
        with self._cv:
            now = self._clock()
            if self._deadline is None:
                self._deadline = now + self.max_wait
                self._window_opened = now
            self._fire_at = now + next_fire_delay(self.debounce, self._deadline, now)
            self._cv.notify_all()

    # -- loop --------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stopping:
                    if self._fire_at is not None:
                        wait = self._fire_at - self._clock()
                        if wait <= 0:
                            break
                        self._cv.wait(timeout=wait)
                    else:
                        self._cv.wait()
                if self._stopping:
                    return
                # Take the window: the next mark opens a new one.
                if self._window_opened is not None:
                    self.window_delays.append(self._clock() - self._window_opened)
                self._fire_at = None
                self._deadline = None
                self._window_opened = None
            self._sweep()

    def _sweep(self) -> SweepReport:
        report = self.distiller.sweep()
        self.sweeps += 1
        self.reports.append(report)
        if self._on_sweep is not None:
            self._on_sweep(report)
        return report

    def flush(self) -> SweepReport:
        """Sweep now, on the caller's thread (serialised with the worker by the corpus gate)."""
        with self._cv:
            self._fire_at = None
            self._deadline = None
            self._window_opened = None
        return self._sweep()

    def idle(self) -> bool:
        with self._cv:
            return self._fire_at is None and self.distiller.store.pending_count() == 0
