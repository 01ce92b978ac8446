"""Shared helpers for core tests: a kettle-order history and a backend that answers correctly
only when the facts it needs are still in the prompt it was given."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from picocontext import (
    Delete,
    ModelResponse,
    Phase,
    PreparedPrompt,
    Record,
    Replace,
    Role,
    RunBudget,
    Scope,
    Snapshot,
    ToolCall,
    edit_payload,
)
from picocontext.models import ScriptedBackend, scripted_call

SCOPE = Scope(user_id="u-1", conversation_id="kettle-order", branch_id="main")
NOISE = "\n".join(f"Sweep {n}: carton sealed; label reread; nothing changed." for n in range(24))
TEST_BUDGET = RunBudget(context_window=32_000, total_tokens=120_000)
CORRECT_ANSWER = "SKU CK-88, EUR 54.90, warranty 18 months, 9 in stock."
WRONG_ANSWER = "I could not find the current data."


def kettle_records() -> tuple[Record, ...]:
    return (
        Record(id="instructions", role=Role.SYSTEM, body="Use the newest stock data only."),
        Record(
            id="task",
            role=Role.USER,
            protected=True,
            body="Report SKU, price in EUR, warranty months and stock for the Corvid kettle.",
        ),
        Record(
            id="old-call",
            role=Role.ASSISTANT,
            body="Looking up yesterday's stock.",
            tool_calls=(ToolCall(id="s-old", name="stock", arguments='{"day":"yesterday"}'),),
        ),
        Record(
            id="old-result",
            role=Role.TOOL,
            tool_call_id="s-old",
            body="OUTDATED: price EUR 61.00, stock 2.\n" + NOISE,
        ),
        Record(
            id="new-call",
            role=Role.ASSISTANT,
            body="Looking up today's stock and the warranty.",
            tool_calls=(
                ToolCall(id="s-new", name="stock", arguments='{"day":"today"}'),
                ToolCall(id="w-new", name="warranty", arguments='{"item":"kettle"}'),
            ),
        ),
        Record(
            id="new-result",
            role=Role.TOOL,
            tool_call_id="s-new",
            body="TODAY: Corvid kettle SKU CK-88, price EUR 54.90, stock 9.\n" + NOISE,
        ),
        Record(
            id="warranty-result",
            role=Role.TOOL,
            tool_call_id="w-new",
            body="Corvid kettle warranty: 18 months, heating plate included.\n" + NOISE,
        ),
    )


def kettle_snapshot(scope: Scope = SCOPE) -> Snapshot:
    return Snapshot(scope=scope, records=kettle_records())


GOOD_EDIT_OPS = (
    Delete(record_id="old-call"),
    Delete(record_id="old-result"),
    Replace(record_id="new-result", body="TODAY: SKU CK-88; EUR 54.90; stock 9."),
    Replace(record_id="warranty-result", body="Warranty: 18 months."),
)


def good_edit(revision: int = 0) -> ModelResponse:
    return scripted_call("edit_context", edit_payload(revision, GOOD_EDIT_OPS), 20)


def answer_from(prompt: PreparedPrompt, generated: int = 32) -> ModelResponse:
    """Answer correctly only if the live facts are still visible in this prompt."""
    text = prompt.rendered
    ok = all(f in text for f in ("CK-88", "54.90", "18 months", "stock 9"))
    return ModelResponse(text=CORRECT_ANSWER if ok else WRONG_ANSWER, generated_tokens=generated)


def phased(
    decisions: Sequence[ModelResponse | Exception],
    completion: Callable[[PreparedPrompt], ModelResponse] = answer_from,
) -> ScriptedBackend:
    """Decision prompts get the scripted decisions in order; completion prompts are answered."""
    queue = list(decisions)

    def respond(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        if prompt.input.phase is Phase.COMPLETION:
            return completion(prompt)
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    return ScriptedBackend(respond)
