"""Constrained decisions: the grammar admits exactly the valid calls; the real model obeys it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from picocontext import (
    ContextSession,
    ModelInput,
    Phase,
    Record,
    Role,
    RunBudget,
    RunMode,
    decode_edit_payload,
    decode_keep_payload,
)
from picocontext.models.constrained import DecisionGrammar, decision_schema

pytest.importorskip("llguidance")
pytest.importorskip("mlx_lm")

from picocontext.models.mlx_backend import MLXModel

pytestmark = pytest.mark.mlx


@pytest.fixture(scope="module")
def grammar(hf_tokenizer: Any) -> DecisionGrammar:
    return DecisionGrammar(hf_tokenizer, len(hf_tokenizer), hf_tokenizer.eos_token_id)


def accepts(grammar: DecisionGrammar, hf_tokenizer: Any, snapshot: Any, text: str) -> bool:
    matcher = grammar.matcher(snapshot)
    ids = [*hf_tokenizer.encode(text, add_special_tokens=False), hf_tokenizer.eos_token_id]
    return bool(matcher.validate_tokens(ids) == len(ids))


def call(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


def test_schema_lists_current_unprotected_ids_and_revision(lamp: Any) -> None:
    schema = decision_schema(lamp(revision=5))
    edit, keep = schema["anyOf"]
    ops = edit["properties"]["arguments"]["properties"]["operations"]
    replace = ops["items"]["anyOf"][0]
    assert replace["properties"]["recordID"]["enum"] == ["check", "result", "note"]
    assert (ops["minItems"], ops["maxItems"]) == (1, 32)
    assert keep["properties"]["arguments"]["properties"]["baseRevision"]["const"] == 5


def test_grammar_accepts_valid_calls_and_refuses_everything_else(
    grammar: DecisionGrammar, hf_tokenizer: Any, lamp: Any
) -> None:
    snapshot = lamp(revision=2)
    ok_edit = call(
        "edit_context",
        '{"baseRevision": 2, "operations": [{"action": "replace", "recordID": "result", '
        '"body": "SKU LM-204"}, {"action": "delete", "recordID": "note"}]}',
    )
    assert accepts(grammar, hf_tokenizer, snapshot, ok_edit)
    assert accepts(grammar, hf_tokenizer, snapshot, call("keep_context", '{"baseRevision": 2}'))
    refused = [
        call("keep_context", '{"baseRevision": 1}'),  # stale revision
        call("edit_context", '{"baseRevision": 2, "operations": []}'),  # no operations
        call(
            "edit_context",
            '{"baseRevision": 2, "operations": [{"action": "delete", "recordID": "task"}]}',
        ),  # protected id
        call(
            "edit_context",
            '{"baseRevision": 2, "operations": [{"action": "delete", "recordID": "result", '
            '"body": "x"}]}',
        ),  # delete with a body
        call("answer", '{"baseRevision": 2}'),  # unknown tool
        "Sure! " + call("keep_context", '{"baseRevision": 2}'),  # text before the call
        call("keep_context", '{"baseRevision": 2, "scope": "x"}'),  # extra key
    ]
    for text in refused:
        assert not accepts(grammar, hf_tokenizer, snapshot, text), text


def test_no_unprotected_records_leaves_only_keep(
    grammar: DecisionGrammar, hf_tokenizer: Any, lamp: Any
) -> None:
    snapshot = lamp()
    locked = snapshot.model_copy(
        update={
            "records": tuple(r.model_copy(update={"protected": True}) for r in snapshot.records)
        }
    )
    assert "anyOf" not in decision_schema(locked)
    assert accepts(grammar, hf_tokenizer, locked, call("keep_context", '{"baseRevision": 0}'))


@pytest.fixture(scope="module")
def constrained_model(tiny_dir: Path) -> Iterator[MLXModel]:
    model = MLXModel.load(tiny_dir, model_id="tiny-constrained", constrained=True)
    yield model
    model.close()


def noise(seed: int, closers: list[int] | None = None) -> Any:
    """Random logit offsets so the random model explores different paths of the grammar; a
    bonus on closing characters keeps free-text bodies short enough to finish."""
    import mlx.core as mx

    def factory() -> list[Any]:
        key = {"k": mx.random.key(seed)}

        def processor(tokens: Any, logits: Any) -> Any:
            key["k"], sub = mx.random.split(key["k"])
            out = logits + 8.0 * mx.random.normal(logits.shape, key=sub)
            for token in closers or []:
                out[..., token] = out[..., token] + 12.0
            return out

        return [processor]

    return factory


@pytest.mark.parametrize("seed", range(6))
def test_constrained_decisions_are_always_valid_calls(
    constrained_model: MLXModel, lamp: Any, seed: int
) -> None:
    snapshot = lamp(revision=seed)
    tokenizer = constrained_model.tokenizer
    closers = [tokenizer.convert_tokens_to_ids(t) for t in ('"', "]")]
    constrained_model.extra_processors = noise(seed, closers)
    prompt = constrained_model.prepare(ModelInput(context=snapshot, phase=Phase.EDIT))
    assert "decoding: constrained" in prompt.notes
    response = constrained_model.generate(prompt, 1500)
    assert not response.reached_token_limit, response.text
    assert len(response.tool_calls) == 1, response.text
    tool = response.tool_calls[0]
    if tool.name == "edit_context":
        edit = decode_edit_payload(tool.arguments, snapshot.scope)
        assert edit.base_revision == seed
        assert {op.record_id for op in edit.operations} <= set(snapshot.unprotected_ids)
    else:
        assert tool.name == "keep_context"
        decode_keep_payload(tool.arguments, seed)
    constrained_model.extra_processors = None


def test_completion_is_never_constrained(constrained_model: MLXModel, lamp: Any) -> None:
    prompt = constrained_model.prepare(ModelInput(context=lamp(), phase=Phase.COMPLETION))
    response = constrained_model.generate(prompt, 8)
    assert response.tool_calls == () and response.generated_tokens == 8


def test_session_run_with_constraints_commits_or_keeps(
    constrained_model: MLXModel, lamp: Any
) -> None:
    tokenizer = constrained_model.tokenizer
    closers = [tokenizer.convert_tokens_to_ids(t) for t in ('"', "]")]
    constrained_model.extra_processors = noise(11, closers)
    session = ContextSession(lamp(), constrained_model, constrained_model)
    budget = RunBudget(edit_output_tokens=1500, completion_output_tokens=4, max_edit_attempts=1)
    report = session.run(RunMode.EDITABLE, budget)
    constrained_model.extra_processors = None
    assert len(report.attempts) == 1
    # The grammar guarantees a decodable call with current ids and revision; the validator
    # still judges it (a same-body replace would be rejected), but "no call", "clipped" and
    # "stale revision" can no longer happen.
    attempt = report.attempts[0]
    assert attempt.detail != "The model did not call edit_context or keep_context."
    assert "output limit" not in attempt.detail and "Stale revision" not in attempt.detail
    assert report.edit_call_count + report.keep_call_count == 1
    assert session.context.record("task") == Record(
        id="task", role=Role.USER, body="Report the lamp SKU and price.", protected=True
    )
