"""The real MLX path on the tiny random-weight model (checklist 57–59, issue items 2–3)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from picocontext import (
    Busy,
    Cancelled,
    CancelToken,
    ChatMessage,
    ChatModel,
    ContextSession,
    InvalidContext,
    ModelBackend,
    ModelInput,
    Outcome,
    Phase,
    PreparedPrompt,
    Record,
    Role,
    RunBudget,
    RunMode,
    Snapshot,
    TokenCounter,
    ToolSpec,
    common_prefix,
)

pytest.importorskip("mlx_lm")

from picocontext.models.mlx_backend import (
    EMPTY_REQUEST,
    MLXModel,
    forced_tokens,
    reusable_prefix,
)

pytestmark = pytest.mark.mlx


def script_ids(model: MLXModel, text: str, eos: bool = True) -> list[int]:
    ids: list[int] = model.tokenizer.encode(text, add_special_tokens=False)
    return ids + ([model.tokenizer.eos_token_id] if eos else [])


def scripted(model: MLXModel, *texts: str) -> Callable[[], list[Any]]:
    """Processor factory forcing one text per generation, in order."""
    queue = [script_ids(model, t) for t in texts]

    def factory() -> list[Any]:
        return [forced_tokens(queue.pop(0))] if queue else []

    return factory


@pytest.fixture()
def model(tiny_model: MLXModel) -> Iterator[MLXModel]:
    tiny_model.extra_processors = None
    tiny_model.prefix_cache = True
    tiny_model.constrained = False
    yield tiny_model
    tiny_model.extra_processors = None
    tiny_model.prefix_cache = True


def prompt_for(
    model: MLXModel, snapshot: Snapshot, phase: Phase = Phase.COMPLETION
) -> PreparedPrompt:
    return model.prepare(ModelInput(context=snapshot, phase=phase))


def test_one_object_is_counter_backend_and_chat_model(model: MLXModel) -> None:
    assert isinstance(model, TokenCounter)
    assert isinstance(model, ModelBackend)
    assert isinstance(model, ChatModel)
    assert model.model_id == "tiny-qwen3"
    assert model.describe()["sampling"] == "greedy"


def test_greedy_generation_is_deterministic_and_counts_tokens(model: MLXModel, lamp: Any) -> None:
    prompt = prompt_for(model, lamp())
    model.prefix_cache = False
    first = model.generate(prompt, 12)
    second = model.generate(prompt, 12)
    assert first.text == second.text
    assert first.generated_tokens == 12 and first.reached_token_limit
    assert first.prefill_tokens == prompt.token_count


def test_eos_stops_without_the_limit_flag(model: MLXModel, lamp: Any) -> None:
    model.extra_processors = scripted(model, "Done.")
    response = model.generate(prompt_for(model, lamp()), 50)
    assert response.text == "Done."
    assert not response.reached_token_limit
    assert response.generated_tokens == len(script_ids(model, "Done."))


def test_limit_hit_exactly_sets_the_flag(model: MLXModel, lamp: Any) -> None:
    model.extra_processors = scripted(
        model,
        "abcdefghijklmnop",
    )
    n = len(script_ids(model, "abcdefghijklmnop", eos=False))
    response = model.generate(prompt_for(model, lamp()), n)
    assert response.reached_token_limit and response.generated_tokens == n
    assert response.text == "abcdefghijklmnop"


@pytest.mark.parametrize("max_tokens", [0, -1])
def test_empty_prompt_or_allowance_is_invalid(model: MLXModel, lamp: Any, max_tokens: int) -> None:
    prompt = prompt_for(model, lamp())
    with pytest.raises(InvalidContext) as err:
        model.generate(prompt, max_tokens)
    assert err.value.reason == EMPTY_REQUEST
    empty = prompt.model_copy(update={"token_ids": ()})
    with pytest.raises(InvalidContext) as err:
        model.generate(empty, 5)
    assert err.value.reason == EMPTY_REQUEST


def test_cancellation_is_checked_per_token_and_leaves_the_model_usable(
    model: MLXModel, lamp: Any
) -> None:
    cancel = CancelToken()
    seen: list[threading.Thread] = []

    def factory() -> list[Any]:
        calls = {"n": 0}

        def processor(tokens: Any, logits: Any) -> Any:
            seen.append(threading.current_thread())
            calls["n"] += 1
            if calls["n"] == 3:
                cancel.cancel()
            return logits

        return [processor]

    model.extra_processors = factory
    prompt = prompt_for(model, lamp())
    with pytest.raises(Cancelled):
        model.generate(prompt, 200, cancel)
    assert 3 <= len(seen) <= 5  # stopped within a token or two of the request, not at 200
    assert set(seen) == {model.worker.thread}  # every MLX step ran on the one worker thread
    model.extra_processors = None
    after = model.generate(prompt, 3)
    assert after.prefill_tokens == prompt.token_count  # a cancelled cache is never reused
    with pytest.raises(Cancelled):
        model.generate(prompt, 3, cancel)  # already-cancelled token: refused before any work


def test_concurrent_use_is_busy(model: MLXModel, lamp: Any) -> None:
    started, release = threading.Event(), threading.Event()

    def factory() -> list[Any]:
        def processor(tokens: Any, logits: Any) -> Any:
            started.set()
            release.wait(10)
            return logits

        return [processor]

    model.extra_processors = factory
    prompt = prompt_for(model, lamp())
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: model.generate(prompt, 2))
    thread.start()
    try:
        assert started.wait(10)
        with pytest.raises(Busy):
            model.generate(prompt, 2)
    except BaseException as exc:  # pragma: no cover - keep the worker from hanging
        errors.append(exc)
    finally:
        release.set()
        thread.join(10)
    assert not errors


# -- tool calls -----------------------------------------------------------------------------
KEEP = '<tool_call>\n{"name": "keep_context", "arguments": {"baseRevision": 0}}\n</tool_call>'


def test_native_tool_call_is_parsed_from_the_real_generation(model: MLXModel, lamp: Any) -> None:
    model.extra_processors = scripted(model, KEEP)
    response = model.generate(prompt_for(model, lamp(), Phase.EDIT), 80)
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("keep_context", '{"baseRevision": 0}')
    ]


def test_malformed_native_call_is_not_repaired(model: MLXModel, lamp: Any) -> None:
    bad = '<tool_call>\n{"name": "keep_context", "arguments": {"baseRevision": 0}\n</tool_call>'
    model.extra_processors = scripted(model, bad)
    response = model.generate(prompt_for(model, lamp(), Phase.EDIT), 80)
    assert response.tool_calls == () and "keep_context" in response.text


def test_a_native_call_during_completion_is_reported_so_the_session_can_refuse_it(
    model: MLXModel, lamp: Any
) -> None:
    model.extra_processors = scripted(model, KEEP)
    response = model.generate(prompt_for(model, lamp(), Phase.COMPLETION), 80)
    assert len(response.tool_calls) == 1


@pytest.fixture(scope="module")
def plain_model(plain_dir: Path) -> Iterator[MLXModel]:
    model = MLXModel.load(plain_dir, model_id="tiny-plain")
    yield model
    model.close()


def test_fallback_parse_runs_in_the_decision_phase_only(plain_model: MLXModel, lamp: Any) -> None:
    assert not plain_model.tokenizer.has_tool_calling
    plain_model.extra_processors = scripted(plain_model, "Sure. " + KEEP, "Sure. " + KEEP)
    decision = plain_model.generate(prompt_for(plain_model, lamp(), Phase.EDIT), 80)
    assert [c.name for c in decision.tool_calls] == ["keep_context"]
    completion = plain_model.generate(prompt_for(plain_model, lamp(), Phase.COMPLETION), 80)
    assert completion.tool_calls == ()
    plain_model.extra_processors = None


# -- prefix KV-cache reuse ------------------------------------------------------------------------
def test_common_prefix_helpers() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert reusable_prefix([1, 2, 3], [1, 2, 3]) == 2  # one token must still be computed
    assert reusable_prefix([1, 2, 3, 4], [1, 2]) == 1
    assert reusable_prefix([], [5]) == 0


@pytest.fixture(scope="module")
def fresh_model(tiny_dir: Path) -> Iterator[MLXModel]:
    model = MLXModel.load(tiny_dir, model_id="tiny-no-cache", prefix_cache=False)
    yield model
    model.close()


def _episode(lamp: Any) -> list[Snapshot]:
    base = lamp()
    steps = [base]
    for k in range(1, 4):
        extra = tuple(
            Record(id=f"step-{i}", role=Role.USER, body=f"FACT item{i}=value-{i * 7} and more text")
            for i in range(1, k + 1)
        )
        steps.append(lamp(extra=extra))
    return steps


def test_reuse_gives_token_identical_greedy_outputs_with_fewer_prefill_tokens(
    model: MLXModel, fresh_model: MLXModel, lamp: Any
) -> None:
    model.prefix_cache = False
    model.prefix_cache = True  # start from an empty cache
    reused_prefill = full_prefill = 0
    for i, snapshot in enumerate(_episode(lamp)):
        for phase in (Phase.EDIT, Phase.COMPLETION):
            prompt = prompt_for(model, snapshot, phase)
            with_cache = model.generate(prompt, 24)
            without = fresh_model.generate(prompt, 24)
            assert with_cache.text == without.text
            assert with_cache.generated_tokens == without.generated_tokens
            assert without.prefill_tokens == prompt.token_count
            assert with_cache.prefill_tokens is not None
            if i > 0:
                # Decision prompts diverge at the tool schema (its recordID enum grows with
                # every new record); completion prompts grow by appending.
                assert with_cache.prefill_tokens < prompt.token_count
                if phase is Phase.COMPLETION:
                    assert with_cache.prefill_tokens * 2 < prompt.token_count
                    reused_prefill += with_cache.prefill_tokens
                    full_prefill += prompt.token_count
    assert full_prefill >= 2 * reused_prefill > 0


def test_editable_prompts_reuse_up_to_the_first_changed_record(
    model: MLXModel, fresh_model: MLXModel, lamp: Any
) -> None:
    model.prefix_cache = False
    model.prefix_cache = True
    before = lamp()
    first = prompt_for(model, before)
    model.generate(first, 4)
    edited_records = tuple(
        r.with_body("SKU LM-204 price 37.50 USD") if r.id == "result" else r for r in before.records
    )
    after = before.model_copy(update={"records": edited_records, "revision": 1})
    second = prompt_for(model, after)
    shared = common_prefix(first.token_ids, second.token_ids)
    assert 0 < shared < second.token_count
    response = model.generate(second, 8)
    assert response.prefill_tokens == second.token_count - shared
    assert response.text == fresh_model.generate(second, 8).text


def test_same_prompt_twice_prefills_one_token_and_switching_off_prefills_all(
    model: MLXModel, lamp: Any
) -> None:
    prompt = prompt_for(model, lamp())
    a = model.generate(prompt, 6)
    b = model.generate(prompt, 6)
    assert b.prefill_tokens == 1 and a.text == b.text
    model.reset_cache()  # a cold start: everything is prefilled again, same output
    cold = model.generate(prompt, 6)
    assert cold.prefill_tokens == prompt.token_count and cold.text == a.text
    assert model.generate(prompt, 6).prefill_tokens == 1  # and the cache is kept again
    model.prefix_cache = False
    c = model.generate(prompt, 6)
    assert c.prefill_tokens == prompt.token_count and c.text == a.text
    assert "prefix cache: off" in prompt_for(model, lamp()).notes


# -- through the session ----------------------------------------------------------------------
def test_editable_run_through_the_session_with_a_real_model(model: MLXModel, lamp: Any) -> None:
    edit = (
        '<tool_call>\n{"name": "edit_context", "arguments": {"baseRevision": 0, "operations": '
        '[{"action": "replace", "recordID": "result", "body": "SKU LM-204, 37.50 USD"}]}}\n'
        "</tool_call>"
    )
    model.prefix_cache = False
    model.prefix_cache = True
    model.extra_processors = scripted(model, edit, "LM-204 costs 37.50 USD.", "Noted.")
    session = ContextSession(lamp(), model, model)
    report = session.run(
        RunMode.EDITABLE, RunBudget(edit_output_tokens=200, completion_output_tokens=60)
    )
    assert report.failure is None, report.failure
    assert [a.outcome for a in report.attempts] == [Outcome.EDITED]
    assert report.answer == "LM-204 costs 37.50 USD."
    assert session.context.record("result") is not None
    assert session.context.record("result").body == "SKU LM-204, 37.50 USD"  # type: ignore[union-attr]
    assert all("prefix cache: on" in call.notes for call in report.calls)
    # One prefix per step: the answer call shares the decision call's system text, tools and
    # history, so it computes only its trailing receipt and guidance.
    _decision_call, answer_call = report.calls
    assert report.call_prefill_tokens[1] < answer_call.token_count // 4
    # The next turn's prompts extend this one's: only the new tail is computed.
    session.append_records([Record(id="follow-up", role=Role.USER, body="Thanks.")])
    model.extra_processors = scripted(model, KEEP.replace("0", "2"), "Noted.")
    second = session.run(RunMode.EDITABLE, RunBudget(completion_output_tokens=60))
    assert second.failure is None and second.answer == "Noted.", second.failure
    assert second.total_prefill_tokens * 2 < second.total_input_tokens


def test_tool_call_during_completion_fails_the_run_but_keeps_the_answer(
    model: MLXModel, lamp: Any
) -> None:
    model.extra_processors = scripted(model, "Answer " + KEEP)
    report = ContextSession(lamp(), model, model).run(
        RunMode.APPEND_ONLY, RunBudget(completion_output_tokens=80)
    )
    assert report.failure == "Invalid context or edit: tools are disabled during completion"
    assert report.answer.startswith("Answer ")


def test_clipped_completion_is_a_budget_failure(model: MLXModel, lamp: Any) -> None:
    report = ContextSession(lamp(), model, model).run(
        RunMode.APPEND_ONLY, RunBudget(completion_output_tokens=3)
    )
    assert report.failure == "Token budget exceeded: completion hit its output limit"
    assert report.total_generated_tokens == 3


# -- ChatModel ----------------------------------------------------------------------------------
def test_chat_generates_and_parses_tool_calls(model: MLXModel) -> None:
    call = '<tool_call>\n{"name": "open_node", "arguments": {"id": "n1"}}\n</tool_call>'
    model.extra_processors = scripted(model, call)
    response = model.chat(
        [ChatMessage(role="user", content="Open node n1.")],
        40,
        tools=[ToolSpec(name="open_node", description="Open a node")],
    )
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("open_node", '{"id": "n1"}')]
    ids, text, _notes = model.render_chat(
        [ChatMessage(role="user", content="Open node n1.")],
        [ToolSpec(name="open_node", description="Open a node")],
    )
    assert '"name": "open_node"' in text
    assert response.prefill_tokens is not None and 0 < response.prefill_tokens <= len(ids)
    assert model.count_tokens("hello") == len(
        model.tokenizer.encode("hello", add_special_tokens=False)
    )


def test_chatml_models_stop_on_either_end_token(model: MLXModel, lamp: Any) -> None:
    end_of_text = model.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    ids = [*script_ids(model, "Hi", eos=False), end_of_text]
    model.extra_processors = lambda: [forced_tokens(ids)]
    response = model.generate(prompt_for(model, lamp()), 40)
    assert response.text == "Hi" and not response.reached_token_limit
    assert response.generated_tokens == len(ids)


def test_hidden_states_feed_a_real_model_embedder(model: MLXModel) -> None:
    """The MLX model is a ``HiddenStateModel``: one row per token, the config's width, the same
    numbers on every call, and the KV cache used for generation is left alone."""
    import numpy as np

    from picocontext.distill import ModelEmbedder
    from picocontext.distill.embedder import HiddenStateModel

    assert isinstance(model, HiddenStateModel)
    config = json.loads((model.path / "config.json").read_text(encoding="utf-8"))
    assert model.hidden_size == config["hidden_size"]
    text = "The kiln relay clicks twice before the element heats."
    states = model.hidden_states(text)
    assert states.shape == (len(model.chat_format.tokenizer.encode(text)), model.hidden_size)
    assert states.dtype == np.float32 and np.isfinite(states).all()
    np.testing.assert_array_equal(states, model.hidden_states(text))
    assert model.hidden_states(text, max_tokens=3).shape == (3, model.hidden_size)
    np.testing.assert_array_equal(model.hidden_states(text, max_tokens=3), states[:3])
    assert model.hidden_states("").shape == (0, model.hidden_size)
    with pytest.raises(InvalidContext):
        model.hidden_states(text, max_tokens=0)

    embedder = ModelEmbedder(model)
    vectors = embedder.embed([text, "An unrelated sentence about tomatoes.", text])
    assert vectors.shape == (3, model.hidden_size)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(vectors[0], vectors[2])
    assert not np.array_equal(vectors[0], vectors[1])
    assert embedder.embedder_id == f"mean-pool:{model.model_id}"


def test_batched_hidden_states_match_one_at_a_time(model: MLXModel) -> None:
    """Right padding never reaches a real token (causal mask): each text's rows in a batch are
    its own hidden states, cut to its own length."""
    import numpy as np

    texts = ["The kiln relay clicks twice.", "Tomatoes.", ""]
    batch = model.hidden_states_batch(texts)
    assert [b.shape[0] for b in batch] == [
        len(model.chat_format.tokenizer.encode(t)) for t in texts
    ]
    for text, rows in zip(texts[:2], batch[:2], strict=True):
        np.testing.assert_allclose(rows, model.hidden_states(text), rtol=1e-4, atol=1e-4)
    assert model.hidden_states_batch([""])[0].shape == (0, model.hidden_size)
    with pytest.raises(InvalidContext):
        model.hidden_states_batch(texts, max_tokens=0)


def test_generation_that_ends_without_accounting_is_an_error_not_an_answer(
    model: MLXModel, lamp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the decode loop stops before a stop token, the token limit or a cancellation, the
    result cannot be accounted for: the call fails with the reference's description instead
    of returning a silently truncated answer, and the model stays usable."""
    import importlib

    from picocontext.models.mlx_backend import NO_ACCOUNTING

    # the package re-exports a function called generate, so fetch the module itself
    module = importlib.import_module("mlx_lm.generate")
    real = module.generate_step

    def short_lived(*args: Any, **kwargs: Any) -> Iterator[tuple[Any, Any]]:
        steps = real(*args, **kwargs)
        try:
            for _ in range(2):
                yield next(steps)
        finally:
            steps.close()

    prompt = prompt_for(model, lamp())
    monkeypatch.setattr(module, "generate_step", short_lived)
    model.extra_processors = lambda: [forced_tokens([5, 6, 7, 8, 9, 10])]
    with pytest.raises(InvalidContext) as err:
        model.generate(prompt, 6)
    assert str(err.value).endswith(NO_ACCOUNTING)
    monkeypatch.undo()
    model.extra_processors = None
    assert model.generate(prompt, 3).generated_tokens >= 1
