"""The distiller over the real MLX path: ChatSummarizer driving the tiny random-weight model
(its replies are forced token by token, so the summaries are deterministic) and counting
tokens with the model's own tokenizer."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from picocontext.distill import ChatSummarizer, DistillConfig, Distiller
from picocontext.distill.testing import VariedEmbedder, note

pytestmark = pytest.mark.mlx


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("mlx_lm")
    from picocontext.models.mlx_backend import MLXModel
    from picocontext.models.tiny import write_tiny_model

    directory: Path = write_tiny_model(tmp_path_factory.mktemp("tiny-distill"))
    model = MLXModel.load(directory, model_id="tiny-distill")
    if not hasattr(model, "extra_processors") or not hasattr(model, "tokenizer"):
        model.close()
        pytest.skip("MLXModel has no forcing hook in this version")
    yield model
    model.close()


def _numbered_replies(model: Any) -> Callable[[], list[Any]]:
    from picocontext.models.mlx_backend import forced_tokens

    counter = itertools.count(1)

    def next_reply() -> list[Any]:
        text = f"summary number {next(counter)}"
        ids = list(model.tokenizer.encode(text, add_special_tokens=False))
        return [forced_tokens([*ids, model.tokenizer.eos_token_id])]

    return next_reply


def test_chat_summarizer_over_mlx_builds_the_tree(tiny: Any, tmp_path: Path) -> None:
    summarizer = ChatSummarizer(tiny, quantization="f32")
    tiny.extra_processors = _numbered_replies(tiny)
    try:
        d = Distiller.open(
            tmp_path / "c",
            summarizer,
            VariedEmbedder(),
            config=DistillConfig(budget=24),
            tokenizer=summarizer.count_tokens,
            tokenizer_id="model:tiny-distill",
        )
        report = d.apply([note("n1", "kiln relay", "s1"), note("n2", "cold elements", "s1")])
    finally:
        tiny.extra_processors = None
    assert report.failures == 0, report.errors
    nodes = d.store.nodes()
    assert {n.id for n in nodes} >= {
        "digest:0:note:n1",
        "digest:1:scope:site:s1",
        "digest:2:tenant",
    }
    texts = {d.cas.retrieve_text(n.summary_hash) for n in nodes}
    assert all(t.startswith("summary number ") for t in texts)
    for n in nodes:
        assert n.tokens == tiny.count_tokens(d.cas.retrieve_text(n.summary_hash)) > 0
    assert summarizer.calls == d.counters.get("summaries") == len(nodes)
    assert d.recipe.startswith("r1-")
