"""The one place the playground obtains a model.

:func:`load_model` turns a :class:`ModelChoice` into a :class:`picocontext.models.ModelHandle`
(a token counter, a backend and what reports say about them). The
``scripted`` choice is the deterministic stand-in (instant, byte counts); every real choice is
delegated to :mod:`picocontext.models` (imported lazily, so the app starts without MLX). The
window, the smoke mode and the tests all go through here, and tests can inject their own
loader with the same signature.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from picocontext import Cancelled, CancelToken, ModelError, PicoContextError
from picocontext.models import BYTE_UNIT, TOKEN_UNIT, ModelHandle, handle_for
from picocontext_playground.errors import SetupError
from picocontext_playground.settings import ComparisonSettings, ModelChoice

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
    """Resolve the files through :mod:`picocontext.models` (hub download with progress, the
    embedded wheel conversion, or a local directory) and load them with MLX.

    The choice made in the window is explicit, so it is honoured as chosen (no fallback to
    another model, and ``PICOCONTEXT_MODEL_DIR`` only matters for the directory choice)."""
    try:
        from picocontext.models import MODELS, MLXModel, fetch_hub_model
    except ImportError as exc:
        raise SetupError(
            f"the mlx extra is not installed ({exc}); install picocontext[mlx]"
        ) from None

    def fraction(value: float) -> None:
        progress(f"Downloading {settings.model.value}: {value:.0%}", value)

    def log(message: str) -> None:
        progress(message[:1].upper() + message[1:], None)

    revision: str | None = None
    try:
        if settings.model is ModelChoice.DIRECTORY:
            assert settings.model_dir is not None
            path = Path(settings.model_dir).expanduser()
            if not (path / "config.json").is_file():
                raise SetupError(
                    f"{path} is not an MLX model directory (no config.json); choose a folder "
                    "written by mlx_lm.convert or by picocontext's model import"
                )
            model_id = path.name
        else:
            spec = MODELS[settings.model.value]
            if spec.source == "embedded":
                from picocontext.models import embedded_spec, ensure_embedded_model

                title = embedded_spec(spec.name).title
                progress(f"Preparing the embedded {title}…", None)
                path = ensure_embedded_model(
                    spec.name,
                    log=log,
                    progress=lambda stage, done: progress(
                        f"{stage.capitalize()}: {done:.0%}", done
                    ),
                )
                model_id = title
            else:
                progress(f"Looking for {spec.repo_id} (about {spec.approx_mb} MB)…", None)
                path = fetch_hub_model(spec, progress=fraction)
                model_id = spec.repo_id or spec.name
                revision = spec.revision
        cancel.check()
        progress(f"Loading {model_id} with MLX…", None)
        loaded = MLXModel.load(
            path,
            model_id=model_id,
            revision=revision,
            prefix_cache=settings.prefix_cache,
            constrained=settings.constrained,
        )
    except ImportError as exc:
        raise SetupError(
            f"the mlx extra is not installed ({exc}); install picocontext[mlx]"
        ) from None
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
        self._key: tuple[ModelChoice, Path | None] | None = None
        self._model: LoadedModel | None = None

    def get(
        self, settings: ComparisonSettings, progress: Progress, cancel: CancelToken
    ) -> LoadedModel:
        key = (settings.model, settings.model_dir)
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
