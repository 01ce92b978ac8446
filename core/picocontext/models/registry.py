"""Which model to run, on which engine, and where its files are: names, pinned revisions,
defaults, fallback.

Resolution order: an explicit directory argument, then an explicit model name, then
``PICOCONTEXT_MODEL_DIR``, then ``PICOCONTEXT_MODEL``, then the platform default. A model the
user asked for explicitly either loads or fails with a clear error; only the *default* falls
back (to the embedded model), and the resolution says so.

Engines: ``mlx`` (Metal on macOS, dense float32 on other CPUs) and ``llamacpp`` (the shipped
GGUF as is, in process). The default engine is MLX on Apple silicon and llama.cpp elsewhere
when its extra is installed (measured 4-10x MLX-f32 decode on a CPU, docs/models.md); without
the extra the default falls back to MLX and says so. ``PICOCONTEXT_ENGINE`` overrides it.
Defaults by engine, chosen by measurement: Qwen3-1.7B-4bit on Metal, Qwen2.5-Coder-1.5B on
llama.cpp, Qwen2.5-Coder-0.5B on MLX on a CPU.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from picocontext.errors import ModelError, UnknownModel

if TYPE_CHECKING:
    from typing import TypeAlias

    from picocontext.models.llamacpp_backend import LlamaCppModel
    from picocontext.models.mlx_backend import MLXModel

    LocalModel: TypeAlias = MLXModel | LlamaCppModel

MODEL_DIR_ENV = "PICOCONTEXT_MODEL_DIR"
MODEL_ENV = "PICOCONTEXT_MODEL"
ENGINE_ENV = "PICOCONTEXT_ENGINE"
ENGINES = ("mlx", "llamacpp")
Engine = Literal["mlx", "llamacpp"]
# The default model of the llama.cpp engine: the most capable embedded model whose main job
# fits its time limit on the 2-core machine we ship for (docs/models.md).
LLAMACPP_DEFAULT = "qwen2.5-coder-1.5b"

Progress = Callable[[float], None]


class ModelSpec(BaseModel):
    """A model picocontext knows by name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    source: Literal["hub", "embedded"]
    repo_id: str | None = None
    revision: str | None = None
    description: str
    approx_mb: int


QWEN3 = ModelSpec(
    name="qwen3-1.7b-4bit",
    source="hub",
    repo_id="mlx-community/Qwen3-1.7B-4bit",
    revision="3b1b1768f8f8cf8351c712464f906e86c2b8269e",
    description="Qwen3 1.7B, 4-bit MLX conversion (Apache-2.0), the reference's pinned model",
    approx_mb=968,
)


def _embedded_specs() -> tuple[ModelSpec, ...]:
    """Every embedded model (see :mod:`picocontext.models.embedded`) under its own name."""
    from picocontext.models.embedded import SPECS

    return tuple(
        ModelSpec(
            name=e.name,
            source="embedded",
            description=f"{e.description}, no hub",
            approx_mb=round(e.download_bytes / 1e6),
        )
        for e in SPECS.values()
    )


EMBEDDED = _embedded_specs()
SMOLLM2 = next(spec for spec in EMBEDDED if spec.name == "smollm2-135m")


def _default_embedded() -> ModelSpec:
    from picocontext.models.embedded import DEFAULT_EMBEDDED

    return next(spec for spec in EMBEDDED if spec.name == DEFAULT_EMBEDDED)


# The embedded model chosen by measurement (docs/models.md): the Linux default and the model
# the default falls back to when the hub cannot be reached.
DEFAULT_EMBEDDED_SPEC = _default_embedded()
MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in (QWEN3, *EMBEDDED)}


