"""The store protocol every session persists through, and the in-memory store.

A store keeps the preserved transcript, every committed working revision and tombstones of
deleted ids, so a session reopens exactly where it was. ``save`` is atomic: it either commits
the whole candidate or raises :class:`~picocontext.errors.StorageError` and changes nothing.
"""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable

from picocontext.records import Scope, Snapshot
from picocontext.working import WorkingContext


@runtime_checkable
class ContextStore(Protocol):
    def save(self, context: WorkingContext) -> None:
        """Commit ``context`` (both views) atomically or raise StorageError."""
        ...

    def load(self, scope: Scope) -> WorkingContext | None:
        """The last committed state of ``scope``, or None if it was never saved."""
        ...


class InMemoryStore:
    """Keeps the last saved state per scope (branches stay separate). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[Scope, WorkingContext] = {}
        self._history: dict[Scope, list[Snapshot]] = {}

    def save(self, context: WorkingContext) -> None:
        with self._lock:
            scope = context.snapshot.scope
            self._states[scope] = context
            self._history.setdefault(scope, []).append(context.snapshot)

    def load(self, scope: Scope) -> WorkingContext | None:
        with self._lock:
            return self._states.get(scope)

    def revisions(self, scope: Scope) -> list[Snapshot]:
        with self._lock:
            return list(self._history.get(scope, []))
