"""The settings half both in-process engines share (MLX and llama.cpp).

Which model and revision, whether the KV prefix cache is kept across calls, and whether
protocol actions are decoded constrained or free: each is written into every prepared
prompt's notes and into ``describe()``, so a report always says what produced it. One class
keeps the two engines from drifting apart in how they say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picocontext.backend import ChatMessage, ModelResponse
from picocontext.models.chatformat import FormatBacked
from picocontext.models.handle import ModelDescription
from picocontext.models.progress import ProgressListener

# Tokens the warm-up generation may decode: one is enough to run every layer once.
WARM_UP_TOKENS = 2


class InProcessModel(FormatBacked):
    """An in-process model's settings (subclasses call :meth:`_init_settings` once they
    have a ``_format``; it writes the settings into the format's notes)."""

    # Notes naming the engine, between the model and its cache and decoding settings.
    engine_notes: tuple[str, ...] = ()
    # Who hears the streamed progress of each call (the playground's live line), if anyone.
    progress_listener: ProgressListener | None = None

    def _init_settings(
        self,
        path: Path,
        *,
        model_id: str,
        revision: str | None,
        prefix_cache: bool,
        constrained: bool,
        load_seconds: float,
    ) -> None:
        self._path = path
        self._model_id = model_id
        self._revision = revision
        self._prefix_cache = prefix_cache
        self._constrained = constrained
        self.load_seconds = load_seconds
        # Messages from model resolution (for example a fallback to the embedded model).
        self.notes: tuple[str, ...] = ()
        self._update_notes()

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def revision(self) -> str | None:
        return self._revision

    @property
    def path(self) -> Path:
        return self._path

    @property
    def prefix_cache(self) -> bool:
        return self._prefix_cache

    @prefix_cache.setter
    def prefix_cache(self, on: bool) -> None:
        self._prefix_cache = on
        self._prefix_cache_changed(on)
        self._update_notes()

    def _prefix_cache_changed(self, on: bool) -> None:
        """Hook for an engine that must act when the cache is switched (MLX drops its kept
        caches when it is turned off)."""

    @property
    def constrained(self) -> bool:
        return self._constrained

    @constrained.setter
    def constrained(self, on: bool) -> None:
        self._constrained = on
        self._update_notes()

    @property
    def decoding(self) -> str:
        """``constrained`` or ``free``: how protocol actions are decoded."""
        return "constrained" if self._constrained else "free"

    def extra_notes(self) -> tuple[str, ...]:
        """Engine settings noted after the decoding (none by default)."""
        return ()

    def settings_notes(self) -> tuple[str, ...]:
        return (
            f"model: {self._model_id}" + (f"@{self._revision}" if self._revision else ""),
            *self.engine_notes,
            f"prefix cache: {'on' if self._prefix_cache else 'off'}",
            f"decoding: {self.decoding}",
            *self.extra_notes(),
        )

    # -- what each engine provides (MLXModel, LlamaCppModel) --------------------------------
    def chat(self, messages: Sequence[ChatMessage], max_tokens: int) -> ModelResponse:
        raise NotImplementedError

    def decision_grammar(self) -> Any:
        raise NotImplementedError

    def reset_cache(self) -> None:
        raise NotImplementedError

    def warm_up(self) -> None:
        """Pay the engine's one-time costs now rather than in the first call that needs them:
        the grammar state constrained decoding builds once (its index of the vocabulary,
        about 2 s for Qwen's) and a first short generation (weights paged in, buffers
        allocated). A comparison calls it before its first policy, so that column is not
        charged for them (on the main job they were about 2.5 s of append-only's step 1).
        The cache is cold afterwards, and no progress is reported for it: the window's live
        line would otherwise show it as the first policy's step 1 ("generated 2 of at most 2
        tokens")."""
        if self._constrained:
            self.decision_grammar()
        listener, self.progress_listener = self.progress_listener, None
        try:
            self.chat([ChatMessage(role="user", content="Hi")], WARM_UP_TOKENS)
        finally:
            self.progress_listener = listener
        self.reset_cache()

    def _update_notes(self) -> None:
        self._format.set_settings_notes(self.settings_notes())

    def _description(self, backend: str, engine: ModelDescription) -> ModelDescription:
        """Provenance for reports: the shared settings around ``engine``'s own fields."""
        shared: ModelDescription = {
            "backend": backend,
            "model": self._model_id,
            "modelRevision": self._revision,
            "path": str(self._path),
            "sampling": "greedy",
            "prefixCache": self._prefix_cache,
            "decoding": self.decoding,
            "constrainedDecisions": self._constrained,
        }
        return {
            **shared,
            **engine,
            "loadSeconds": round(self.load_seconds, 3),
            "notes": list(self.notes),
        }
