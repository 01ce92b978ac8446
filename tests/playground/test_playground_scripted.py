"""The deterministic order-lookup stand-in: rules, keep when done, clipping, answers from the
prompt only."""

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
from picocontext_diagnostics import order_lookup
from picocontext_playground.scripted import ScriptedPlaygroundBackend


def prompt_for(phase: Phase, context: Snapshot | None = None) -> PreparedPrompt:
    order = order_lookup()
    snapshot = order.snapshot if context is None else context
    return ByteCounter().prepare(ModelInput(context=snapshot, phase=phase))


def test_decision_deletes_the_outdated_group_once_and_shortens_current_results() -> None:
    order = order_lookup()
    backend = ScriptedPlaygroundBackend(order)
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
    backend = ScriptedPlaygroundBackend(order)
    session = ContextSession(order.snapshot, ByteCounter(), backend)
    report = session.run(RunMode.EDITABLE, RunBudget(context_window=40_000, total_tokens=200_000))
    assert report.failure is None and order.answer_is_correct(report.answer)
    response = backend.generate(prompt_for(Phase.EDIT, report.revised), 100_000)
    assert response.tool_calls[0].name == KEEP_TOOL


def test_answer_says_unknown_for_values_missing_from_the_prompt() -> None:
    order = order_lookup()
    backend = ScriptedPlaygroundBackend(order)
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
    backend = ScriptedPlaygroundBackend(order_lookup())
    decision = backend.generate(prompt_for(Phase.EDIT), 20)
    assert decision.reached_token_limit and not decision.tool_calls
    assert decision.generated_tokens == len(decision.text.encode("utf-8")) <= 20
    answer = backend.generate(prompt_for(Phase.COMPLETION), 10)
    assert answer.reached_token_limit and len(answer.text.encode("utf-8")) <= 10


def test_notebook_prompts_are_delegated() -> None:
    from picocontext_diagnostics import Scenario, fixture_episode

    episode = fixture_episode(Scenario.RETENTION)
    backend = ScriptedPlaygroundBackend(order_lookup())
    snapshot = episode.initial.model_copy(
        update={"records": episode.initial.records + episode.steps[0].records}
    )
    answer = backend.generate(prompt_for(Phase.COMPLETION, snapshot), 10_000)
    assert json.loads(answer.text) == {"facts": episode.steps[0].expected_facts}
