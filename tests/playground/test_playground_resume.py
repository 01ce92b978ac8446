"""Resuming an interrupted comparison: the finished policies are reused, the rest run, and
the result is the uninterrupted run's (timings aside)."""

from __future__ import annotations

from typing import Any

from picocontext import CancelToken
from picocontext_playground.comparison import run_comparison
from picocontext_playground.model_loader import scripted_model
from picocontext_playground.results import PolicyOutcome, StepView
from picocontext_playground.resume import finished_count, journal_path, open_journal
from picocontext_playground.settings import ComparisonSettings, Task
from timeless import timeless

SETTINGS = ComparisonSettings(
    task=Task.REVISIONS, policies=("append-only", "editable", "sliding-window")
)


class Recorder:
    def __init__(self, cancel: CancelToken | None = None, after: int = 0) -> None:
        self.statuses: list[str] = []
        self.outcomes: list[PolicyOutcome] = []
        self.cancel, self.after = cancel, after

    def status(self, text: str) -> None:
        self.statuses.append(text)

    def progress(self, done: int, total: int) -> None:
        pass

    def step(self, policy: str, step: StepView) -> None:
        pass

    def outcome(self, outcome: PolicyOutcome) -> None:
        self.outcomes.append(outcome)
        if self.cancel is not None and len(self.outcomes) == self.after:
            self.cancel.cancel()


def outcomes_of(result: Any) -> Any:
    return timeless([o.model_dump(mode="json") for o in result.outcomes])


def test_a_stopped_run_resumes_with_only_the_policies_left() -> None:
    full = run_comparison(SETTINGS, scripted_model(), Recorder())
    assert not journal_path(SETTINGS).exists()  # a finished run leaves no journal
    cancel = CancelToken()
    stopped = run_comparison(
        SETTINGS, scripted_model(), Recorder(cancel, 2), cancel, open_journal(SETTINGS, False)
    )
    assert stopped.cancelled and len(stopped.outcomes) == 2
    assert stopped.status.endswith("Resume runs only the rest.")
    assert finished_count(SETTINGS) == 2
    recorder = Recorder()
    resumed = run_comparison(
        SETTINGS, scripted_model(), recorder, None, open_journal(SETTINGS, True)
    )
    assert resumed.completed
    reused = [s for s in recorder.statuses if s.startswith("Reusing")]
    assert len(reused) == 2 and "Append-only" in reused[0]
    assert outcomes_of(resumed) == outcomes_of(full)
    assert finished_count(SETTINGS) == 0 and not journal_path(SETTINGS).exists()


def test_run_without_resume_starts_over_and_other_settings_have_their_own_journal() -> None:
    cancel = CancelToken()
    run_comparison(
        SETTINGS, scripted_model(), Recorder(cancel, 1), cancel, open_journal(SETTINGS, False)
    )
    assert finished_count(SETTINGS) == 1
    other = SETTINGS.model_copy(update={"pressure": True})
    assert finished_count(other) == 0 and journal_path(other) != journal_path(SETTINGS)
    fewer = SETTINGS.model_copy(update={"policies": ("append-only",)})
    assert finished_count(fewer) == 1  # the policy list is not part of the key
    recorder = Recorder()
    run_comparison(SETTINGS, scripted_model(), recorder, None, open_journal(SETTINGS, False))
    assert not any(s.startswith("Reusing") for s in recorder.statuses)


def test_the_window_offers_resume_with_finished_and_remaining_and_runs_the_rest(
    qt_app: Any, qtbot: Any
) -> None:
    from PySide6.QtCore import Qt

    from picocontext_playground.results import ComparisonResult
    from picocontext_playground.window import MainWindow

    window = MainWindow(SETTINGS)
    qtbot.addWidget(window)
    window.show()
    try:
        settings = window.controls.current_settings()
        assert not window.controls.resume_button.isVisible()
        cancel = CancelToken()
        run_comparison(
            settings, scripted_model(), Recorder(cancel, 1), cancel, open_journal(settings, False)
        )
        window._sync_enabled()
        assert window.controls.resume_button.isVisible()
        assert (
            window.controls.resume_button.text()
            == f"Resume (1 of {len(settings.policies)} finished)"
        )
        statuses: list[str] = []
        window.status_changed.connect(statuses.append)
        with qtbot.waitSignal(window.run_finished, timeout=20_000) as blocker:
            qtbot.mouseClick(window.controls.resume_button, Qt.MouseButton.LeftButton)
        result = blocker.args[0]
        assert isinstance(result, ComparisonResult) and result.completed
        assert any(s.startswith("Reusing Append-only") for s in statuses)
        assert not window.controls.resume_button.isVisible()  # the finished run removed its journal
    finally:
        window.shutdown()
