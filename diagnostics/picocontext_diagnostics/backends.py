"""Backends the evaluation can run on, and the provenance each one reports.

``deterministic`` is the notebook backend with the core's UTF-8 byte counter: no model, no
downloads, exact and repeatable. ``mlx`` resolves a real local model through
:mod:`picocontext.models`, imported only here and only when asked for, so the diagnostics work
without the ``mlx`` extra. ``openai`` generates on one or more OpenAI-compatible servers while
prompts are rendered and counted locally (:class:`picocontext.models.OpenAIBackend`); with
several servers each episode runs on one of them, spread evenly.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import picocontext
from picocontext import ModelBackend, TokenCounter
from picocontext_diagnostics.errors import BackendSetupError
from picocontext_diagnostics.evaluation import Provenance
from picocontext_diagnostics.notebook import (
    MODEL_ID,
    MODEL_REVISION,
    DeterministicNotebookBackend,
)

SOURCE_REVISION_ENV = "PICOCONTEXT_SOURCE_REVISION"
BACKENDS = ("deterministic", "mlx", "openai")
MLX_SINGLE_WORKER = (
    "the in-process MLX backend holds one model on one worker thread, so it runs one episode "
    "at a time; for concurrent episodes serve the model with mlx_lm.server and use --backend "
    "openai (docs/remote.md)"
)


@dataclass(frozen=True, slots=True)
class BackendHandle:
    """A counter/backend pair plus what the report must say about it."""

    name: str
    counter: TokenCounter
    backend: ModelBackend
    model: str
    model_revision: str
    token_unit: str
    sampling: str
    prefix_cache: str
    constrained_decisions: str
    close: Callable[[], None] | None = None
    notes: tuple[str, ...] = ()
    # Every counter/backend pair episodes may run on (several servers), default (counter, backend).
    pool: tuple[tuple[TokenCounter, ModelBackend], ...] = ()
    # Why this backend cannot run episodes concurrently; None = it can.
    single_worker: str | None = None
    # Lines for the report once the run is over (the remote backends' token checks).
    run_notes: Callable[[], tuple[str, ...]] | None = None


def deterministic_backend() -> BackendHandle:
    from picocontext.models import ByteCounter

    return BackendHandle(
        name="deterministic",
        counter=ByteCounter(),
        backend=DeterministicNotebookBackend(),
        model=MODEL_ID,
        model_revision=MODEL_REVISION,
        token_unit="UTF-8 bytes (not model tokens)",
        sampling="deterministic rules, no sampling",
        prefix_cache="not applicable",
        constrained_decisions="not applicable",
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


def _setting(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "unknown" if value is None else str(value)


def mlx_backend(
    model: str | None,
    prefix_cache: bool | None = None,
    constrained: bool | None = None,
    log: Callable[[str], None] | None = None,
) -> BackendHandle:
    """Load ``model`` — a registry name (``picocontext.models.MODELS``), or a local MLX model
    directory; ``None`` = the default model — as one object that is both token counter and
    backend. ``prefix_cache``/``constrained`` default to the loader's defaults."""
    resolve = _find_resolver()
    kwargs: dict[str, Any] = {}
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
        loaded = resolve(**kwargs)
    except ImportError as exc:
        raise BackendSetupError(
            f"the mlx extra is not installed ({exc}); install picocontext[mlx]"
        ) from None
    except picocontext.PicoContextError as exc:
        raise BackendSetupError(exc.message) from None
    if not isinstance(loaded, TokenCounter) or not isinstance(loaded, ModelBackend):
        raise BackendSetupError(f"{type(loaded).__name__} is not a token counter and backend")
    describe = getattr(loaded, "describe", None)
    facts: dict[str, Any] = describe() if callable(describe) else {}
    close = getattr(loaded, "close", None)
    notes = getattr(loaded, "notes", ())
    return BackendHandle(
        name="mlx",
        counter=loaded,
        backend=loaded,
        model=str(facts.get("model") or getattr(loaded, "model_id", None) or model or "default"),
        model_revision=_setting(facts.get("modelRevision", getattr(loaded, "revision", None))),
        token_unit="model tokens",
        sampling=str(facts.get("sampling", "greedy")) + ", temperature 0",
        prefix_cache=_setting(facts.get("prefixCache", getattr(loaded, "prefix_cache", None))),
        constrained_decisions=_setting(
            facts.get("constrainedDecisions", getattr(loaded, "constrained", None))
        ),
        close=close if callable(close) else None,
        notes=tuple(str(n) for n in notes) if isinstance(notes, tuple | list) else (),
        single_worker=MLX_SINGLE_WORKER,
    )


def openai_backend(
    base_urls: tuple[str, ...],
    model: str,
    tokenizer_dir: str | None = None,
    server_kind: str | None = None,
    constrained: bool | None = None,
) -> BackendHandle:
    """Connect to every server (each must serve ``model``); prompts are rendered and counted
    with the local tokenizer of ``tokenizer_dir`` (or of ``model`` itself, see
    :func:`picocontext.models.openai_backend.resolve_tokenizer_dir`)."""
    try:
        from picocontext.models import OpenAIBackend, RemoteAccounting
    except ImportError as exc:
        raise BackendSetupError(f"the openai backend cannot be imported ({exc})") from None
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
    first = backends[0].describe()

    def run_notes() -> tuple[str, ...]:
        total = RemoteAccounting()
        for backend in backends:
            total = total.merge(backend.accounting())
        return total.notes()

    return BackendHandle(
        name="openai",
        counter=backends[0],
        backend=backends[0],
        model=model,
        model_revision="unknown (served remotely)",
        token_unit=f"model tokens (local tokenizer: {first['tokenizerDir']})",
        sampling="greedy, temperature 0 (on the server)",
        prefix_cache=str(first["prefixCache"]),
        constrained_decisions=str(first["constrainedDecisions"]),
        notes=(
            f"servers: {', '.join(b.base_url for b in backends)} ({first['serverKind']})",
            f"prompts sent as {first['promptsSentAs']}, counted locally",
        ),
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
) -> BackendHandle:
    """``deterministic`` (model settings must be absent), ``mlx``, or ``openai`` (needs
    ``base_urls`` and ``model``)."""
    if name == "deterministic":
        if model is not None or prefix_cache is not None or constrained is not None:
            raise BackendSetupError(
                "--model, --prefix-cache and --constrained apply only to --backend mlx"
            )
        return deterministic_backend()
    if name == "mlx":
        return mlx_backend(model, prefix_cache, constrained, log)
    if name == "openai":
        if not base_urls or model is None:
            raise BackendSetupError("--backend openai needs --base-url URL and --model NAME")
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


def provenance(handle: BackendHandle) -> Provenance:
    return Provenance(
        backend=handle.name,
        model=handle.model,
        model_revision=handle.model_revision,
        token_unit=handle.token_unit,
        sampling=handle.sampling,
        prefix_cache=handle.prefix_cache,
        constrained_decisions=handle.constrained_decisions,
        picocontext_version=picocontext.__version__,
        source_revision=source_revision(),
        python_version=sys.version.split()[0],
        operating_system=platform.platform(),
        machine=platform.machine(),
        model_notes=handle.notes,
    )
