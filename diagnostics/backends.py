"""Backends the evaluation can run on, and the provenance each one reports.

``deterministic`` is the notebook backend with the core's UTF-8 byte counter: no model, no
downloads, exact and repeatable. ``mlx`` resolves a real local model through
:mod:`picocontext.models`, imported only here and only when asked for, so the diagnostics work
without the ``mlx`` extra.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
BACKENDS = ("deterministic", "mlx")


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


def _describe(obj: Any, *names: str, default: str = "unknown") -> str:
    """The first attribute of ``obj`` among ``names`` that is set, as text."""
    for name in names:
        value = getattr(obj, name, None)
        if callable(value):
            continue
        if value is not None:
            return str(value)
    return default


def mlx_backend(model: str | None) -> BackendHandle:
    """Resolve ``model`` (a registry name, hub id or local directory; ``None`` = the default)
    into one object that is both token counter and backend."""
    try:
        import picocontext.models as models
    except ImportError as exc:  # pragma: no cover - the core always ships models
        raise BackendSetupError(f"picocontext.models cannot be imported: {exc}") from None
    resolve = getattr(models, "load_model", None)
    if resolve is None:
        raise BackendSetupError(
            "this picocontext has no MLX model loader (picocontext.models.load_model); "
            "use --backend deterministic"
        )
    try:
        loaded = resolve(model) if model is not None else resolve()
    except ImportError as exc:
        raise BackendSetupError(
            f"the mlx extra is not installed ({exc}); install picocontext[mlx]"
        ) from None
    except picocontext.PicoContextError as exc:
        raise BackendSetupError(exc.message) from None
    if not isinstance(loaded, TokenCounter) or not isinstance(loaded, ModelBackend):
        raise BackendSetupError(f"{type(loaded).__name__} is not a token counter and backend")
    return BackendHandle(
        name="mlx",
        counter=loaded,
        backend=loaded,
        model=_describe(loaded, "model_id", "name", default=model or "default"),
        model_revision=_describe(loaded, "model_revision", "revision"),
        token_unit="model tokens",
        sampling=_describe(loaded, "sampling", default="greedy, temperature 0"),
        prefix_cache=_describe(loaded, "prefix_cache_description", "prefix_cache"),
        constrained_decisions=_describe(
            loaded, "constrained_decisions_description", "constrained_decisions"
        ),
    )


def resolve_backend(name: str, model: str | None = None) -> BackendHandle:
    """``deterministic`` (``model`` must be absent) or ``mlx``."""
    if name == "deterministic":
        if model is not None:
            raise BackendSetupError("--model applies only to --backend mlx")
        return deterministic_backend()
    if name == "mlx":
        return mlx_backend(model)
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
    )
