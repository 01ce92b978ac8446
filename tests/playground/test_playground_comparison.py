"""The Qt-free comparison: order, budgets, grading passthrough, pressure, cancellation."""

from __future__ import annotations

import threading

import pytest

from picocontext import CancelToken, RunBudget, RunMode
from picocontext.models import ByteCounter
from picocontext_diagnostics import DeterministicNotebookBackend, order_lookup
from picocontext_playground.comparison import (
    PrintEvents,
    budgets_for,
    run_comparison,
    scaled,
    step_line,
)
from picocontext_playground.model_loader import LoadedModel, scripted_model
from picocontext_playground.results import ComparisonResult, PolicyOutcome, StepView, policy_label
from picocontext_playground.scripted import ScriptedPlaygroundBackend
from picocontext_playground.settings import ComparisonSettings, ModelChoice, Task


class Recorder:
    def __init__(self) -> None:
        self.statuses: list[str] = []
        self.progress_values: list[tuple[int, int]] = []
        self.steps: list[tuple[str, StepView]] = []
        self.outcomes: list[PolicyOutcome] = []

    def status(self, text: str) -> None:
        self.statuses.append(text)

    def progress(self, done: int, total: int) -> None:
        self.progress_values.append((done, total))

    def step(self, policy: str, step: StepView) -> None:
        self.steps.append((policy, step))

    def outcome(self, outcome: PolicyOutcome) -> None:
        self.outcomes.append(outcome)


def run(settings: ComparisonSettings, model: LoadedModel | None = None) -> ComparisonResult:
    return run_comparison(settings, model or scripted_model(), Recorder())


def test_sequential_app_budget_is_the_reference_profile() -> None:
    settings = ComparisonSettings(task=Task.RETENTION)
    budget, episode = budgets_for(settings, 1)
    assert budget == RunBudget(
        context_window=4_096,
        total_tokens=24_000,
        edit_output_tokens=1_024,
        completion_output_tokens=512,
        max_edit_attempts=4,
    )
    assert episode == 80_000
    lamp, none = budgets_for(ComparisonSettings(task=Task.ORDER_LOOKUP), 1)
    assert lamp == RunBudget() and none is None


def test_byte_models_get_scaled_budgets_but_the_same_attempts() -> None:
    budget = scaled(RunBudget(max_edit_attempts=3), 4)
    assert budget.context_window == 8_192 * 4 and budget.total_tokens == 96_000
    assert budget.edit_output_tokens == 4_096 and budget.completion_output_tokens == 2_048
    assert budget.max_edit_attempts == 3


def test_policies_run_in_the_given_order_baseline_first_with_identical_inputs() -> None:
    recorder = Recorder()
    settings = ComparisonSettings(task=Task.RETENTION, policies=("append-only", "editable"))
    result = run_comparison(settings, scripted_model(), recorder)
    assert [o.policy.name for o in result.outcomes] == ["append-only", "editable"]
    assert [p for p, _ in recorder.steps] == ["append-only"] * 4 + ["editable"] * 4
    base, edit = result.outcomes
    # Same caller records for both: every incoming record of the baseline transcript exists
    # verbatim in the editable transcript.
    base_in = {r.id: r for r in base.original.records if not r.id.endswith("-answer")}
    edit_in = {r.id: r for r in edit.original.records if not r.id.endswith("-answer")}
    assert base_in == edit_in
    assert result.completed and not result.cancelled
    assert recorder.progress_values[-1] == (8, 8)


def test_status_and_step_lines_name_policy_step_and_checks() -> None:
    recorder = Recorder()
    run_comparison(ComparisonSettings(task=Task.STATE_UPDATES), scripted_model(), recorder)
    assert recorder.statuses[0].startswith("Running 4 incoming updates with Append-only")
    assert any("Editable context (policy 2 of 2)" in s for s in recorder.statuses)
    assert recorder.statuses[-1].startswith("Finished.")
    lines = [step_line(p, s) for p, s in recorder.steps]
    assert lines[0] == "Append-only · step-1: context passed, answer passed"
    assert lines[-1] == "Editable · step-4: context passed, answer passed"


def test_editable_order_lookup_deletes_the_outdated_check_and_shrinks_the_prompt() -> None:
    result = run(ComparisonSettings(task=Task.ORDER_LOOKUP))
    base, edit = result.outcomes
    assert base.passed and edit.passed
    ids = {r.id for r in edit.revised.records}
    order = order_lookup()
    assert not ids & set(order.stale_record_ids)
    assert edit.prompt_after is not None and base.prompt_after is not None
    assert edit.prompt_after < base.prompt_after
    assert edit.edit_calls == 1 and base.edit_calls == 0
    step = edit.steps[0]
    assert step.run is not None and step.run.mode is RunMode.EDITABLE
    assert step.expected == order.expected.model_dump() == step.retained


def test_pressure_makes_append_only_fail_with_a_window_error_while_editing_passes() -> None:
    result = run(ComparisonSettings(task=Task.RETENTION, pressure=True))
    base, edit = result.outcomes
    assert result.noise_lines == 48
    assert not base.passed and edit.passed
    assert base.failure is not None and "context window" in base.failure
    last = base.steps[-1]
    assert last.failure == base.failure and last.prompt_after is None
    # the incoming records are still live; nothing was truncated
    assert "step-4-data" in {r.id for r in base.revised.records}
    assert result.completed  # a failed check is not a failed run


