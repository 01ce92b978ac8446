"""One prefix per step, at token level with a real tokenizer and template (the tiny model's):
every call of an editable step renders the same system text, tools and history first, so a
keep costs only the trailing tokens and an edit re-prefills from its first changed record;
greedy outputs are identical with prefix reuse on and off (tiny MLX model)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from picocontext import (
    ContextSession,
    EditStyle,
    ModelInput,
    ModelResponse,
    ModelToolCall,
    Phase,
    PreparedPrompt,
    Record,
    Role,
    RunBudget,
    RunMode,
    RunReport,
    Scope,
    Snapshot,
)
from picocontext.models import ScriptedBackend
from picocontext.models.chatformat import ChatFormat, HFChatTokenizer

SCOPE = Scope(user_id="u", conversation_id="c", branch_id="b")
BUDGET = RunBudget(context_window=8_000, total_tokens=60_000, completion_output_tokens=64)


def common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def history() -> Snapshot:
    records = (
        Record(id="rules", role=Role.SYSTEM, body="Use the newest values."),
        Record(id="task", role=Role.USER, protected=True, body="Report the lamp price."),
        Record(id="n1", role=Role.USER, body="Lamp price 30 EUR."),
        Record(id="n2", role=Role.USER, body="Desk price 80 EUR."),
        Record(id="n3", role=Role.USER, body="Lamp price is now 35 EUR."),
    )
    return Snapshot(scope=SCOPE, records=records)


@pytest.fixture(scope="module")
def fmt(hf_tokenizer: Any) -> ChatFormat:
    return ChatFormat(HFChatTokenizer(hf_tokenizer))


def history_end(fmt: ChatFormat, snapshot: Snapshot, style: EditStyle, phase: Phase) -> int:
    """Where the history ends in token ids: an input whose trailing message is a user turn
    and one whose next message is an assistant record agree up to here (the role of the
    first trailing message)."""
    a = fmt.prepare(ModelInput(context=snapshot, phase=phase, edit_style=style, guidance="x y"))
    after = Record(id="zz-trailing", role=Role.ASSISTANT, body="x y", protected=True)
    b = fmt.prepare(
        ModelInput(
            context=snapshot,
            phase=phase,
            edit_style=style,
            guidance="x y",
            control_records=(after,),
        )
    )
    end = common(a.token_ids, b.token_ids)
    assert snapshot.records[-1].body in fmt.tokenizer.decode(a.token_ids[:end])
    return end


def choosing(reply: str) -> ScriptedBackend:
    def respond(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        if prompt.input.phase is Phase.COMPLETION:
            return ModelResponse(text="35 EUR.", generated_tokens=4)
        if prompt.input.phase is Phase.EDIT:
            call = ModelToolCall(name="keep_context", arguments='{"baseRevision": 0}')
            return ModelResponse(tool_calls=(call,), generated_tokens=9)
        return ModelResponse(text=reply, generated_tokens=3)

    return ScriptedBackend(respond)


def test_incremental_keep_every_call_shares_the_whole_history_prefix(fmt: ChatFormat) -> None:
    report = ContextSession(history(), fmt, choosing('"none"')).run(
        RunMode.EDITABLE, BUDGET, EditStyle.INCREMENTAL
    )
    assert report.failure is None, report.failure
    assert [c.input.phase for c in report.calls] == [Phase.CHOICE, Phase.CHOICE, Phase.COMPLETION]
    end = history_end(fmt, history(), EditStyle.INCREMENTAL, Phase.CHOICE)
    first = report.calls[0].token_ids
    for call in report.calls:
        assert call.token_ids[:end] == first[:end]
    # The answer after a keep differs from the questions only in its trailing guidance, and
    # is the append-only answer prompt token for token (no receipt: nothing changed).
    answer = report.calls[-1]
    trailing = fmt.tokenizer.decode(answer.token_ids[end:])
    assert "[recordID=n" not in trailing and "Kept revision" not in trailing
    plain = fmt.prepare(ModelInput(context=history(), phase=Phase.COMPLETION))
    assert answer.token_ids == plain.token_ids


def test_incremental_edit_reprefills_from_the_first_deleted_record(fmt: ChatFormat) -> None:
    session = ContextSession(history(), fmt, choosing('"n1"'))
    report = session.run(RunMode.EDITABLE, BUDGET, EditStyle.INCREMENTAL)
    assert report.failure is None and session.context.ids == ["rules", "task", "n2", "n3"]
    question, *_, answer = report.calls
    shared = common(question.token_ids, answer.token_ids)
    before = fmt.tokenizer.decode(question.token_ids[:shared])
    assert "Report the lamp price." in before and "Lamp price 30 EUR." not in before
    # Nothing before the first deleted record is prefilled again.
    task_end = fmt.tokenizer.decode(question.token_ids).index("Report the lamp price.")
    assert len(before) > task_end


def test_tool_call_style_decision_and_answer_share_the_history_prefix(fmt: ChatFormat) -> None:
    report: RunReport = ContextSession(history(), fmt, choosing("")).run(
        RunMode.EDITABLE, BUDGET, EditStyle.TARGETED
    )
    assert report.failure is None, report.failure
    decision, answer = report.calls
    assert decision.input.phase is Phase.EDIT and answer.input.phase is Phase.COMPLETION
    # Same tools before the history in both (the answer call refuses calls at runtime).
    assert decision.input.tools == answer.input.tools and decision.input.tools
    assert decision.input.tool_call_step and answer.input.tool_call_step
    assert "<tools>" in answer.rendered or "keep_context" in answer.rendered
    shared = common(decision.token_ids, answer.token_ids)
    assert "Lamp price is now 35 EUR." in fmt.tokenizer.decode(decision.token_ids[:shared])
    # The revision is not in the system text: it trails after the history.
    assert "baseRevision 0" not in fmt.tokenizer.decode(decision.token_ids[:shared])


# -- greedy identity on the tiny MLX model ----------------------------------------------------
@pytest.fixture()
def models(tiny_dir: Path) -> Iterator[tuple[Any, Any]]:
    pytest.importorskip("mlx_lm")
    from picocontext.models.mlx_backend import MLXModel

    cached = MLXModel.load(tiny_dir, model_id="tiny-cached", prefix_cache=True)
    cold = MLXModel.load(tiny_dir, model_id="tiny-cold", prefix_cache=False)
    for model in (cached, cold):
        model.constrained = True
    yield cached, cold
    cached.close()
    cold.close()


def episode(model: Any) -> list[RunReport]:
    session = ContextSession(history(), model, model)
    reports = [session.run(RunMode.EDITABLE, BUDGET, EditStyle.INCREMENTAL)]
    for i, body in enumerate(["Chair price 12 EUR.", "Lamp price is 33 EUR today."], start=4):
        session.append_records([Record(id=f"n{i}", role=Role.USER, body=body)])
        reports.append(session.run(RunMode.EDITABLE, BUDGET, EditStyle.INCREMENTAL))
    return reports


@pytest.mark.mlx
def test_greedy_outputs_are_identical_with_prefix_reuse_on_and_off(
    models: tuple[Any, Any],
) -> None:
    cached, cold = models
    warm_reports, cold_reports = episode(cached), episode(cold)
    for warm, fresh in zip(warm_reports, cold_reports, strict=True):
        assert [c.reply for c in warm.choices] == [c.reply for c in fresh.choices]
        assert all(c.valid for c in warm.choices)  # constrained: always an offered option
        assert warm.answer == fresh.answer and warm.failure == fresh.failure
        assert warm.revised == fresh.revised
        assert [c.token_ids for c in warm.calls] == [c.token_ids for c in fresh.calls]
        assert list(fresh.call_prefill_tokens) == [c.token_count for c in fresh.calls]
        # Every call after the first of a step over an unchanged history reuses its prefix
        # (after an edit, how much the backend reuses is its cache policy's choice).
        kept = warm.revised == warm.run_start
        calls = list(zip(warm.calls, warm.call_prefill_tokens, strict=True))
        for (previous, _), (call, prefill) in pairwise(calls):
            if kept or call.input.phase is Phase.CHOICE:
                assert prefill <= call.token_count - common(previous.token_ids, call.token_ids)
    warm_total = sum(r.total_prefill_tokens for r in warm_reports)
    cold_total = sum(r.total_prefill_tokens for r in cold_reports)
    assert warm_total < cold_total
    # A choice generates a handful of tokens.
    assert all(c.generated_tokens <= 8 for r in warm_reports for c in r.choices)
