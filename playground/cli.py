"""Command line of ``picocontext``.

Until the window lands this runs a headless demo turn with the deterministic scripted backend,
so the main command always exercises the real session loop end to end.
"""

from __future__ import annotations

import argparse

from picocontext import (
    ContextSession,
    Delete,
    ModelResponse,
    Record,
    Replace,
    Role,
    RunBudget,
    RunMode,
    Scope,
    Snapshot,
    ToolCall,
    edit_payload,
)
from picocontext.models import ByteCounter, ScriptedBackend, scripted_call

_NOISE = "\n".join(
    f"Shelf sweep {n}: carton sealed; barcode reread; nothing new." for n in range(20)
)


def demo_history() -> Snapshot:
    scope = Scope(user_id="demo", conversation_id="order-lookup", branch_id="main")
    return Snapshot(
        scope=scope,
        records=(
            Record(id="instructions", role=Role.SYSTEM, body="Use the newest stock data only."),
            Record(
                id="task",
                role=Role.USER,
                protected=True,
                body="Report SKU, price and stock for the Corvid kettle.",
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
                body="OUTDATED: price EUR 61.00, stock 2.\n" + _NOISE,
            ),
            Record(
                id="new-call",
                role=Role.ASSISTANT,
                body="Looking up today's stock.",
                tool_calls=(ToolCall(id="s-new", name="stock", arguments='{"day":"today"}'),),
            ),
            Record(
                id="new-result",
                role=Role.TOOL,
                tool_call_id="s-new",
                body="TODAY: Corvid kettle SKU CK-88, price EUR 54.90, stock 9.\n" + _NOISE,
            ),
        ),
    )


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="picocontext", description="picocontext demo turn (scripted backend)"
    )
    parser.add_argument("--append-only", action="store_true", help="skip the edit decision")
    args = parser.parse_args(argv)
    history = demo_history()
    edit = edit_payload(
        0,
        [
            Delete(record_id="old-call"),
            Delete(record_id="old-result"),
            Replace(record_id="new-result", body="TODAY: CK-88, EUR 54.90, stock 9."),
        ],
    )
    backend = ScriptedBackend(
        ([] if args.append_only else [scripted_call("edit_context", edit)]) + [_answer()]
    )
    session = ContextSession(history, ByteCounter(), backend)
    mode = RunMode.APPEND_ONLY if args.append_only else RunMode.EDITABLE
    report = session.run(mode, RunBudget(context_window=32_000, total_tokens=120_000))
    print(f"mode: {report.mode.value}")
    print(
        f"prompt bytes before -> after: {report.run_start_prompt_tokens} -> "
        f"{report.final_prompt.token_count if report.final_prompt else 'n/a'}"
    )
    print(f"total input bytes: {report.total_input_tokens}")
    print(f"answer: {report.answer}")
    print(f"failure: {report.failure or 'none'}")
    if report.diff:
        print("diff:\n" + report.diff)
    return 0 if report.failure is None else 1


def _answer() -> ModelResponse:
    return ModelResponse(text="SKU CK-88, EUR 54.90, 9 in stock.", generated_tokens=12)
