"""Live progress and Stop latency of a real MLX generation, on the tiny random-weight model.

Stop must act within one token while decoding and between prefill chunks while the prompt is
computed; both are counted in model steps, not seconds, so a busy machine cannot make the
test pass or fail by accident."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from picocontext import Cancelled, CancelToken, ModelInput, Phase, Record, Role, Scope, Snapshot
from picocontext.models import GenerationProgress

pytest.importorskip("mlx_lm")

from picocontext.models.mlx_backend import MLXModel

pytestmark = pytest.mark.mlx


class CountingModule:
    """Stands in for the loaded module and counts forward passes (one per prefill chunk or
    decode step); everything else is delegated."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0
        self.after_cancel = 0
        self.cancel: CancelToken | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.cancel is not None and self.cancel.cancelled:
            self.after_cancel += 1
        return self.inner(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def model(tiny_model: MLXModel) -> Iterator[MLXModel]:
    tiny_model.extra_processors = None
    tiny_model.prefix_cache = False
    saved = (tiny_model.prefill_step_size, tiny_model.progress_interval)
    yield tiny_model
    tiny_model.progress_listener = None
    tiny_model.prefill_step_size, tiny_model.progress_interval = saved
    tiny_model.prefix_cache = True


def long_prompt(model: MLXModel, lines: int) -> Any:
    body = "\n".join(f"Sensor sweep {i}: relay idle, sample dropped." for i in range(lines))
    snapshot = Snapshot(
        scope=Scope(user_id="u", conversation_id="c", branch_id="b"),
        revision=0,
        records=(Record(id="task", role=Role.USER, body=body, protected=True),),
    )
    return model.prepare(ModelInput(context=snapshot, phase=Phase.COMPLETION))


def counting(model: MLXModel, cancel: CancelToken) -> CountingModule:
    proxy = CountingModule(model._model)
    proxy.cancel = cancel
    model._model = proxy
    return proxy


def test_progress_reports_prefill_then_tokens_against_the_cap(model: MLXModel) -> None:
    seen: list[GenerationProgress] = []
    model.progress_interval = 0.0
    model.prefill_step_size = 32
    model.progress_listener = seen.append
    prompt = long_prompt(model, 20)
    response = model.generate(prompt, 12)
    phases = [p.phase for p in seen]
    assert phases[0] == "prefill" and phases[-1] == "done"
    prefill = [p.prefilled for p in seen if p.phase == "prefill"]
    assert prefill == sorted(prefill) and 0 < max(prefill) <= prompt.token_count
    decode = [p for p in seen if p.phase == "decode"]
    assert [p.generated for p in decode] == list(range(1, response.generated_tokens + 1))
    assert all(p.max_tokens == 12 for p in seen)
    assert seen[-1].generated == response.generated_tokens
    assert seen[-1].text.startswith(response.text)
    if response.generated_tokens >= 3:
        assert seen[-1].tokens_per_second is not None and seen[-1].tokens_per_second > 0


def test_progress_is_throttled(model: MLXModel) -> None:
    seen: list[GenerationProgress] = []
    model.progress_interval = 3600.0
    model.progress_listener = seen.append
    model.generate(long_prompt(model, 4), 20)
    # only the forced reports: prefill start and end, the first token, the end
    assert len(seen) <= 4
    assert seen[-1].phase == "done"


def test_stop_during_decoding_acts_within_one_token(model: MLXModel) -> None:
    cancel = CancelToken()
    model.progress_interval = 0.0
    proxy = counting(model, cancel)
    generated_at_cancel: list[int] = []

    def listener(progress: GenerationProgress) -> None:
        if progress.phase == "decode" and progress.generated == 5:
            generated_at_cancel.append(progress.generated)
            cancel.cancel()

    model.progress_listener = listener
    try:
        with pytest.raises(Cancelled):
            model.generate(long_prompt(model, 4), 400, cancel)
    finally:
        model._model = proxy.inner
    assert generated_at_cancel == [5]
    assert proxy.after_cancel <= 1  # at most the one look-ahead step already in flight


def test_stop_during_prefill_acts_between_chunks(model: MLXModel) -> None:
    cancel = CancelToken()
    model.progress_interval = 0.0
    model.prefill_step_size = 16
    prompt = long_prompt(model, 40)
    chunks = prompt.token_count // 16
    assert chunks >= 10  # a prompt long enough that stopping early is visible
    proxy = counting(model, cancel)

    def listener(progress: GenerationProgress) -> None:
        if progress.phase == "prefill" and progress.prefilled >= 32:
            cancel.cancel()

    model.progress_listener = listener
    try:
        with pytest.raises(Cancelled):
            model.generate(prompt, 50, cancel)
    finally:
        model._model = proxy.inner
    assert proxy.after_cancel == 0  # the next chunk never starts
    assert proxy.calls <= 3  # two chunks of 16 (the cancel came after the second)
    after = model.generate(prompt, 2)  # the model is usable again
    assert after.prefill_tokens == prompt.token_count
