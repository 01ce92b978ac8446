"""Sliding window, compaction and retrieval: protocol tests on plain histories, tool groups and
the notebook tasks (deterministic backend, byte counter)."""

from __future__ import annotations

import pytest

from picocontext import (
    ContextSession,
    Record,
    Role,
    RunBudget,
    Scope,
    Snapshot,
    ToolCall,
    validate_snapshot,
)
from picocontext.models import ByteCounter
from picocontext.policies import (
    CompactionPolicy,
    ContextPolicy,
    RetrievalPolicy,
    SlidingWindowPolicy,
)
from picocontext.policies.compaction import SUMMARY_MARK, CompactionSettings
from picocontext.policies.history import history_units
from picocontext.policies.lexical import stem
from picocontext_diagnostics.conversations.extractive_backend import (
    DeterministicConversationBackend,
)
from picocontext_diagnostics.episodes.episode import generated_episode
from picocontext_diagnostics.episodes.episode_runner import EpisodeRunner
from picocontext_diagnostics.episodes.fixtures import Scenario
from picocontext_diagnostics.policies import BUILTIN_POLICIES

SCOPE = Scope(user_id="u", conversation_id="c", branch_id="b")
FILLER = "We talked about the weather and the trains for a while. " * 3


def history(turns: int = 30, tools_every: int = 5) -> Snapshot:
    records = [
        Record(id="sys", role=Role.SYSTEM, body="Answer from the history."),
        Record(id="task", role=Role.USER, body="Chat with me.", protected=True),
    ]
    for i in range(turns):
        if i % tools_every == tools_every - 1:
            records.append(
                Record(
                    id=f"call{i}",
                    role=Role.ASSISTANT,
                    tool_calls=(ToolCall(id=f"link{i}", name="lookup"),),
                )
            )
            records.append(
                Record(
                    id=f"result{i}",
                    role=Role.TOOL,
                    body=f"lookup {i}: {FILLER}",
                    tool_call_id=f"link{i}",
                )
            )
        else:
            role = Role.USER if i % 2 == 0 else Role.ASSISTANT
            records.append(Record(id=f"t{i}", role=role, body=f"turn {i}. {FILLER}"))
    records[4] = Record(id="t2", role=Role.USER, body="My locker code is 4471 since May.")
    records.append(
        Record(id="question", role=Role.USER, body="What is my locker code?", protected=True)
    )
    return Snapshot(scope=SCOPE, records=tuple(records))


def session(snapshot: Snapshot | None = None) -> ContextSession:
    return ContextSession(snapshot or history(), ByteCounter(), DeterministicConversationBackend())


BUDGET = RunBudget(context_window=3_000, completion_output_tokens=200, edit_output_tokens=200)


def whole_units(view: Snapshot, full: Snapshot) -> bool:
    shown = set(view.ids)
    return all(
        all(r.id in shown for r in unit) or not any(r.id in shown for r in unit)
        for unit in history_units(full.records)
    )


@pytest.mark.parametrize("policy", [SlidingWindowPolicy(), RetrievalPolicy()])
def test_view_policies_fit_the_window_keep_units_and_never_edit(policy: ContextPolicy) -> None:
    s = session()
    full = s.context
    report = policy.turn(s, BUDGET)
    assert report.failure is None, report.failure
    assert report.final_prompt is not None
    assert report.final_prompt.token_count <= BUDGET.context_window - 200
    view = report.final_prompt.input.context
    validate_snapshot(view)
    assert whole_units(view, full)
    assert {"sys", "task", "question"} <= set(view.ids)
    assert len(view.records) < len(full.records)
    assert s.context == full and report.revised == full
    assert report.policy == policy.name


def test_sliding_window_drops_the_oldest_first() -> None:
    s = session()
    policy = SlidingWindowPolicy()
    policy.turn(s, BUDGET)
    assert policy.last_cut is not None
    dropped = policy.last_cut.dropped_ids
    assert "t0" in dropped and "t28" not in dropped
    kept = [i for i in s.context.ids if i not in dropped and i.startswith("t") and i != "task"]
    assert all(s.context.ids.index(d) < s.context.ids.index(kept[0]) for d in dropped)