class ResolvedModel(BaseModel):
    """A model directory ready for ``MLXModel.load`` plus what to tell the user."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path
    model_id: str
    revision: str | None = None
    requested: str | None = None
    notes: tuple[str, ...] = ()


def is_apple_silicon() -> bool:
    return sys.platform == "darwin" and platform.machine() == "arm64"


def default_engine() -> Engine:
    """``PICOCONTEXT_ENGINE``, else MLX on Apple silicon, llama.cpp elsewhere when its extra
    is installed, else MLX (:func:`engine_notes` says why)."""
    chosen = os.environ.get(ENGINE_ENV, "").strip()
    if chosen:
        return check_engine(chosen)
    if is_apple_silicon():
        return "mlx"
    from picocontext.models.llamacpp_backend import engine_available

    return "llamacpp" if engine_available() else "mlx"


def check_engine(name: str) -> Engine:
    if name == "mlx":
        return "mlx"
    if name == "llamacpp":
        return "llamacpp"
    raise ModelError(f"Unknown engine {name!r}; choose one of {', '.join(ENGINES)}")


def _engine_for(name: str | None, model_dir: str | Path | None) -> Engine:
    """The engine a directory's layout needs (``model.gguf``: llama.cpp, ``config.json`` with
    weights: MLX), else the default engine."""
    directory = model_dir or (None if name else os.environ.get(MODEL_DIR_ENV))
    found = directory_engine(directory) if directory else None
    return found or default_engine()


def directory_engine(directory: str | Path) -> Engine | None:
    """The engine a model directory's layout needs: ``model.gguf`` llama.cpp, ``config.json``
    (without a GGUF) MLX, anything else ``None``."""
    from picocontext.models.gguf import GGUF_FILE

    path = Path(directory).expanduser()
    if (path / GGUF_FILE).is_file():
        return "llamacpp"
    if (path / "config.json").is_file():
        return "mlx"
    return None


def engine_notes(engine: Engine) -> tuple[str, ...]:
    """Why the default engine is what it is, when that is a fallback worth telling."""
    if engine == "mlx" and not is_apple_silicon() and not os.environ.get(ENGINE_ENV):
        from picocontext.models.llamacpp_backend import INSTALL_HINT

        return (f"Using MLX on the CPU: {INSTALL_HINT} for 4-10x faster decoding.",)
    return ()


def default_model_name(engine: Engine | None = None) -> str:
    """The default model of ``engine`` (default: :func:`default_engine`)."""
    engine = engine or default_engine()
    if engine == "llamacpp":
        return LLAMACPP_DEFAULT
    return QWEN3.name if is_apple_silicon() else DEFAULT_EMBEDDED_SPEC.name


def hub_cache_dir() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _hub_help(spec: ModelSpec, reason: str) -> str:
    return (
        f"The model {spec.name} ({spec.repo_id} at revision {spec.revision}) is not in the "
        f"Hugging Face cache at {hub_cache_dir()} and could not be downloaded ({reason}). "
        f"Connect to the hub once, or pass a local MLX model directory with --model-dir / "
        f"{MODEL_DIR_ENV}, or use the embedded model ({DEFAULT_EMBEDDED_SPEC.name})."
    )


def fetch_hub_model(
    spec: ModelSpec, progress: Progress | None = None, offline: bool | None = None
) -> Path:
    """The pinned snapshot from the hub cache, downloading it (with progress) if missing."""
    if spec.repo_id is None:
        raise ModelError(f"{spec.name} is not a hub model")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError as exc:
        raise ModelError(f"{spec.name} needs huggingface_hub; install picocontext[mlx]") from exc
    try:
        return Path(
            str(snapshot_download(spec.repo_id, revision=spec.revision, local_files_only=True))
        )
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError):
        pass
    from huggingface_hub import constants

    if offline if offline is not None else constants.HF_HUB_OFFLINE:
        raise ModelError(_hub_help(spec, "offline mode is on"))
    from picocontext.models.netprobe import hub_unreachable_reason

    unreachable = hub_unreachable_reason()  # seconds, not huggingface_hub's retries
    if unreachable:
        raise ModelError(_hub_help(spec, unreachable))
    try:
        path = snapshot_download(
            spec.repo_id,
            revision=spec.revision,
            tqdm_class=_progress_class(progress) if progress else None,
        )
    except Exception as exc:  # network, auth, disk: one actionable message
        raise ModelError(_hub_help(spec, f"{type(exc).__name__}: {exc}")) from exc
    if progress:
        progress(1.0)
    return Path(str(path))


def _progress_class(progress: Progress) -> Any:
    """A tqdm subclass that reports the byte fraction of the whole snapshot to ``progress``."""
    import importlib

    tqdm: Any = importlib.import_module("tqdm.auto").tqdm

    class Reporter(tqdm):  # type: ignore[misc]
        def update(self, n: float | None = 1) -> Any:
            result = super().update(n)
            total = self.total or 0
            if total and self.unit == "B":
                progress(min(1.0, float(self.n) / float(total)))
            return result

    return Reporter


def _embedded(
    log: Callable[[str], None] | None,
    name: str = DEFAULT_EMBEDDED_SPEC.name,
    engine: Engine = "mlx",
) -> ResolvedModel:
    from picocontext.models.embedded import ensure_embedded_gguf, ensure_embedded_model, get_spec

    spec = get_spec(name)
    if engine == "llamacpp":
        path = ensure_embedded_gguf(spec, log=log)
    else:
        path = ensure_embedded_model(name, log=log)
    # The pinned wheels and GGUF digest are the honest "revision" for provenance.
    return ResolvedModel(path=path, model_id=spec.title, revision=spec.revision, requested=name)


def resolve_model(
    name: str | None = None,
    *,
    model_dir: str | Path | None = None,
    progress: Progress | None = None,
    offline: bool | None = None,
    log: Callable[[str], None] | None = None,
    engine: Engine = "mlx",
) -> ResolvedModel:
    """Find (and if needed fetch) the model directory for ``engine``; see the module
    docstring for order."""
    # An explicit name beats the directory from the environment; an explicit directory wins.
    directory = model_dir or (None if name else os.environ.get(MODEL_DIR_ENV))
    if directory:
        path = Path(directory).expanduser()
        if path.exists() and not path.is_dir():
            raise UnknownModel(f"{path} is not a directory; --model-dir names a model directory.")
        if engine == "llamacpp":
            return _llamacpp_dir(path)
        if not (path / "config.json").is_file():
            raise UnknownModel(
                f"{path} is not an MLX model directory (no config.json). Point --model-dir / "
                f"{MODEL_DIR_ENV} at a directory with config.json, weights and tokenizer files."
            )
        return ResolvedModel(path=path, model_id=path.name, requested=str(path))
    explicit = name or os.environ.get(MODEL_ENV)
    chosen = explicit or default_model_name(engine)
    spec = MODELS.get(chosen)
    given = Path(chosen).expanduser()
    known = ", ".join(sorted(MODELS))
    if spec is None and given.exists():
        kind = "directory, given as a model name" if given.is_dir() else "file, not a model"
        raise UnknownModel(
            f"{chosen!r} is a {kind} — give a known model name ({known}) or a model directory "
            "where the command takes one"
        )
    if spec is None:
        raise UnknownModel(
            f"unknown model {chosen!r} — use a known model name ({known}) or the path of a "
            "model directory that exists"
        )
    if spec.source == "embedded":
        return _embedded(log, spec.name, engine)
    if engine == "llamacpp":
        gguf_names = ", ".join(n for n, m in sorted(MODELS.items()) if m.source == "embedded")
        raise ModelError(
            f"{spec.name} is an MLX model; the llama.cpp engine runs GGUF models ({gguf_names}) "
            "or a directory with model.gguf (--model-dir). Use --backend mlx for this one."
        )
    try:
        path = fetch_hub_model(spec, progress=progress, offline=offline)
    except ModelError as exc:
        if explicit:
            raise
        fallback = _embedded(log)
        note = (
            f"The default model {spec.name} could not be had ({exc.message}) Using the embedded "
            f"{DEFAULT_EMBEDDED_SPEC.name} instead."
        )
        return fallback.model_copy(update={"notes": (note,)})
    return ResolvedModel(
        path=path, model_id=spec.repo_id or spec.name, revision=spec.revision, requested=spec.name
    )


def _llamacpp_dir(path: Path) -> ResolvedModel:
    from picocontext.models.gguf import GGUF_FILE

    if not (path / GGUF_FILE).is_file() or not (path / "tokenizer_config.json").is_file():
        raise UnknownModel(
            f"{path} is not a llama.cpp model directory: it needs {GGUF_FILE} beside "
            "tokenizer.json, tokenizer_config.json and config.json (the layout picocontext "
            "installs embedded models in)."
        )
    return ResolvedModel(path=path, model_id=path.name, requested=str(path))


def is_embedded(resolved: ResolvedModel) -> bool:
    """Whether ``resolved`` is one of the embedded models (by the name it was resolved as)."""
    spec = MODELS.get(resolved.requested or "")
    return spec is not None and spec.source == "embedded"


def load_model(
    name: str | None = None,
    *,
    model_dir: str | Path | None = None,
    progress: Progress | None = None,
    prefix_cache: bool = True,
    constrained: bool | None = None,
    log: Callable[[str], None] | None = None,
    engine: str | None = None,
    kv_shift: bool = False,
) -> LocalModel:
    """Resolve and load the model on ``engine`` (``None``: :func:`default_engine`); its
    ``notes`` (and ``describe()["notes"]``) carry any fallback message.
    :func:`picocontext.models.handle_for` turns it into a report handle.
    ``constrained=None`` picks the default decoding: constrained for embedded models (small
    models need it), free otherwise. ``kv_shift`` (llama.cpp only, approximate): see
    :class:`~picocontext.models.llamacpp_backend.LlamaCppModel`."""
    chosen: Engine = check_engine(engine) if engine is not None else _engine_for(name, model_dir)
    if kv_shift and chosen != "llamacpp":
        raise ModelError("KV shift is a llama.cpp setting; the MLX engine has no moved cache")
    resolved = resolve_model(name, model_dir=model_dir, progress=progress, log=log, engine=chosen)
    decoding = is_embedded(resolved) if constrained is None else constrained
    model: LocalModel
    if chosen == "llamacpp":
        from picocontext.models.llamacpp_backend import LlamaCppModel

        model = LlamaCppModel.load(
            resolved.path,
            model_id=resolved.model_id,
            revision=resolved.revision,
            prefix_cache=prefix_cache,
            constrained=decoding,
            kv_shift=kv_shift,
        )
    else:
        from picocontext.models.mlx_backend import MLXModel

        model = MLXModel.load(
            resolved.path,
            model_id=resolved.model_id,
            revision=resolved.revision,
            prefix_cache=prefix_cache,
            constrained=decoding,
        )
    model.notes = resolved.notes + (engine_notes(chosen) if engine is None else ())
    return model
