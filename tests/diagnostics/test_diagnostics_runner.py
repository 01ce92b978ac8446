"""The episode runner's guarantees (checklist 70, 72-78; reference DiagnosticTests)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from picocontext import (
    EDIT_TOOL,
    BudgetExceeded,
    Cancelled,
    CancelToken,
    ContextSession,
    ModelInput,
    ModelResponse,
    ModelToolCall,
    Phase,
    PreparedPrompt,
    Record,
    Role,
    RunBudget,
    RunReport,
    validate_snapshot,
)
from picocontext.models import ByteCounter, ScriptedBackend
from picocontext.policies import ContextPolicy
from picocontext_diagnostics.episodes.episode import Episode, fixture_episode
from picocontext_diagnostics.episodes.episode_runner import (
    DEFAULT_EPISODE_TOKENS,
    EPISODE_EXHAUSTED,
    EpisodeRunner,
    StepReport,
    sequential_budget,
)
from picocontext_diagnostics.episodes.fixtures import Scenario, dumps_sorted
from picocontext_diagnostics.episodes.grading import notebook_state
from picocontext_diagnostics.episodes.notebook_backend import DeterministicNotebookBackend
from picocontext_diagnostics.errors import InvalidEpisode
from picocontext_diagnostics.policies import APPEND_ONLY, EDITABLE, SUMMARIZE, Policy, run_turn

BUDGET = RunBudget(context_window=32_000, total_tokens=120_000, max_edit_attempts=4)
POLICIES = [APPEND_ONLY, EDITABLE, SUMMARIZE]


def answer_json(facts: dict[str, str]) -> str:
    return dumps_sorted({"facts": facts})


class ForcedAnswers:
    """Decisions from the notebook backend (optionally forgetful); answers forced in order."""

    def __init__(self, answers: list[str], drop_keys: tuple[str, ...] = ()) -> None:
        self.inner = DeterministicNotebookBackend(drop_keys=drop_keys)
        self.answers = list(answers)
        self.prompts: list[PreparedPrompt] = []

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        self.prompts.append(prompt)
        if prompt.input.phase is Phase.EDIT:
            return self.inner.generate(prompt, max_tokens, cancel)
        return ModelResponse(text=self.answers.pop(0), generated_tokens=4)


def rewrite_newest(body: str, answer: str) -> Callable[[PreparedPrompt, int], ModelResponse]:
    """A scripted model that rewrites the newest tool result into ``body``."""

    def respond(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        snap = prompt.input.context
        if prompt.input.phase is Phase.COMPLETION:
            return ModelResponse(text=answer, generated_tokens=4)
        newest = [r for r in snap.records if r.role is Role.TOOL and not r.protected][-1]
        args = json.dumps(
            {
                "baseRevision": snap.revision,
                "operations": [{"action": "replace", "recordID": newest.id, "body": body}],
            }
        )
        return ModelResponse(
            tool_calls=(ModelToolCall(name=EDIT_TOOL, arguments=args),), generated_tokens=4
        )

    return respond


# -- delivery into the exact next input ------------------------------------------------------


@pytest.mark.parametrize("scenario", list(Scenario))
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_episodes_deliver_operations_and_replies_into_the_exact_next_input(
    scenario: Scenario, policy: Policy
) -> None:
    episode = fixture_episode(scenario)
    counter = ByteCounter()
    backend = DeterministicNotebookBackend()
    seen: list[StepReport] = []
    report = EpisodeRunner(counter, backend).run(episode, policy, BUDGET, on_step=seen.append)
    assert report.passed and report.failure is None
    assert (
        [s.step.id for s in seen]
        == [s.id for s in episode.steps]
        == [s.step.id for s in report.steps]
    )
    for index, step in enumerate(report.steps):
        run = step.run
        assert run is not None and run.failure is None and run.final_prompt is not None
        final = run.final_prompt
        assert final.input.phase is Phase.COMPLETION
        assert final.input.context == run.revised
        assert final.token_ids == counter.prepare(final.input).token_ids
        live_ids = [r.id for r in final.input.context.records]
        assert live_ids[-1] == step.step.records[-1].id  # ends with the request
        if index:
            assert f"step-{index}-answer" in live_ids  # the previous reply is live
        ops = [
            line for line in step.step.records[1].body.split("\n") if line[:5] in ("FACT ", "REMO")
        ]
        data = final.input.context.record(step.step.records[1].id)
        if policy is SUMMARIZE:
            assert notebook_state(final.input.context) == step.step.expected_facts
        else:
            assert data is not None and all(op in data.body for op in ops)
        assert run.total_input_tokens == sum(p.token_count for p in run.calls)
        assert step.answer_correct and step.retained_correct
    validate_snapshot(report.original)
    assert report.revised.records[-1].id == episode.steps[-1].answer_record_id
    assert backend.calls == sum(len(s.run.calls) for s in report.steps if s.run)
    transcript_data = report.original.record("step-1-data")
    assert transcript_data is not None and "Sensor sweep 1" in transcript_data.body
    live_data = report.revised.record("step-1-data")
    if policy is APPEND_ONLY:
        assert live_data == transcript_data
    else:
        assert live_data is None or "Sensor sweep" not in live_data.body


def test_updates_and_removals_are_graded_in_live_order() -> None:
    episode = fixture_episode(Scenario.STATE_UPDATES)
    report = EpisodeRunner(ByteCounter(), DeterministicNotebookBackend()).run(
        episode, EDITABLE, BUDGET
    )
    assert [s.retained_facts for s in report.steps] == [s.expected_facts for s in episode.steps]
    assert report.steps[-1].retained_facts == {"crates": "5", "keeper": "Tomas"}
    assert notebook_state(report.revised) == {"crates": "5", "keeper": "Tomas"}


# -- grading on the revised context, before the answer ----------------------------------------


def test_a_correct_scripted_answer_cannot_hide_lost_live_context() -> None:
    episode = fixture_episode(Scenario.RETENTION)
    answers = [answer_json(s.expected_facts) for s in episode.steps]
    backend = ForcedAnswers(answers, drop_keys=("heron",))
    report = EpisodeRunner(ByteCounter(), backend).run(episode, EDITABLE, BUDGET)
    assert [s.answer_correct for s in report.steps] == [True] * 4
    # step 1 lost heron from live context; later steps see it again in the step-1 answer
    assert [s.retained_correct for s in report.steps] == [False, True, True, True]
    assert report.steps[0].context_problem == "missing heron"
    assert not report.passed and report.failure is None


def test_a_later_caller_note_restores_state_without_erasing_the_earlier_failure() -> None:
    episode = fixture_episode(Scenario.RETENTION)
    step2 = episode.steps[1]
    note = Record(id="caller-note", role=Role.USER, body="Reminder:\nFACT heron=KX-7302-B")
    patched = step2.model_copy(update={"records": (*step2.records[:2], note, step2.records[2])})
    episode = episode.model_copy(update={"steps": (episode.steps[0], patched, *episode.steps[2:])})
    backend = DeterministicNotebookBackend(drop_keys=("heron",))
    report = EpisodeRunner(ByteCounter(), backend).run(episode, EDITABLE, BUDGET)
    assert [s.retained_correct for s in report.steps] == [False, True, True, True]
    assert [s.answer_correct for s in report.steps] == [False, True, True, True]
    assert not report.passed
    assert report.retained_correct_steps == 3 and report.answer_correct_steps == 3


@pytest.mark.parametrize(
    ("note", "credited"),
    [
        ("FACT heron=KX-7302-B", True),
        ("Notes: FACT heron=KX-7302-B; keep it", True),
        ('{"facts":{"heron":"KX-7302-B"}}', True),
        ("heron is KX-7302-BB", False),
        ("heron=KX-7302-B.old", False),
        ("heron KX-7302-B\u0301", False),
        ("archive:KX-7302-B", False),
    ],
)
def test_literal_retention_ignores_note_style_and_never_credits_extended_identifiers(
    note: str, credited: bool
) -> None:
    episode = fixture_episode(Scenario.RETENTION)
    one_step = episode.model_copy(update={"steps": episode.steps[:1]})
    answer = answer_json(episode.steps[0].expected_facts)
    backend = ScriptedBackend(rewrite_newest(note, answer))
    report = EpisodeRunner(ByteCounter(), backend).run(one_step, EDITABLE, BUDGET)
    assert report.steps[0].answer_correct
    assert report.steps[0].retained_correct is credited
    assert report.passed is credited


# -- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad_id", ["", "instructions", "step-1-answer"])
def test_failed_answer_delivery_is_reported_once_and_keeps_model_usage(bad_id: str) -> None:
    episode = fixture_episode(Scenario.RETENTION)
    target = 1 if bad_id == "step-1-answer" else 0  # reuse step 1's answer id in step 2
    steps = list(episode.steps)
    steps[target] = steps[target].model_copy(update={"answer_record_id": bad_id})
    episode = episode.model_copy(update={"steps": tuple(steps)})
    seen: list[StepReport] = []
    report = EpisodeRunner(ByteCounter(), DeterministicNotebookBackend()).run(
        episode, APPEND_ONLY, BUDGET, on_step=seen.append
    )
    assert len(seen) == target + 1 == len(report.steps)
    failed = report.steps[-1]
    assert failed.failure is not None and failed.failure.startswith("Invalid context or edit")
    assert failed.run is not None and failed.run.answer and failed.run.total_input_tokens > 0
    assert not failed.answer_correct and failed.retained_correct
    assert report.failure == failed.failure and not report.passed
    assert report.total_input_tokens == sum(s.run.total_input_tokens for s in report.steps if s.run)
    validate_snapshot(report.original)
    validate_snapshot(report.revised)


def test_pressure_fails_append_only_on_the_window_while_editing_passes() -> None:
    episode = fixture_episode(Scenario.RETENTION, noise_lines=50)
    budget = RunBudget(context_window=12_000, total_tokens=120_000, max_edit_attempts=4)
    counter = ByteCounter()
    append = EpisodeRunner(counter, DeterministicNotebookBackend()).run(
        episode, APPEND_ONLY, budget
    )
    assert not append.passed
    last = append.steps[-1]
    assert (
        last.failure
        == BudgetExceeded("input plus reserved output exceeds the context window").message
    )
    assert last.run is not None and last.run.calls == ()  # nothing was dispatched
    assert len(append.steps) < len(episode.steps)  # the episode stopped
    incoming = last.step.records[1]
    assert append.revised.record(incoming.id) == incoming  # present, never truncated
    editing = EpisodeRunner(counter, DeterministicNotebookBackend()).run(episode, EDITABLE, budget)
    assert editing.passed
    for step in editing.steps:
        assert step.run is not None
        assert all(p.token_count <= budget.context_window for p in step.run.calls)


def test_episode_allowance_stops_before_another_generation() -> None:
    episode = fixture_episode(Scenario.RETENTION)
    two = episode.model_copy(update={"steps": episode.steps[:2]})
    budget = BUDGET.model_copy(update={"completion_output_tokens": 200})
    answer = answer_json(episode.steps[0].expected_facts)

    def full_cap(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        return ModelResponse(text=answer, generated_tokens=max_tokens)  # uses its whole cap

    probe = EpisodeRunner(ByteCounter(), ScriptedBackend(full_cap)).run(two, APPEND_ONLY, budget)
    first_cost = probe.steps[0].input_tokens + probe.steps[0].generated_tokens
    for limit, expected in (
        (first_cost, EPISODE_EXHAUSTED),
        (first_cost + 100, "Token budget exceeded: total input/output allowance cannot reserve"),
    ):
        backend = ScriptedBackend(full_cap)
        report = EpisodeRunner(ByteCounter(), backend).run(
            two, APPEND_ONLY, budget, episode_tokens=limit
        )
        assert len(backend.prompts) == 1  # step 2 never generated
        assert report.steps[0].failure is None
        assert report.steps[1].failure is not None
        assert report.steps[1].failure.startswith(expected)
        assert (report.steps[1].run is None) is (expected == EPISODE_EXHAUSTED)
        assert report.total_input_tokens + report.total_generated_tokens <= limit
        assert not report.passed
    assert EPISODE_EXHAUSTED == "Token budget exceeded: episode token allowance exhausted"


def test_per_step_budget_is_the_smaller_of_turn_and_remaining_episode_allowance() -> None:
    budgets: list[RunBudget] = []

    def spy(
        policy: ContextPolicy,
        session: ContextSession,
        budget: RunBudget,
        cancel: CancelToken | None,
    ) -> RunReport:
        budgets.append(budget)
        return run_turn(policy, session, budget, cancel)

    episode = fixture_episode(Scenario.RETENTION)
    runner = EpisodeRunner(ByteCounter(), DeterministicNotebookBackend(), turn=spy)
    report = runner.run(episode, EDITABLE, BUDGET, episode_tokens=125_000)
    used = 0
    for budget, step in zip(budgets, report.steps, strict=True):
        assert budget.total_tokens == min(BUDGET.total_tokens, 125_000 - used)
        assert budget.model_copy(update={"total_tokens": 0}) == BUDGET.model_copy(
            update={"total_tokens": 0}
        )
        used += step.input_tokens + step.generated_tokens
    assert budgets[-1].total_tokens < BUDGET.total_tokens


def test_revision_arithmetic_for_edits_and_keeps() -> None:
    runner = EpisodeRunner(ByteCounter(), DeterministicNotebookBackend())
    noisy = runner.run(fixture_episode(Scenario.RETENTION), EDITABLE, BUDGET)
    assert [s.run.revised.revision for s in noisy.steps if s.run] == [2, 5, 8, 11]
    assert noisy.revised.revision == 12
    quiet = runner.run(fixture_episode(Scenario.RETENTION, noise_lines=0), EDITABLE, BUDGET)
    assert [s.run.revised.revision for s in quiet.steps if s.run] == [1, 3, 5, 7]
    assert all(
        s.run.keep_call_count == 1 and s.run.edit_call_count == 0 for s in quiet.steps if s.run
    )


# -- bounds, cancellation, defaults -----------------------------------------------------------


def _with_steps(episode: Episode, steps: tuple[object, ...]) -> Episode:
    return Episode.model_construct(**{**dict(episode), "steps": steps})


def test_runner_rejects_bad_bounds_before_calling_the_backend() -> None:
    episode = fixture_episode(Scenario.RETENTION)
    first = episode.steps[0]
    bad_episodes = [
        _with_steps(episode, ()),
        _with_steps(episode, tuple(first.model_copy(update={"id": f"s{i}"}) for i in range(33))),
        _with_steps(episode, (first, first)),
        _with_steps(episode, (first.model_copy(update={"id": ""}),)),
    ]
    backend = ScriptedBackend([])
    runner = EpisodeRunner(ByteCounter(), backend)
    for bad in bad_episodes:
        with pytest.raises(InvalidEpisode, match="invalid diagnostic episode bounds"):
            runner.run(bad, APPEND_ONLY, BUDGET)
    for limit in (0, -1, 10_000_001):
        with pytest.raises(InvalidEpisode):
            runner.run(episode, APPEND_ONLY, BUDGET, episode_tokens=limit)
    assert backend.prompts == []


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_cancellation_in_the_final_callback_propagates(policy: Policy) -> None:
    token = CancelToken()
    calls: list[StepReport] = []

    def on_step(report: StepReport) -> None:
        calls.append(report)
        token.cancel()  # returns normally

    episode = fixture_episode(Scenario.RETENTION)
    one = episode.model_copy(update={"steps": episode.steps[:1]})
    with pytest.raises(Cancelled):
        EpisodeRunner(ByteCounter(), DeterministicNotebookBackend()).run(
            one, policy, BUDGET, on_step=on_step, cancel=token
        )
    assert len(calls) == 1


def test_cancellation_before_a_step_runs_nothing() -> None:
    token = CancelToken()
    token.cancel()
    backend = DeterministicNotebookBackend()
    with pytest.raises(Cancelled):
        EpisodeRunner(ByteCounter(), backend).run(
            fixture_episode(Scenario.RETENTION), EDITABLE, BUDGET, cancel=token
        )
    assert backend.calls == 0


def test_report_passed_and_totals() -> None:
    episode = fixture_episode(Scenario.RETENTION)
    report = EpisodeRunner(ByteCounter(), DeterministicNotebookBackend()).run(
        episode, EDITABLE, BUDGET
    )
    assert report.passed and report.planned_steps == 4
    assert report.total_input_tokens == sum(s.run.total_input_tokens for s in report.steps if s.run)
    assert report.total_generated_tokens == sum(
        s.run.total_generated_tokens for s in report.steps if s.run
    )
    truncated = report.model_copy(update={"steps": report.steps[:3]})
    assert not truncated.passed  # an unreached step is a failure
    assert json.loads(report.model_dump_json())["policy"]["name"] == "editable"


def test_sequential_defaults() -> None:
    budget = sequential_budget()
    assert (
        budget.context_window,
        budget.total_tokens,
        budget.edit_output_tokens,
        budget.completion_output_tokens,
        budget.max_edit_attempts,
    ) == (4_096, 24_000, 1_024, 512, 4)
    assert DEFAULT_EPISODE_TOKENS == 80_000


def test_environment_prompt_is_measurable_without_dispatch() -> None:
    episode = fixture_episode(Scenario.RETENTION)
    prompt = ByteCounter().prepare(
        ModelInput(context=episode.environment(), phase=Phase.COMPLETION)
    )
    assert prompt.token_count > sum(len(r.body) for r in episode.incoming_records)
