"""The settings half both in-process engines share (MLX and llama.cpp).

Which model and revision, whether the KV prefix cache is kept across calls, and whether
protocol actions are decoded constrained or free: each is written into every prepared
prompt's notes and into ``describe()``, so a report always says what produced it. One class
keeps the two engines from drifting apart in how they say so.
"""

from __future__ import annotations

from pathlib import Path

from picocontext.models.chatformat import FormatBacked
from picocontext.models.handle import ModelDescription


class InProcessModel(FormatBacked):
    """An in-process model's settings (subclasses call :meth:`_init_settings` once they
    have a ``_format``; it writes the settings into the format's notes)."""

    # Notes naming the engine, between the model and its cache and decoding settings.
    engine_notes: tuple[str, ...] = ()

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
