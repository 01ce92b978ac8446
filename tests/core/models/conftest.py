"""Shared fixtures: the tiny random-weight Qwen3-format model, its tokenizer, loaded models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from picocontext import Record, Role, Scope, Snapshot, ToolCall
from picocontext.models.tiny import PLAIN_CHATML_TEMPLATE, write_tiny_model

SCOPE = Scope(user_id="u", conversation_id="c", branch_id="b")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny-qwen3"))


@pytest.fixture(scope="session")
def plain_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Same weights and vocabulary, but a ChatML template that cannot render tools."""
    return write_tiny_model(
        tmp_path_factory.mktemp("tiny-plain"), chat_template=PLAIN_CHATML_TEMPLATE
    )


@pytest.fixture(scope="session")
def hf_tokenizer(tiny_dir: Path) -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(tiny_dir))


@pytest.fixture(scope="session")
def plain_hf_tokenizer(plain_dir: Path) -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(plain_dir))


@pytest.fixture(scope="session")
def tiny_model(tiny_dir: Path) -> Iterator[Any]:
    pytest.importorskip("mlx_lm")
    from picocontext.models.mlx_backend import MLXModel

    model = MLXModel.load(tiny_dir, model_id="tiny-qwen3")
    yield model
    model.close()


@pytest.fixture(scope="session")
def lamp() -> Any:
    """The :func:`lamp_snapshot` factory (test files cannot import conftest helpers)."""
    return lamp_snapshot


def lamp_snapshot(revision: int = 0, extra: tuple[Record, ...] = ()) -> Snapshot:
    """A small history with every record shape: system, protected task, a tool group, a note."""
    records = (
        Record(id="instructions", role=Role.SYSTEM, body="Use the newest facts. Be brief."),
        Record(id="task", role=Role.USER, body="Report the lamp SKU and price.", protected=True),
        Record(
            id="check",
            role=Role.ASSISTANT,
            body="Checking stock.",
            tool_calls=(ToolCall(id="call-1", name="inventory", arguments='{"sku": "LM-204"}'),),
        ),
        Record(
            id="result",
            role=Role.TOOL,
            body="SKU LM-204 price 37.50 USD\nnoise noise noise",
            tool_call_id="call-1",
        ),
        Record(id="note", role=Role.USER, body="Zürich café 東京 🙂 — keep the SKU."),
        *extra,
    )
    return Snapshot(scope=SCOPE, revision=revision, records=records)
