"""The tokenizer of a local model directory, loaded without weights, and its end-of-turn ids.

Engines that do not load the model through mlx_lm (the OpenAI-compatible backend, the
llama.cpp backend) still render and count prompts with the model's own tokenizer, so both
need this. It is a module of its own, importing no backend, so the llama.cpp backend does not
depend on the remote one (which needs the model registry, which loads llama.cpp models).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from picocontext.errors import ModelError
from picocontext.models.chatformat import HFChatTokenizer


def load_tokenizer(directory: Path) -> tuple[HFChatTokenizer, tuple[int, ...]]:
    """The model's tokenizer (transformers, no weights) and its end-of-turn token ids.

    Only the tokenizer is used, so transformers' advice that PyTorch is missing (printed on
    every run otherwise) is silenced unless the user asked for it."""
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ModelError(
            "The openai backend renders prompts with the model's own tokenizer and needs "
            f"transformers ({exc}); install picocontext[remote]"
        ) from None
    try:
        raw = AutoTokenizer.from_pretrained(str(directory))
    except Exception as exc:  # missing files, bad JSON, unknown tokenizer class
        raise ModelError(f"Could not load the tokenizer in {directory}: {exc}") from None
    chat = HFChatTokenizer(raw)
    return chat, stop_token_ids(directory, raw, chat.template)


def stop_token_ids(directory: Path, raw: Any, template: str) -> tuple[int, ...]:
    """config.json's ``eos_token_id`` (int or list), the tokenizer's EOS, and for ChatML
    templates ``<|im_end|>``/``<|endoftext|>`` (configs often name only one of them)."""
    ids: list[int] = []
    config = directory / "config.json"
    if config.is_file():
        value = json.loads(config.read_text(encoding="utf-8")).get("eos_token_id")
        ids += [value] if isinstance(value, int) else [v for v in value or [] if isinstance(v, int)]
    if isinstance(getattr(raw, "eos_token_id", None), int):
        ids.append(int(raw.eos_token_id))
    if "<|im_start|>" in template:
        added = raw.get_added_vocab()
        ids += [added[t] for t in ("<|im_end|>", "<|endoftext|>") if t in added]
    return tuple(dict.fromkeys(ids))
