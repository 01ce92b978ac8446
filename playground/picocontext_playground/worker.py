"""The worker that does all model work off the GUI thread.

One :class:`ComparisonWorker` lives in one ``QThread`` per run. It loads (or reuses) the model,
runs the comparison and reports through signals; Qt queues those signals to the ``@Slot``
methods of the window on the GUI thread, so no widget is touched from the worker. Stop sets
the shared :class:`picocontext.CancelToken`, which the session and the backends check between
and during generations.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal, Slot

from picocontext import Cancelled, CancelToken, PicoContextError
from picocontext.models import GenerationProgress
from picocontext_playground.comparison import run_comparison
from picocontext_playground.model_loader import ModelCache
from picocontext_playground.results import ComparisonResult, PolicyOutcome, StepView
from picocontext_playground.resume import OutcomeJournal, open_journal
from picocontext_playground.settings import ComparisonSettings, engine_label

# Progress is reported in per-mille of the whole run. When a model must be loaded first, the
# load takes the first LOAD_SHARE of the bar.
PROGRESS_MAX = 1000
LOAD_SHARE = 300
# Prompt tokens computed between two Stop checks on a real model. A 1.5B float32 model on
# two CPU cores needs tens of seconds for 512; 128 keeps Stop within a few seconds there at a
# small cost in prefill speed (the same for every policy of a run).
PREFILL_CHUNK = 128


class ComparisonWorker(QObject):
    """Runs one comparison; emits ``finished`` or ``failed`` exactly once, then ``done``."""

    status = Signal(str)
    progress = Signal(int)  # 0..PROGRESS_MAX, or -1 for "busy, amount unknown"
    model_ready = Signal(str, str)  # label, token unit
    step = Signal(str, object)  # policy name, StepView
    outcome = Signal(object)  # PolicyOutcome
    finished = Signal(object)  # ComparisonResult
    failed = Signal(str)
    # policy name, 1-based step, GenerationProgress (real models only, throttled by the model)
    generation = Signal(str, int, object)
    done = Signal()

    def __init__(
        self,
        settings: ComparisonSettings,
        cache: ModelCache,
        cancel: CancelToken,
        resume: bool = False,
    ) -> None:
        """``resume``: reuse the policies an interrupted run of these settings finished
        (:mod:`picocontext_playground.resume`); every run journals its finished policies."""
        super().__init__()
        self.settings = settings
        self.cache = cache
        self.cancel = cancel
        self.resume = resume
        self._run_start = 0
        self._policy = 0  # index of the running policy in settings.policies
        self._step = 1  # 1-based step of that policy

    # ComparisonEvents -----------------------------------------------------------------
    def _status(self, text: str) -> None:
        self.status.emit(text)

    def _progress(self, done: int, total: int) -> None:
        span = PROGRESS_MAX - self._run_start
        value = self._run_start + (span * done // total if total else span)
        self.progress.emit(value)

    def _on_step(self, policy: str, step: StepView) -> None:
        self._step += 1
        self.step.emit(policy, step)

    def _on_outcome(self, outcome: PolicyOutcome) -> None:
        self._policy += 1
        self._step = 1
        self.outcome.emit(outcome)

    def _generation(self, progress: GenerationProgress) -> None:
        """Runs on the model's worker thread; the signal is queued to the window."""
        policies = self.settings.policies
        if self._policy < len(policies):
            self.generation.emit(policies[self._policy], self._step, progress)

    def _watch(self, raw: object) -> None:
        """Listen to a real model's generations (stand-ins have no progress to report)."""
        if hasattr(raw, "progress_listener"):
            raw.progress_listener = self._generation
            raw.prefill_step_size = PREFILL_CHUNK  # type: ignore[attr-defined]

    @staticmethod
    def _unwatch(raw: object) -> None:
        if hasattr(raw, "progress_listener"):
            raw.progress_listener = None

    def _load_progress(self, label: str, fraction: float | None) -> None:
        self.status.emit(label)
        if fraction is None:
            self.progress.emit(-1)
        else:
            self.progress.emit(int(LOAD_SHARE * max(0.0, min(1.0, fraction))))
        self.cancel.check()

    def _journal(self) -> OutcomeJournal | None:
        """The run's journal; a data folder that cannot be written costs only resumability,
        so the run goes on without one and says so."""
        try:
            return open_journal(self.settings, self.resume)
        except OSError as exc:
            self.status.emit(f"Not journaling this run (it cannot be resumed): {exc}")
            return None

    def _what(self) -> str:
        """The chosen model, and for a real one the engine it loads on."""
        model = self.settings.model
        label = model.label.rstrip("…")
        return f"{label} on {engine_label(self.settings.engine)}" if model.real else label

    @Slot()
    def run(self) -> None:
        try:
            self.status.emit(f"Loading {self._what()}…")
            model = self.cache.get(self.settings, self._load_progress, self.cancel)
            self.model_ready.emit(f"{model.label} on {engine_label(model.kind)}", model.token_unit)
            self._run_start = LOAD_SHARE if self.settings.model.real else 0
            self._watch(model.raw)
            try:
                journal = self._journal()
                result = run_comparison(
                    self.settings, model, _Events(self), self.cancel, journal=journal
                )
            finally:
                self._unwatch(model.raw)
        except Cancelled:
            self.status.emit("Stopped before the model was ready.")
            self.failed.emit("Stopped before the model was ready.")
        except PicoContextError as exc:
            self.failed.emit(exc.message)
        except Exception as exc:  # a bug must reach the status line, not kill the thread
            self.failed.emit(f"Unexpected error: {type(exc).__name__}: {exc}")
        else:
            self.finished.emit(result)
        finally:
            self.done.emit()


class _Events:
    """Adapts :class:`ComparisonWorker` to the plain ``ComparisonEvents`` protocol."""

    def __init__(self, worker: ComparisonWorker) -> None:
        self.worker = worker

    def status(self, text: str) -> None:
        self.worker._status(text)

    def progress(self, done: int, total: int) -> None:
        self.worker._progress(done, total)

    def step(self, policy: str, step: StepView) -> None:
        self.worker._on_step(policy, step)

    def outcome(self, outcome: PolicyOutcome) -> None:
        self.worker._on_outcome(outcome)


__all__ = ["LOAD_SHARE", "PREFILL_CHUNK", "PROGRESS_MAX", "ComparisonResult", "ComparisonWorker"]