def test_retrieval_pulls_the_matching_old_turn_that_the_window_drops() -> None:
    window = SlidingWindowPolicy().turn(session(), BUDGET)
    retrieval = RetrievalPolicy()
    report = retrieval.turn(session(), BUDGET)
    assert window.final_prompt is not None and report.final_prompt is not None
    assert "4471" not in window.final_prompt.rendered
    assert "4471" in report.final_prompt.rendered
    assert retrieval.last is not None and "t2" in retrieval.last.retrieved_ids
    assert "4471" in report.answer


def test_stemmer_matches_simple_inflections() -> None:
    assert stem("moved") == stem("moves") == "mov"
    assert stem("cities") == "city"
    assert stem("bus") == "bus"


def test_compaction_folds_the_oldest_into_one_model_written_record() -> None:
    s = session()
    full = s.context
    policy = CompactionPolicy(CompactionSettings(trigger=0.5, keep_tail=0.2))
    report = policy.turn(s, BUDGET)
    assert report.failure is None, report.failure
    assert policy.history, "the history was over the threshold"
    first = policy.history[0]
    summary = s.context.record(first.summary_id)
    assert summary is not None and summary.body.startswith(SUMMARY_MARK)
    assert all(s.context.record(i) is None for i in first.folded_ids if i != first.summary_id)
    assert s.original_context.records == full.records  # the transcript keeps the originals
    validate_snapshot(s.context)
    assert report.calls[0] == first.prompt  # the summary call is charged and listed first
    charged = sum(c.token_count for c in report.calls)
    assert report.total_input_tokens == charged
    assert report.attempts[0].model_text == first.response.text
    assert report.final_prompt is not None
    assert report.final_prompt.token_count <= BUDGET.context_window - 200


def test_compaction_under_the_threshold_does_nothing() -> None:
    short = Snapshot(scope=SCOPE, records=history().records[:4] + history().records[-1:])
    s = session(short)
    policy = CompactionPolicy()
    report = policy.turn(s, BUDGET)
    assert policy.history == [] and report.failure is None
    assert s.context == short and len(report.calls) == 1


def test_compaction_reports_an_empty_summary_as_a_failure() -> None:
    class Silent(DeterministicConversationBackend):
        def summary(self, prompt: object, max_bytes: int) -> str:
            return ""

    s = ContextSession(history(), ByteCounter(), Silent())
    report = CompactionPolicy(CompactionSettings(trigger=0.5)).turn(s, BUDGET)
    assert report.failure is not None and "no summary text" in report.failure


@pytest.mark.parametrize("name", ["sliding-window", "compaction", "retrieval"])
def test_each_runs_the_notebook_task_inside_the_window(name: str) -> None:
    episode = generated_episode(Scenario.STATE_UPDATES, 17, step_count=8, noise_lines=24)
    budget = RunBudget(context_window=16_384, completion_output_tokens=1_024)
    runner = EpisodeRunner(ByteCounter(), DeterministicConversationBackend())
    report = runner.run(episode, BUILTIN_POLICIES[name], budget, episode_tokens=2_000_000)
    assert len(report.steps) == 8
    for step in report.steps:
        assert step.run is not None and step.run.policy == name
        for call in step.run.calls:
            assert call.token_count <= budget.context_window
    if name == "compaction":
        # The deterministic summary keeps the folded notebook, so nothing is lost.
        assert report.passed, report.failure


def test_run_view_validates_the_view_and_checks_the_budget_before_sending() -> None:
    s = session()
    orphan = Snapshot(scope=SCOPE, records=tuple(r for r in s.context.records if r.id != "call4"))
    report = s.run_view(lambda _state: orphan, BUDGET, "bad-view")
    assert report.failure is not None and "orphaned" in report.failure
    assert report.calls == () and report.final_prompt is None
    tiny = BUDGET.model_copy(update={"context_window": 300})
    report = s.run_view(lambda state: state.snapshot, tiny, "too-big")
    assert report.failure is not None and "context window" in report.failure
    assert report.calls == () and report.final_prompt is None
    assert report.policy == "too-big"