def test_without_pressure_both_policies_pass_every_step() -> None:
    result = run(ComparisonSettings(task=Task.STATE_UPDATES))
    assert result.noise_lines == 12
    assert all(o.passed for o in result.outcomes)
    assert [o.context_passed for o in result.outcomes] == [4, 4]


def test_a_backend_that_loses_a_fact_fails_the_context_check() -> None:
    lossy = LoadedModel(
        counter=ByteCounter(),
        backend=DeterministicNotebookBackend(drop_keys={"heron"}),
        model_id="lossy",
        label="lossy",
        token_unit="bytes",
        budget_scale=4,
    )
    result = run(ComparisonSettings(task=Task.RETENTION, policies=("editable",)), lossy)
    (outcome,) = result.outcomes
    assert not outcome.passed
    assert not outcome.steps[0].context_passed
    assert outcome.steps[0].context_problem is not None
    assert "heron" in outcome.steps[0].context_problem


def test_a_wrong_order_answer_is_reported_with_the_reason() -> None:
    class Forgetful(ScriptedPlaygroundBackend):
        def order_answer(self, context: object) -> str:
            return "SKU TB-318 at USD 62.00"

    model = scripted_model()
    model.backend = Forgetful(order_lookup())
    result = run(ComparisonSettings(task=Task.ORDER_LOOKUP, policies=("editable",)), model)
    step = result.outcomes[0].steps[0]
    assert not step.answer_passed
    assert step.answer_problem is not None
    assert "missing 44.90" in step.answer_problem and "62.00" in step.answer_problem


def test_n_policy_columns() -> None:
    result = run(
        ComparisonSettings(task=Task.RETENTION, policies=("summarize", "append-only", "editable"))
    )
    assert [o.label for o in result.outcomes] == ["Summarize", "Append-only", "Editable"]
    assert all(len(o.steps) == 4 for o in result.outcomes)


def test_cancel_mid_run_keeps_finished_policies_and_says_stopped() -> None:
    cancel = CancelToken()
    recorder = Recorder()

    class CancelAfterFirstPolicy(Recorder):
        def outcome(self, outcome: PolicyOutcome) -> None:
            super().outcome(outcome)
            cancel.cancel()

    recorder = CancelAfterFirstPolicy()
    settings = ComparisonSettings(task=Task.RETENTION)
    result = run_comparison(settings, scripted_model(), recorder, cancel)
    assert result.cancelled and not result.completed
    assert [o.policy.name for o in result.outcomes] == ["append-only"]
    assert result.status == "Stopped. Finished policies: Append-only."


def test_cancel_during_a_slow_generation_stops_promptly() -> None:
    cancel = CancelToken()
    model = scripted_model(delay=5.0)
    timer = threading.Timer(0.1, cancel.cancel)
    timer.start()
    result = run_comparison(ComparisonSettings(task=Task.ORDER_LOOKUP), model, Recorder(), cancel)
    timer.join()
    assert result.cancelled and result.outcomes == ()
    assert result.elapsed_seconds < 2.0


def test_print_events_write_status_and_step_lines() -> None:
    lines: list[str] = []
    run_comparison(
        ComparisonSettings(task=Task.ORDER_LOOKUP), scripted_model(), PrintEvents(lines.append)
    )
    assert "Append-only · order-lookup: context passed, answer passed" in lines
    assert lines[-1].startswith("Finished.")


@pytest.mark.parametrize(
    ("name", "label"),
    [("append-only", "Append-only"), ("editable", "Editable"), ("navigated-pcx", "Navigated pcx")],
)
def test_policy_labels(name: str, label: str) -> None:
    assert policy_label(name) == label


def test_result_records_model_and_settings() -> None:
    settings = ComparisonSettings(task=Task.RETENTION, model=ModelChoice.SCRIPTED)
    result = run(settings)
    assert result.settings == settings
    assert result.model_id == "scripted-deterministic"
    assert "bytes" in result.token_unit


@pytest.mark.parametrize("task", [Task.ORDER_LOOKUP, Task.RETENTION])
def test_every_task_closes_the_policy_objects_it_made(
    monkeypatch: pytest.MonkeyPatch, task: Task
) -> None:
    from picocontext import ModelBackend
    from picocontext.policies import ContextPolicy, DistilledPolicy
    from picocontext_diagnostics import Policy, policies

    made: list[ContextPolicy] = []
    real = policies.create_policy_object

    def spy(policy: Policy, backend: ModelBackend) -> ContextPolicy:
        obj = real(policy, backend)
        made.append(obj)
        return obj

    monkeypatch.setattr(policies, "create_policy_object", spy)
    result = run(ComparisonSettings(task=task, policies=("append-only", "distilled")))
    assert [o.policy.name for o in result.outcomes] == ["append-only", "distilled"]
    assert len(made) == 2
    (distilled,) = [p for p in made if isinstance(p, DistilledPolicy)]
    assert not distilled.corpus_dir.exists()  # closed: its temporary store is gone
