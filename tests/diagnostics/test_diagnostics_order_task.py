"""The order lookup in diagnostics: its episode, its grading and the deterministic model that
plays it by rule (keep when done, clipping, answers from the prompt only)."""

from __future__ import annotations

import json

from picocontext import (
    EDIT_TOOL,
    KEEP_TOOL,
    ContextSession,
    Delete,
    ModelInput,
    Phase,
    PreparedPrompt,
    Replace,
    RunBudget,
    RunMode,
    Snapshot,
)
from picocontext.models import ByteCounter
from picocontext_diagnostics import (
    APPEND_ONLY,
    EDITABLE,
    ContextCheck,
    DeterministicOrderBackend,
    EpisodeRunner,
    order_lookup,
    order_lookup_episode,
)


def prompt_for(phase: Phase, context: Snapshot | None = None) -> PreparedPrompt:
    order = order_lookup()
    snapshot = order.snapshot if context is None else context
    return ByteCounter().prepare(ModelInput(context=snapshot, phase=phase))


def test_decision_deletes_the_outdated_group_once_and_shortens_current_results() -> None:
    order = order_lookup()
    backend = DeterministicOrderBackend(order)
    ops = backend.order_operations(order.snapshot)
    deletes = [op.record_id for op in ops if isinstance(op, Delete)]
    replaces = {op.record_id: op.body for op in ops if isinstance(op, Replace)}
    assert deletes == ["earlier-check", "earlier-result"]
    assert set(replaces) == set(order.fact_record_ids)
    assert all("\n" not in body for body in replaces.values())
    response = backend.generate(prompt_for(Phase.EDIT), 100_000)
    (call,) = response.tool_calls
    assert call.name == EDIT_TOOL
    assert json.loads(call.arguments)["baseRevision"] == 0
    assert response.generated_tokens == len(call.arguments.encode("utf-8"))


def test_after_the_edit_it_keeps_and_answers_correctly() -> None:
    order = order_lookup()
    backend = DeterministicOrderBackend(order)
    session = ContextSession(order.snapshot, ByteCounter(), backend)
    report = session.run(RunMode.EDITABLE, RunBudget(context_window=40_000, total_tokens=200_000))
    assert report.failure is None and order.answer_is_correct(report.answer)
    response = backend.generate(prompt_for(Phase.EDIT, report.revised), 100_000)
    assert response.tool_calls[0].name == KEEP_TOOL


def test_answer_says_unknown_for_values_missing_from_the_prompt() -> None:
    order = order_lookup()
    backend = DeterministicOrderBackend(order)
    stripped = order.snapshot.model_copy(
        update={
            "records": tuple(
                r.model_copy(update={"body": "gone"}) if r.id == "warranty-result" else r
                for r in order.snapshot.records
            )
        }
    )
    answer = backend.order_answer(stripped)
    assert "warranty unknown months" in answer
    assert not order.answer_is_correct(answer)
    assert order.answer_is_correct(backend.order_answer(order.snapshot))


def test_output_over_the_allowance_is_clipped_and_flagged() -> None:
    backend = DeterministicOrderBackend(order_lookup())
    decision = backend.generate(prompt_for(Phase.EDIT), 20)
    assert decision.reached_token_limit and not decision.tool_calls
    assert decision.generated_tokens == len(decision.text.encode("utf-8")) <= 20
    answer = backend.generate(prompt_for(Phase.COMPLETION), 10)
    assert answer.reached_token_limit and len(answer.text.encode("utf-8")) <= 10


def test_the_order_lookup_is_a_one_step_episode_graded_by_its_own_check() -> None:
    order = order_lookup()
    episode = order_lookup_episode(order)
    assert episode.check is ContextCheck.ORDER_FACTS and len(episode.steps) == 1
    (step,) = episode.steps
    assert step.records == () and step.answer_record_id is None
    assert episode.initial == order.snapshot
    assert episode.forbidden_terms == order.forbidden_terms
    runner = EpisodeRunner(ByteCounter(), DeterministicOrderBackend(order))
    budget = RunBudget(context_window=40_000, total_tokens=200_000)
    edited = runner.run(episode, EDITABLE, budget, budget.total_tokens)
    assert edited.passed and edited.steps[0].retained_facts == step.expected_facts
    # the answer is not appended: nothing follows a one-turn task
    run = edited.steps[0].run
    assert run is not None and edited.revised == run.revised
    baseline = runner.run(episode, APPEND_ONLY, budget, budget.total_tokens)
    assert baseline.passed and baseline.revised == order.snapshot


def test_a_wrong_or_outdated_order_answer_is_explained() -> None:
    class Stale(DeterministicOrderBackend):
        def order_answer(self, context: Snapshot) -> str:
            return f"SKU {self.order.expected.sku} at USD {self.order.stale.price_usd}"

    order = order_lookup()
    runner = EpisodeRunner(ByteCounter(), Stale(order))
    budget = RunBudget(context_window=40_000, total_tokens=200_000)
    report = runner.run(order_lookup_episode(order), APPEND_ONLY, budget, budget.total_tokens)
    (step,) = report.steps
    assert step.retained_correct and not step.answer_correct
    assert step.answer_problem is not None
    assert f"missing {order.expected.price_usd}" in step.answer_problem
    assert f"mentions outdated {order.stale.price_usd.lower()}" in step.answer_problem
