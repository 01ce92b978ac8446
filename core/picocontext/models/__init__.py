"""Model adapters. Importing this package never imports MLX; real backends load it lazily.

``picocontext.models.load_model()`` resolves and loads the default (or a named) model;
``MLXModel`` and ``LlamaCppModel`` are the real in-process backends (TokenCounter +
ModelBackend + ChatModel) and ``OpenAIBackend`` the same three over an OpenAI-compatible
server; ``ChatFormat`` adapts any tokenizer's own chat template; ``ByteCounter`` and
``ScriptedBackend`` are test doubles.
"""

from __future__ import annotations

import typing

from picocontext.models.handle import (
    BYTE_UNIT,
    MLX_SINGLE_WORKER,
    TOKEN_UNIT,
    ModelDescription,
    ModelHandle,
    handle_for,
)
from picocontext.models.progress import GenerationProgress, ProgressListener
from picocontext.models.scripted import ByteCounter, ScriptedBackend, scripted_call

if typing.TYPE_CHECKING:
    from picocontext.models.blas import openblas_preload_env
    from picocontext.models.chatformat import ChatFormat, HFChatTokenizer
    from picocontext.models.constrained import DecisionGrammar, decision_lark, decision_schema
    from picocontext.models.embedded import MODEL_NAME as EMBEDDED_MODEL_NAME
    from picocontext.models.embedded import (
        ensure_embedded,
        ensure_embedded_gguf,
        ensure_embedded_model,
    )
    from picocontext.models.embedded import get_spec as embedded_spec
    from picocontext.models.llamacpp_backend import INSTALL_HINT as LLAMACPP_INSTALL_HINT
    from picocontext.models.llamacpp_backend import LlamaCppModel
    from picocontext.models.llamacpp_backend import engine_available as llamacpp_available
    from picocontext.models.local_tokenizer import load_tokenizer
    from picocontext.models.mlx_backend import MLXModel, forced_tokens
    from picocontext.models.openai_backend import (
        OpenAIBackend,
        RemoteAccounting,
        ServerKind,
        resolve_tokenizer_dir,
    )
    from picocontext.models.registry import (
        ENGINES,
        MODELS,
        ModelSpec,
        ResolvedModel,
        default_engine,
        default_model_name,
        directory_engine,
        engine_notes,
        fetch_hub_model,
        load_model,
        resolve_model,
    )
    from picocontext.models.tiny import write_tiny_model

_LAZY = {
    "openblas_preload_env": "picocontext.models.blas",
    "ChatFormat": "picocontext.models.chatformat",
    "HFChatTokenizer": "picocontext.models.chatformat",
    "MLXModel": "picocontext.models.mlx_backend",
    "LlamaCppModel": "picocontext.models.llamacpp_backend",
    "LLAMACPP_INSTALL_HINT": "picocontext.models.llamacpp_backend",
    "llamacpp_available": "picocontext.models.llamacpp_backend",
    "forced_tokens": "picocontext.models.mlx_backend",
    "OpenAIBackend": "picocontext.models.openai_backend",
    "ServerKind": "picocontext.models.openai_backend",
    "RemoteAccounting": "picocontext.models.openai_backend",
    "load_tokenizer": "picocontext.models.local_tokenizer",
    "resolve_tokenizer_dir": "picocontext.models.openai_backend",
    "write_tiny_model": "picocontext.models.tiny",
    "MODELS": "picocontext.models.registry",
    "ENGINES": "picocontext.models.registry",
    "default_engine": "picocontext.models.registry",
    "ModelSpec": "picocontext.models.registry",
    "ResolvedModel": "picocontext.models.registry",
    "default_model_name": "picocontext.models.registry",
    "directory_engine": "picocontext.models.registry",
    "engine_notes": "picocontext.models.registry",
    "fetch_hub_model": "picocontext.models.registry",
    "load_model": "picocontext.models.registry",
    "resolve_model": "picocontext.models.registry",
    "DecisionGrammar": "picocontext.models.constrained",
    "decision_lark": "picocontext.models.constrained",
    "decision_schema": "picocontext.models.constrained",
    "EMBEDDED_MODEL_NAME": "picocontext.models.embedded",
    "ensure_embedded_model": "picocontext.models.embedded",
    "embedded_spec": "picocontext.models.embedded",
    "ensure_embedded": "picocontext.models.embedded",
    "ensure_embedded_gguf": "picocontext.models.embedded",
}
# Names this facade spells differently from their module.
_RENAMED = {
    "EMBEDDED_MODEL_NAME": "MODEL_NAME",
    "embedded_spec": "get_spec",
    "LLAMACPP_INSTALL_HINT": "INSTALL_HINT",
    "llamacpp_available": "engine_available",
}


def __getattr__(name: str) -> typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'picocontext.models' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), _RENAMED.get(name, name))


__all__ = [
    "BYTE_UNIT",
    "EMBEDDED_MODEL_NAME",
    "ENGINES",
    "LLAMACPP_INSTALL_HINT",
    "MLX_SINGLE_WORKER",
    "MODELS",
    "TOKEN_UNIT",
    "ByteCounter",
    "ChatFormat",
    "DecisionGrammar",
    "GenerationProgress",
    "HFChatTokenizer",
    "LlamaCppModel",
    "MLXModel",
    "ModelDescription",
    "ModelHandle",
    "ModelSpec",
    "OpenAIBackend",
    "ProgressListener",
    "RemoteAccounting",
    "ResolvedModel",
    "ScriptedBackend",
    "ServerKind",
    "decision_lark",
    "decision_schema",
    "default_engine",
    "default_model_name",
    "directory_engine",
    "embedded_spec",
    "engine_notes",
    "ensure_embedded",
    "ensure_embedded_gguf",
    "ensure_embedded_model",
    "fetch_hub_model",
    "forced_tokens",
    "handle_for",
    "llamacpp_available",
    "load_model",
    "load_tokenizer",
    "openblas_preload_env",
    "resolve_model",
    "resolve_tokenizer_dir",
    "scripted_call",
    "write_tiny_model",
]
