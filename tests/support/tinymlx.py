"""The tiny random-weight MLX model for tests that drive real generation (written by
:func:`picocontext.models.tiny.write_tiny_model`), and reply scripts that force its output
token by token, so summaries and navigation replies are deterministic."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest


def tiny_model(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Any]:
    """Body of a module-scoped fixture: ``yield from tiny_model(tmp_path_factory, "x")``.
    Skips when the mlx extra is not installed; closes the model afterwards."""
    pytest.importorskip("mlx_lm")
    from picocontext.models.mlx_backend import MLXModel
    from picocontext.models.tiny import write_tiny_model

    model = MLXModel.load(write_tiny_model(tmp_path_factory.mktemp(name)), model_id=name)
    try:
        yield model
    finally:
        model.close()


def _forced(model: Any, text: str) -> list[Any]:
    from picocontext.models.mlx_backend import forced_tokens

    ids = list(model.tokenizer.encode(text, add_special_tokens=False))
    return [forced_tokens([*ids, model.tokenizer.eos_token_id])]


def numbered_replies(model: Any, prefix: str) -> Callable[[], list[Any]]:
    """A processor factory for ``model.extra_processors``: call n answers "<prefix> n"."""
    counter = itertools.count(1)
    return lambda: _forced(model, f"{prefix} {next(counter)}")


def scripted_replies(model: Any, *texts: str) -> Callable[[], list[Any]]:
    """The given replies in order, then free generation."""
    queue = list(texts)
    return lambda: _forced(model, queue.pop(0)) if queue else []
