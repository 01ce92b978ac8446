"""Model adapters. Importing this package never imports MLX; real backends load it lazily.

``picocontext.models.load_model()`` resolves and loads the default (or a named) model;
``MLXModel`` is the real backend (TokenCounter + ModelBackend + ChatModel) and
``OpenAIBackend`` the same three over an OpenAI-compatible server; ``ChatFormat``
adapts any tokenizer's own chat template; ``ByteCounter``/``ScriptedBackend`` are test doubles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from picocontext.models.scripted import ByteCounter, ScriptedBackend, scripted_call

if TYPE_CHECKING:
    from picocontext.models.chatformat import ChatFormat, HFChatTokenizer
    from picocontext.models.mlx_backend import MLXModel, forced_tokens
    from picocontext.models.openai_backend import OpenAIBackend, RemoteAccounting, ServerKind
    from picocontext.models.registry import (
        MODELS,
        ModelSpec,
        ResolvedModel,
        default_model_name,
        load_model,
        resolve_model,
    )
    from picocontext.models.tiny import write_tiny_model

_LAZY = {
    "ChatFormat": "picocontext.models.chatformat",
    "HFChatTokenizer": "picocontext.models.chatformat",
    "MLXModel": "picocontext.models.mlx_backend",
    "forced_tokens": "picocontext.models.mlx_backend",
    "OpenAIBackend": "picocontext.models.openai_backend",
    "ServerKind": "picocontext.models.openai_backend",
    "RemoteAccounting": "picocontext.models.openai_backend",
    "write_tiny_model": "picocontext.models.tiny",
    "MODELS": "picocontext.models.registry",
    "ModelSpec": "picocontext.models.registry",
    "ResolvedModel": "picocontext.models.registry",
    "default_model_name": "picocontext.models.registry",
    "load_model": "picocontext.models.registry",
    "resolve_model": "picocontext.models.registry",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'picocontext.models' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "MODELS",
    "ByteCounter",
    "ChatFormat",
    "HFChatTokenizer",
    "MLXModel",
    "ModelSpec",
    "OpenAIBackend",
    "RemoteAccounting",
    "ResolvedModel",
    "ScriptedBackend",
    "ServerKind",
    "default_model_name",
    "forced_tokens",
    "load_model",
    "resolve_model",
    "scripted_call",
    "write_tiny_model",
]
