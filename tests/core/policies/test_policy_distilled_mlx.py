"""The distilled policy on the real MLX path: the tiny random-weight model counts the tokens
of every prompt (its chat template and tokenizer) and writes the summaries through
ChatSummarizer (its replies are forced token by token, so they are deterministic); a scripted
backend plays the answering model so the protocol is exact."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kettle import CORRECT_ANSWER, answer_from, kettle_snapshot
from picocontext import (
    ContextSession,
    ModelResponse,
    ModelToolCall,
    Phase,
    PreparedPrompt,
    Role,
    RunBudget,
)
from picocontext.models import ScriptedBackend
from picocontext.policies import DistilledPolicy
from picocontext.policies.distilled import DistilledConfig
from tinymlx import numbered_replies, tiny_model

pytestmark = pytest.mark.mlx


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from tiny_model(tmp_path_factory, "tiny-distilled")


def test_real_tokens_real_summaries_and_verbatim_recall(tiny: Any, tmp_path: Path) -> None:
    window = 5_000
    budget = RunBudget(
        context_window=window,
        total_tokens=50_000,
        edit_output_tokens=200,
        completion_output_tokens=200,
    )
    query = {"query": "Corvid kettle SKU price stock", "altitude": "entity", "budget": 400}

    def respond(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        if prompt.input.phase is Phase.TOOLS and not any(
            r.role is Role.TOOL for r in prompt.input.control_records
        ):
            return ModelResponse(
                tool_calls=(ModelToolCall(name="recall", arguments=json.dumps(query)),),
                generated_tokens=20,
            )
        return answer_from(prompt, 9)

    backend = ScriptedBackend(respond)
    session = ContextSession(kettle_snapshot(), tiny, backend)
    settings = DistilledConfig(tail_share=0.1, map_share=0.15, leaf_words=60)
    policy = DistilledPolicy.over_chat_model(tiny, corpus_dir=tmp_path, config=settings)
    tiny.extra_processors = numbered_replies(tiny, "kettle summary")
    try:
        report = policy.turn(session, budget)
    finally:
        tiny.extra_processors = None
    assert report.failure is None, report.failure
    (turn,) = policy.turns(session.scope)
    assert turn.summarizer_calls == turn.leaf_summaries + turn.digest_summaries > 0
    summaries = policy.distiller(session.scope).snapshot().summaries
    assert all(text.startswith("kettle summary ") for text in summaries.values())
    # budgets were kept in the model's own tokens
    for prompt, cap in zip(backend.prompts, backend.max_tokens, strict=True):
        assert prompt.token_count == len(prompt.token_ids) <= window - cap
    assert turn.view_tokens < window * 0.6
    (step,) = report.tool_steps
    assert step.ok and "TODAY: Corvid kettle SKU CK-88, price EUR 54.90, stock 9." in step.result
    # the warranty sits in another leaf that did not fit the reduced budget, so the answer
    # from what the prompt shows is the honest "could not find" unless that leaf came along
    assert report.answer in (CORRECT_ANSWER, "I could not find the current data.")
    policy.close()


def test_a_real_model_sees_the_digest_tools_and_the_guidance(tiny: Any, tmp_path: Path) -> None:
    from picocontext.policies.distilled import GUIDANCE

    backend = ScriptedBackend([ModelResponse(text="done", generated_tokens=1)])
    session = ContextSession(kettle_snapshot(), tiny, backend)
    budget = RunBudget(context_window=8_000, total_tokens=50_000)
    with DistilledPolicy.over_chat_model(tiny, corpus_dir=tmp_path) as policy:
        tiny.extra_processors = numbered_replies(tiny, "kettle summary")
        try:
            policy.turn(session, budget)
        finally:
            tiny.extra_processors = None
    rendered = backend.prompts[0].rendered
    assert '"recall"' in rendered and '"digest"' in rendered
    assert GUIDANCE in rendered
