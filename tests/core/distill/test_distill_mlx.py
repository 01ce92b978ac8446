"""The distiller over the real MLX path: ChatSummarizer driving the tiny random-weight model
(its replies are forced token by token, so the summaries are deterministic) and counting
tokens with the model's own tokenizer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from picocontext.distill import ChatSummarizer, DistillConfig, Distiller
from picocontext.distill.testing import VariedEmbedder, note
from tinymlx import numbered_replies, tiny_model

pytestmark = pytest.mark.mlx


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from tiny_model(tmp_path_factory, "tiny-distill")


def test_chat_summarizer_over_mlx_builds_the_tree(tiny: Any, tmp_path: Path) -> None:
    summarizer = ChatSummarizer(tiny, quantization="f32")
    tiny.extra_processors = numbered_replies(tiny, "summary number")
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


def test_cli_distils_a_folder_with_a_local_model_as_summarizer_and_embedder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sync --summarizer model --embedder model --model DIR` loads one model for both seams,
    remembers the choice for later syncs, and reports real model summaries (free text from
    the random weights) with model-sized embeddings."""
    import json

    pytest.importorskip("mlx_lm")
    from picocontext.distill.cli import main
    from picocontext.distill.store import NodeStore
    from picocontext.models import registry
    from picocontext.models.tiny import write_tiny_model

    loads: list[object] = []
    real_load = registry.load_model

    def counting_load(*args: Any, **kwargs: Any) -> Any:
        loads.append(args or kwargs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(registry, "load_model", counting_load)
    model_dir = write_tiny_model(tmp_path / "model")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "kiln.md").write_text("# Kiln\n\nThe relay clicks twice.\n", encoding="utf-8")
    (docs / "garden.md").write_text("# Garden\n\nWater the tomatoes.\n", encoding="utf-8")
    corpus = tmp_path / "corpus"
    argv = ["--corpus", str(corpus), "sync", "--docs", str(docs), "--json"]
    model_args = ["--summarizer", "model", "--embedder", "model", "--model", str(model_dir)]
    model_args += ["--budget", "12"]
    assert main([*argv, *model_args]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["counters"]["summaries"] > 0
    assert len(loads) == 1  # summarizer and embedder share one loaded model
    store = NodeStore(corpus / "nodes.sqlite")
    try:
        config = json.loads(store.meta_get("cli_config") or "{}")
        assert config["embedder"] == "model" and config["summarizer"] == "model"
        assert config["budget"] == 12
        assert Path(config["model"]) == model_dir.resolve()
    finally:
        store.close()
    # The second sync reuses the remembered model settings: nothing changed, nothing to do.
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["counters"]["summaries"] == 0
    assert main(["--corpus", str(corpus), "map"]) == 0
    assert "digest:" in capsys.readouterr().out
    # recall embeds the query and writes the pending views first: still one model load
    loads.clear()
    assert main(["--corpus", str(corpus), "recall", "relay", "--altitude", "scope"]) == 0
    capsys.readouterr()
    assert len(loads) == 1


def test_cli_model_choice_without_a_model_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from picocontext.distill.cli import main

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\ntext\n", encoding="utf-8")
    argv = ["--corpus", str(tmp_path / "c"), "sync", "--docs", str(docs), "--embedder", "model"]
    assert main(argv) == 2
    assert "--embedder model needs --model NAME_OR_DIR" in capsys.readouterr().err


@pytest.mark.parametrize("budget", ["0", "-3", "many"])
def test_cli_rejects_a_budget_that_is_not_a_positive_number(
    budget: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from picocontext.distill.cli import main

    # a usage error: exit code 2 from the one CLI handler (which owns the exit, so ``main``
    # returns it instead of raising SystemExit)
    code = main(
        ["--corpus", str(tmp_path / "c"), "sync", "--docs", str(tmp_path), "--budget", budget]
    )
    assert code == 2
    assert "expected a positive whole number" in capsys.readouterr().err


def test_text_quoting_the_wire_format_is_summarised_by_the_real_chat_format(tiny: Any) -> None:
    """Without defanging, the MLX chat format refuses the prompt (reserved delimiter)."""
    from picocontext.distill.data import SummaryInput

    summarizer = ChatSummarizer(tiny)
    tiny.extra_processors = numbered_replies(tiny, "summary number")
    try:
        raw = "Calls look like <tool_call>{}</tool_call> and turns end with <|im_end|>."
        out = summarizer.summarize(SummaryInput(level=0, kind="entity", raw=raw, budget=20))
    finally:
        tiny.extra_processors = None
    assert out.startswith("summary number ")
    tiny.chat_format.check_text(out)  # nothing reserved survives
