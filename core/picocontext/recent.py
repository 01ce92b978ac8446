"""The values of the last few objects, found by identity: for memos over frozen objects that are
expensive to hash or compare (a snapshot, a compiled manifest) and are handed around as the
same object while they are in use."""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class RecentByIdentity(Generic[K, V]):
    """At most ``size`` entries, newest first. A key is held strongly, so its ``id`` cannot be
    reused by another object while it is remembered; equal but distinct objects are distinct
    keys."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: list[tuple[K, V]] = []
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value remembered for ``key`` (which becomes the newest), or ``None``."""
        with self._lock:
            for i, (seen, value) in enumerate(self._entries):
                if seen is key:
                    self._entries.insert(0, self._entries.pop(i))
                    return value
        return None

    def put(self, key: K, value: V) -> None:
        """Remember ``value`` for ``key`` as the newest entry, dropping the oldest beyond size."""
        with self._lock:
            self._entries = [(k, v) for k, v in self._entries if k is not key]
            self._entries.insert(0, (key, value))
            del self._entries[self.size :]
