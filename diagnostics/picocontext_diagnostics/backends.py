"""Backends the evaluation can run on, and the provenance each one reports.

``deterministic`` is the notebook backend with the core's UTF-8 byte counter: no model, no
downloads, exact and repeatable. ``mlx`` resolves a real local model through
:mod:`picocontext.models`, imported only here and only when asked for, so the diagnostics work
without the ``mlx`` extra. ``openai`` talks to OpenAI-compatible servers (docs/remote.md) with
prompts rendered and counted locally; its handle carries one backend per server as a pool.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import picocontext
from picocontext.models import BYTE_UNIT, ModelHandle, handle_for
from picocontext_diagnostics.conversations.extractive_backend import (
    DeterministicConversationBackend,
)
from picocontext_diagnostics.episodes.notebook_backend import MODEL_ID, MODEL_REVISION
from picocontext_diagnostics.errors import BackendSetupError
from picocontext_diagnostics.evaluation import Provenance

SOURCE_REVISION_ENV = "PICOCONTEXT_SOURCE_REVISION"
BACKENDS = ("deterministic", "mlx", "llamacpp", "openai")


# The deterministic backend counts UTF-8 bytes; limits are model tokens. English text and code
# run about 4 bytes per token on the Qwen and SmolLM tokenizers (3.8-4.3 measured:
# scripts/conversation_bytes_per_token.py), so without --bytes-per-token every limit is
# multiplied by 4 and a 4,096-token window means what it means on a real model. The episode
# and the conversation evaluations share this one rule.
DEFAULT_BYTES_PER_TOKEN = 4


def deterministic_backend() -> ModelHandle:
    from picocontext.models import ByteCounter

    return ModelHandle(
        counter=ByteCounter(),
        backend=DeterministicConversationBackend(),
        model_id=MODEL_ID,
        label=MODEL_ID,
        kind="deterministic",
        revision=MODEL_REVISION,
        token_unit=BYTE_UNIT,
        sampling="deterministic rules, no sampling",
    )


RESOLVER_NAMES = ("load_model",)


def _find_resolver() -> Callable[..., Any]:
    """``picocontext.models.load_model``, imported lazily and only for ``mlx``."""
    import importlib

    module = importlib.import_module("picocontext.models")
    for name in RESOLVER_NAMES:
        try:
            resolver = getattr(module, name, None)
        except ImportError as exc:
            raise BackendSetupError(
                f"the mlx extra is not installed ({exc}); install picocontext[mlx]"
            ) from None
        if callable(resolver):
            return cast(Callable[..., Any], resolver)
    raise BackendSetupError(
        "this picocontext has no model loader in picocontext.models "
        f"(looked for {', '.join(RESOLVER_NAMES)}); use --backend deterministic"
    )


def mlx_backend(
    model: str | None,
    prefix_cache: bool | None = None,
    constrained: bool | None = None,
    log: Callable[[str], None] | None = None,
    engine: str = "mlx",
    kv_shift: bool = False,
) -> ModelHandle:
    """Load ``model`` — a registry name (``picocontext.models.MODELS``), or a local model
    directory; ``None`` = the engine's default model — on ``engine`` (``mlx`` or
    ``llamacpp``) as one object that is both token counter and backend.
    ``prefix_cache``/``constrained`` default to the loader's defaults; ``kv_shift``
    (llama.cpp only) is passed only when on."""
    resolve = _find_resolver()
    kwargs: dict[str, Any] = {"engine": engine}
    if kv_shift:
        kwargs["kv_shift"] = True
    if model is not None and Path(model).expanduser().is_dir():
        kwargs["model_dir"] = model
    elif model is not None:
        kwargs["name"] = model
    if prefix_cache is not None:
        kwargs["prefix_cache"] = prefix_cache
    if constrained is not None:
        kwargs["constrained"] = constrained
    if log is not None:
        kwargs["log"] = log
    try:
        return handle_for(resolve(**kwargs), requested=model)
    except ImportError as exc:
        raise BackendSetupError(
            f"the mlx extra is not installed ({exc}); install picocontext[mlx]"
        ) from None
    except picocontext.PicoContextError as exc:
        raise BackendSetupError(exc.message) from None


def openai_backend(
    base_urls: tuple[str, ...],
    model: str,
    tokenizer_dir: str | None = None,
    server_kind: str | None = None,
    constrained: bool | None = None,
) -> ModelHandle:
    """Connect to every server (each must serve ``model``); prompts are rendered and counted
    with the local tokenizer of ``tokenizer_dir`` (or of ``model`` itself). ``constrained``
    asks for structured decoding where the server dialect supports it."""
    try:
        from picocontext.models import OpenAIBackend, RemoteAccounting
    except ImportError as exc:
        raise BackendSetupError(f"the openai backend cannot be imported ({exc})") from None
    if not base_urls:
        raise BackendSetupError("--backend openai needs --base-url URL")
    backends: list[OpenAIBackend] = []
    try:
        for url in base_urls:
            backends.append(
                OpenAIBackend.connect(
                    url,
                    model,
                    tokenizer_dir=tokenizer_dir,
                    server_kind=server_kind or "auto",
                    structured=bool(constrained),
                )
            )
    except picocontext.PicoContextError as exc:
        raise BackendSetupError(exc.message) from None
    first = backends[0]
    facts = first.describe()

    def run_notes() -> tuple[str, ...]:
        total = RemoteAccounting()
        for backend in backends:
            total = total.merge(backend.accounting())
        return total.notes()

    return ModelHandle(
        counter=first,
        backend=first,
        model_id=model,
        label=model,
        kind="openai",
        revision="unknown (served remotely)",
        token_unit=f"model tokens (local tokenizer: {facts['tokenizerDir']})",
        sampling="greedy, temperature 0 (on the server)",
        prefix_cache=str(facts["prefixCache"]),
        constrained_decisions=str(facts["constrainedDecisions"]),
        decoding="constrained" if first.structured_decoding else "free",
        notes=(
            f"servers: {', '.join(b.base_url for b in backends)} ({facts['serverKind']})",
            f"prompts sent as {facts['promptsSentAs']}, counted locally",
        ),
        raw=first,
        pool=tuple((b, b) for b in backends),
        run_notes=run_notes,
    )


def resolve_backend(
    name: str,
    model: str | None = None,
    prefix_cache: bool | None = None,
    constrained: bool | None = None,
    log: Callable[[str], None] | None = None,
    base_urls: tuple[str, ...] = (),
    tokenizer_dir: str | None = None,
    server_kind: str | None = None,
    kv_shift: bool = False,
) -> ModelHandle:
    """``deterministic`` (model settings must be absent), ``mlx`` or ``llamacpp`` (in
    process), or ``openai`` (needs ``base_urls`` and ``model``)."""
    if name == "deterministic":
        if model is not None or prefix_cache is not None or constrained is not None:
            raise BackendSetupError(
                "--model, --prefix-cache and --decoding apply only to --backend mlx, llamacpp "
                "or openai"
            )
        return deterministic_backend()
    if name in ("mlx", "llamacpp"):
        return mlx_backend(model, prefix_cache, constrained, log, engine=name, kv_shift=kv_shift)
    if name == "openai":
        if model is None:
            raise BackendSetupError("--backend openai needs --model NAME")
        return openai_backend(base_urls, model, tokenizer_dir, server_kind, constrained)
    raise BackendSetupError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")


def source_revision() -> str:
    """``$PICOCONTEXT_SOURCE_REVISION``, else the git commit of this checkout (``+dirty`` when
    tracked files differ), else ``unknown``."""
    override = os.environ.get(SOURCE_REVISION_ENV)
    if override:
        return override
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}+dirty" if dirty else head or "unknown"


def provenance(handle: ModelHandle) -> Provenance:
    return Provenance(
        backend=handle.kind,
        model=handle.model_id,
        model_revision=handle.revision,
        token_unit=handle.token_unit,
        sampling=handle.sampling,
        prefix_cache=handle.prefix_cache,
        constrained_decisions=handle.constrained_decisions,
        decoding=handle.decoding,
        picocontext_version=picocontext.__version__,
        source_revision=source_revision(),
        python_version=sys.version.split()[0],
        operating_system=platform.platform(),
        machine=platform.machine(),
        model_notes=handle.notes,
    )
