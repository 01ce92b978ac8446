"""Durable sessions: a store protocol, an in-memory store and a SQLite store.

Modules: :mod:`.store` (the ``ContextStore`` protocol and ``InMemoryStore``),
:mod:`.sqlite_store` (``SQLiteStore``), :mod:`.rows` (the row codec: every value read from
the file is checked before it is used, and the delta between two revisions) and
:mod:`.migrations` (the numbered schema changes).

A store keeps the preserved transcript, every committed working revision and tombstones of
deleted ids, so a session reopens exactly where it was. ``save`` is atomic: it either commits
the whole candidate or raises :class:`StorageError` and changes nothing. The session publishes a
revision only after ``save`` returned. How the SQLite store keeps revisions by change
(transcript, delta, checkpoint and full rows) and validates every row it reads is said once, in
:mod:`.sqlite_store`.
"""

from __future__ import annotations

from picocontext.persistence.migrations import MIGRATIONS, SCHEMA_VERSION
from picocontext.persistence.sqlite_store import CHECKPOINT_EVERY, SQLiteStore
from picocontext.persistence.store import ContextStore, InMemoryStore

__all__ = [
    "CHECKPOINT_EVERY",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "ContextStore",
    "InMemoryStore",
    "SQLiteStore",
]
