"""The one place the playground obtains a model.

:func:`load_model` turns a :class:`ModelChoice` into a token counter and a backend. The
``scripted`` choice is the deterministic stand-in (instant, byte counts); every real choice is
delegated to :mod:`picocontext.models` (imported lazily, so the app starts without MLX). The
window, the smoke mode and the tests all go through here, and tests can inject their own
loader with the same signature.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from picocontext import CancelToken, ModelBackend, PicoContextError, TokenCounter
from picocontext_playground.errors import SetupError
from picocontext_playground.settings import ComparisonSettings, ModelChoice

# label, fraction done in 0..1 (``None`` when the amount of work is unknown)
Progress = Callable[[str, float | None], None]

BYTE_UNIT = "UTF-8 bytes (not model tokens)"
TOKEN_UNIT = "model tokens"


def _no_close() -> None:
    return None


@dataclass(slots=True)
class LoadedModel:
    """A ready counter/backend pair and what reports must say about it.

    ``budget_scale`` multiplies every token budget: byte-counting stand-ins see about four
    bytes per model token, so their budgets are scaled to keep the same pressure.
    """

    counter: TokenCounter
    backend: ModelBackend
    model_id: str
    label: str
    token_unit: str
    budget_scale: int = 1
    details: tuple[str, ...] = ()
    close: Callable[[], None] = field(default=_no_close)
    raw: Any = None

    def apply_options(self, settings: ComparisonSettings) -> None:
        """Push decoding options (constrained decisions, prefix cache) into a real model."""
        for name, value in (
            ("constrained", settings.constrained),
            ("prefix_cache", settings.prefix_cache),
        ):
            target = self.raw
            if target is not None and hasattr(target, name):
                setattr(target, name, value)

    def caption(self) -> str:
        return f"{self.label} · {self.token_unit}"


ModelLoader = Callable[[ComparisonSettings, Progress, CancelToken], LoadedModel]


def _ignore(label: str, fraction: float | None) -> None:
    return None


def scripted_model(delay: float = 0.0) -> LoadedModel:
    """The deterministic stand-in; ``delay`` seconds per generation for demos and Stop tests."""
    from picocontext.models import ByteCounter
    from picocontext_diagnostics import order_lookup
    from picocontext_playground.scripted import SCRIPTED_MODEL_ID, ScriptedPlaygroundBackend

    backend = ScriptedPlaygroundBackend(order_lookup(), delay=delay)
    return LoadedModel(
        counter=ByteCounter(),
        backend=backend,
        model_id=SCRIPTED_MODEL_ID,
        label="Scripted deterministic model (rules, no weights)",
        token_unit=BYTE_UNIT,
        budget_scale=4,
        details=(
            "Decisions and answers follow fixed rules; counts are UTF-8 bytes.",
            "Budgets are scaled x4 (about four bytes per model token).",
        ),
    )


def _call_with_supported(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` passing only the keyword arguments its signature accepts."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(*args)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(*args, **kwargs)
    return fn(*args, **{k: v for k, v in kwargs.items() if k in params})


def _real_model(
    settings: ComparisonSettings, progress: Progress, cancel: CancelToken
) -> LoadedModel:
    try:
        import picocontext.models as models
    except ImportError as exc:  # pragma: no cover - the core always ships models
        raise SetupError(f"picocontext.models cannot be imported: {exc}") from None
    target: str = (
        str(settings.model_dir) if settings.model is ModelChoice.DIRECTORY else settings.model.value
    )
    if settings.model is ModelChoice.DIRECTORY:
        assert settings.model_dir is not None
        if not Path(settings.model_dir).is_dir():
            raise SetupError(f"model directory {settings.model_dir} does not exist")
    loader = getattr(models, "load_model", None)
    try:
        if loader is not None:
            loaded = _call_with_supported(
                loader,
                target,
                progress=progress,
                cancel=cancel,
                prefix_cache=settings.prefix_cache,
                constrained=settings.constrained,
            )
        elif settings.model is ModelChoice.DIRECTORY:
            from picocontext.models.mlx_backend import MLXModel

            progress(f"Loading {target}…", None)
            loaded = MLXModel.load(
                target, prefix_cache=settings.prefix_cache, constrained=settings.constrained
            )
        else:
            raise SetupError(
                f"this build of picocontext cannot fetch {settings.model.value} yet "
                "(picocontext.models.load_model is missing); choose a local MLX directory or "
                "the scripted model"
            )
    except ImportError as exc:
        raise SetupError(
            f"the mlx extra is not installed ({exc}); install picocontext[mlx]"
        ) from None
    except SetupError:
        raise
    except PicoContextError as exc:
        if type(exc).__name__ == "Cancelled":
            raise
        raise SetupError(exc.message) from None
    cancel.check()
    if not isinstance(loaded, TokenCounter) or not isinstance(loaded, ModelBackend):
        raise SetupError(f"{type(loaded).__name__} is not a token counter and backend")
    model_id = str(getattr(loaded, "model_id", target))
    revision = getattr(loaded, "revision", None)
    label = model_id + (f" @ {str(revision)[:12]}" if revision else "")
    closer = getattr(loaded, "close", None)
    details: list[str] = ["greedy sampling (temperature 0)"]
    describe = getattr(loaded, "describe", None)
    if callable(describe):
        info = describe()
        if isinstance(info, dict):
            details.extend(f"{k}: {v}" for k, v in info.items() if v not in (None, ""))
    result = LoadedModel(
        counter=loaded,
        backend=loaded,
        model_id=model_id,
        label=label,
        token_unit=TOKEN_UNIT,
        budget_scale=1,
        details=tuple(details),
        close=closer if callable(closer) else _no_close,
        raw=loaded,
    )
    result.apply_options(settings)
    return result


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
                self._model.apply_options(settings)
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
