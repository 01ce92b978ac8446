"""The one place the playground obtains a model.

:func:`load_model` turns a :class:`ModelChoice` into a token counter and a backend. The
``scripted`` choice is the deterministic stand-in (instant, byte counts); every real choice is
delegated to :mod:`picocontext.models` (imported lazily, so the app starts without MLX). The
window, the smoke mode and the tests all go through here, and tests can inject their own
loader with the same signature.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from picocontext import Cancelled, CancelToken, ModelBackend, PicoContextError, TokenCounter
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


def _real_model(
    settings: ComparisonSettings, progress: Progress, cancel: CancelToken
) -> LoadedModel:
    """Resolve the files through :mod:`picocontext.models` (hub download with progress, the
    embedded wheel conversion, or a local directory) and load them with MLX.

    The choice made in the window is explicit, so it is honoured as chosen (no fallback to
    another model, and ``PICOCONTEXT_MODEL_DIR`` only matters for the directory choice)."""
    try:
        from picocontext.models import registry
        from picocontext.models.mlx_backend import MLXModel
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
            spec = registry.MODELS[settings.model.value]
            if spec.source == "embedded":
                from picocontext.models.embedded import ensure_embedded_model, get_spec

                title = get_spec(spec.name).title
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
                path = registry.fetch_hub_model(spec, progress=fraction)
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


def wrap_model(loaded: Any) -> LoadedModel:
    """Describe a loaded real model (anything that is both counter and backend)."""
    if not isinstance(loaded, TokenCounter) or not isinstance(loaded, ModelBackend):
        raise SetupError(f"{type(loaded).__name__} is not a token counter and backend")
    model_id = str(getattr(loaded, "model_id", type(loaded).__name__))
    revision = getattr(loaded, "revision", None)
    label = model_id + (f" @ {str(revision)[:12]}" if revision else "")
    details: list[str] = ["greedy sampling (temperature 0)"]
    seconds = getattr(loaded, "load_seconds", None)
    if isinstance(seconds, float):
        details.append(f"load time {seconds:.2f} s (excluded from run times)")
    describe = getattr(loaded, "describe", None)
    if callable(describe):
        info = describe()
        if isinstance(info, dict):
            skip = {"backend", "model", "modelRevision", "loadSeconds", "sampling"}
            details.extend(f"{k}: {v}" for k, v in info.items() if k not in skip and v != "")
    details.extend(str(note) for note in getattr(loaded, "notes", ()) or ())
    closer = getattr(loaded, "close", None)
    return LoadedModel(
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
