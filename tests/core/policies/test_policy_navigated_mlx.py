"""The navigated policy on the real MLX path: a tiny random-weight model's tokenizer and chat
template render every prompt and count every budget (milliseconds; needs the mlx extra)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from picocontext import (
    ContextSession,
    ModelResponse,
    ModelToolCall,
    Phase,
    PreparedPrompt,
    Record,
    Role,
    RunBudget,
    Scope,
    Snapshot,
    ToolCall,
)
from picocontext.models import ScriptedBackend
from picocontext.policies import AppendOnlyPolicy, NavigatedPolicy
from picocontext.policies.navigated import NavigatedConfig, NavigatedTurn
from picocontext.report import RunReport


def turn_with_info(
    policy: NavigatedPolicy, session: ContextSession, budget: RunBudget
) -> tuple[RunReport, NavigatedTurn | None]:
    """The report and the turn record this turn added (None when it added none)."""
    before = len(policy.turns(session.scope))
    report = policy.turn(session, budget)
    turns = policy.turns(session.scope)
    return report, (turns[-1] if len(turns) > before else None)


pytestmark = pytest.mark.mlx

SCOPE = Scope(user_id="u", conversation_id="mlx-nav", branch_id="main")
BUDGET = RunBudget(
    context_window=8192, total_tokens=120_000, edit_output_tokens=64, completion_output_tokens=64
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("mlx_lm")
    from picocontext.models.mlx_backend import MLXModel
    from picocontext.models.tiny import write_tiny_model

    path: Path = write_tiny_model(tmp_path_factory.mktemp("tiny-nav"))
    model = MLXModel.load(path, model_id="tiny-nav")
    yield model
    model.close()


def history(turns: int = 12) -> Snapshot:
    records = [
        Record(id="rules", role=Role.SYSTEM, body="Answer from the records."),
        Record(id="task", role=Role.USER, protected=True, body="Audit the depot log."),
    ]
    for t in range(1, turns + 1):
        lines = "\n".join(f"crate {t}.{i}: sealed, weight {t * 7 + i} kg" for i in range(8))
        records += [
            Record(id=f"ask-{t}", role=Role.USER, body=f"Read depot page {t}."),
            Record(
                id=f"read-{t}",
                role=Role.ASSISTANT,
                tool_calls=(ToolCall(id=f"c{t}", name="depot", arguments=json.dumps({"p": t})),),
            ),
            Record(
                id=f"page-{t}",
                role=Role.TOOL,
                tool_call_id=f"c{t}",
                body=f"Depot page {t} holds bay {t * 3}.\n{lines}",
            ),
        ]
    records.append(Record(id="q", role=Role.USER, body="Which bay does depot page 1 hold?"))
    return Snapshot(scope=SCOPE, records=tuple(records))


def test_real_tokenizer_counts_and_template_renders_the_navigation(tiny: Any) -> None:
    def respond(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        opened = [c for r in prompt.input.control_records for c in r.tool_calls]
        if prompt.input.phase is Phase.COMPLETION or len(opened) >= 3:
            found = "bay 3" in prompt.rendered
            return ModelResponse(text="bay 3" if found else "unknown", generated_tokens=3)
        # the archive index stands in the history; the tool receipts follow the question
        index = [r for r in prompt.input.context.records if r.body.startswith("ARCHIVE INDEX")]
        lines = [
            line.split(" ", 1)[0]
            for r in (*index, *prompt.input.control_records)
            for line in r.body.split("\n")
            if " [" in line
        ]
        done = {json.loads(c.arguments)["id"] for c in opened}
        target = next(i for i in [*lines, "page-1"] if i not in done and i != "r")
        if "page-1" in lines and "page-1" not in done:
            target = "page-1"
        return ModelResponse(
            tool_calls=(ModelToolCall(name="open", arguments=json.dumps({"id": target})),),
            generated_tokens=12,
        )

    backend = ScriptedBackend(respond)
    session = ContextSession(history(), tiny, backend)
    policy = NavigatedPolicy(NavigatedConfig(max_steps=6))
    report, info = turn_with_info(policy, session, BUDGET)
    assert info is not None and info.counter == "tokenizer:tiny-nav"
    assert info.archived_ids and info.manifest is not None
    assert info.manifest.source.tokenizer == "tokenizer:tiny-nav"
    assert report.failure is None, report.failure
    assert all(p.token_count <= BUDGET.context_window - 64 for p in backend.prompts)
    # the prompts went through the model's own template, receipts included
    assert all("<|im_start|>" in p.rendered for p in backend.prompts)
    assert "ARCHIVE INDEX" in backend.prompts[0].rendered
    assert session.context == history()


def test_real_generation_runs_end_to_end(tiny: Any) -> None:
    """Random weights produce nonsense; the point is that the real backend, template and
    counter go through a whole navigated turn without breaking the session."""
    small = BUDGET.model_copy(update={"context_window": 6144})
    session = ContextSession(history(turns=6), tiny, tiny)
    report, info = turn_with_info(NavigatedPolicy(NavigatedConfig(max_steps=1)), session, small)
    assert info is not None and info.archived_ids
    assert report.calls and report.total_input_tokens > 0
    assert all(p.token_count <= small.context_window for p in report.calls)
    assert session.context == history(turns=6)


def test_when_everything_fits_the_prompt_is_append_only_s_word_for_word(tiny: Any) -> None:
    # Nothing to navigate: the column may differ from the baseline only where navigation acts,
    # so the real template renders the same tokens for both.
    def answer(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        return ModelResponse(text="bay 3", generated_tokens=3)

    ours, baseline = ScriptedBackend(answer), ScriptedBackend(answer)
    report = NavigatedPolicy().turn(ContextSession(history(2), tiny, ours), BUDGET)
    AppendOnlyPolicy().turn(ContextSession(history(2), tiny, baseline), BUDGET)
    assert report.failure is None and not report.tool_steps
    assert len(ours.prompts) == len(baseline.prompts) == 1
    assert ours.prompts[0].token_ids == baseline.prompts[0].token_ids
