"""One handle for a loaded model: the counter/backend pair and what a report says about it.

The evaluation, the playground and the CLIs all hold a model through :class:`ModelHandle`;
:func:`handle_for` builds one from any loaded real model (``load_model`` returns an
:class:`~picocontext.models.mlx_backend.MLXModel`) out of its typed :meth:`describe`, and
byte-counting stand-ins build theirs directly with a ``budget_scale`` (about four UTF-8 bytes per
model token), applied everywhere through :meth:`ModelHandle.scaled`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict, runtime_checkable

from picocontext.backend import ModelBackend, TokenCounter
from picocontext.errors import ModelError

BYTE_UNIT = "UTF-8 bytes (not model tokens)"
TOKEN_UNIT = "model tokens"
NOT_APPLICABLE = "not applicable"
MLX_SINGLE_WORKER = (
    "the in-process backends (mlx, llamacpp) hold one model with one KV cache, so they run one "
    "episode at a time; for concurrent episodes serve the model (mlx_lm.server, llama-server) "
    "and use --backend openai (docs/remote.md)"
)


class ModelDescription(TypedDict, total=False):
    """What a loaded model says about itself (``describe()``), as reports record it."""

    backend: str
    model: str
    modelRevision: str | None
    path: str
    sampling: str
    prefixCache: bool
    constrainedDecisions: bool
    decoding: str
    blas: str
    engine: str
    threads: int
    contextTokens: int
    kvShift: bool
    loadSeconds: float
    notes: list[str]


@runtime_checkable
class DescribedModel(Protocol):
    """A loaded real model (also a token counter and a backend) that describes itself."""

    def describe(self) -> ModelDescription: ...

    def close(self) -> None: ...


@runtime_checkable
class DecodingOptions(Protocol):
    """Decoding switches a real model can change between runs."""

    prefix_cache: bool
    constrained: bool


def _no_close() -> None:
    return None


def switch(value: bool | None) -> str:
    """A switch as reports spell it."""
    return NOT_APPLICABLE if value is None else ("on" if value else "off")


@dataclass(slots=True)
class ModelHandle:
    """A ready counter/backend pair and what reports must say about it.

    ``budget_scale`` multiplies every token budget (:meth:`scaled`); ``model`` is the loaded
    real model, if any (``None`` for stand-ins); ``close`` releases it. ``pool`` lists every
    counter/backend pair independent episodes may be spread over (several servers; empty =
    just ``(counter, backend)``), ``single_worker`` says why episodes cannot run concurrently
    on this model (``None`` = they can), and ``run_notes`` gives report lines once a run is
    over (a remote backend's token checks).
    """

    counter: TokenCounter
    backend: ModelBackend
    model_id: str
    label: str = ""
    token_unit: str = TOKEN_UNIT
    kind: str = "mlx"
    revision: str = "unknown"
    sampling: str = "greedy, temperature 0"
    prefix_cache: str = NOT_APPLICABLE
    constrained_decisions: str = NOT_APPLICABLE
    decoding: str = NOT_APPLICABLE
    budget_scale: int = 1
    details: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    close: Callable[[], None] = field(default=_no_close)
    raw: Any = None
    pool: tuple[tuple[TokenCounter, ModelBackend], ...] = ()
    single_worker: str | None = None
    run_notes: Callable[[], tuple[str, ...]] | None = None

    def caption(self) -> str:
        return f"{self.label or self.model_id} · {self.token_unit}"

    def scaled(self, tokens: int) -> int:
        """A token amount in this handle's unit."""
        return tokens * self.budget_scale

    def apply_options(self, prefix_cache: bool, constrained: bool) -> None:
        """Push decoding options into the real model (stand-ins have none)."""
        if isinstance(self.raw, DecodingOptions):
            self.raw.prefix_cache = prefix_cache
            self.raw.constrained = constrained
            self.prefix_cache, self.constrained_decisions = (
                switch(prefix_cache),
                switch(constrained),
            )
            self.decoding = "constrained" if constrained else "free"


_DETAIL_SKIP = {"backend", "model", "modelRevision", "loadSeconds", "sampling"}


def _details(info: ModelDescription) -> tuple[str, ...]:
    details = ["greedy sampling (temperature 0)"]
    seconds = info.get("loadSeconds")
    if isinstance(seconds, float):
        details.append(f"load time {seconds:.2f} s (excluded from run times)")
    details.extend(
        f"{key}: {value}" for key, value in info.items() if key not in _DETAIL_SKIP and value != ""
    )
    details.extend(str(note) for note in info.get("notes", ()))
    return tuple(details)


def _decoding(info: ModelDescription) -> str:
    """``constrained``/``free`` as the model describes itself (else from its switch)."""
    named = info.get("decoding")
    if isinstance(named, str):
        return named
    constrained = info.get("constrainedDecisions")
    return "unknown" if constrained is None else ("constrained" if constrained else "free")


def handle_for(loaded: object, requested: str | None = None) -> ModelHandle:
    """The handle of a loaded real model, from its :meth:`describe`; ``requested`` names the
    model when the description does not."""
    if not isinstance(loaded, TokenCounter) or not isinstance(loaded, ModelBackend):
        raise ModelError(f"{type(loaded).__name__} is not a token counter and backend")
    if not isinstance(loaded, DescribedModel):
        raise ModelError(f"{type(loaded).__name__} cannot describe itself (no describe/close)")
    info = loaded.describe()
    model_id = str(info.get("model") or requested or "default")
    revision = info.get("modelRevision")
    kind = str(info.get("backend", "mlx"))
    return ModelHandle(
        counter=loaded,
        backend=loaded,
        model_id=model_id,
        label=model_id + (f" @ {revision[:12]}" if revision else ""),
        kind=kind,
        revision="unknown" if revision is None else str(revision),
        sampling=str(info.get("sampling", "greedy")) + ", temperature 0",
        # KV shift changes what the cache computes, so reports and resumable journals
        # keep it apart from a plain prefix cache
        prefix_cache=switch(info.get("prefixCache"))
        + (" + KV shift" if info.get("kvShift") else ""),
        constrained_decisions=switch(info.get("constrainedDecisions")),
        decoding=_decoding(info),
        details=_details(info),
        notes=tuple(str(n) for n in info.get("notes", ())),
        close=loaded.close,
        raw=loaded,
        single_worker=MLX_SINGLE_WORKER if kind in ("mlx", "llamacpp") else None,
    )
