"""Durable sessions: a store protocol, an in-memory store and a SQLite store.

Modules: :mod:`.store` (the ``ContextStore`` protocol and ``InMemoryStore``),
:mod:`.sqlite_store` (``SQLiteStore``), :mod:`.rows` (the row codec: every value read from
the file is checked before it is used, and the delta between two revisions) and
:mod:`.migrations` (the numbered schema changes).

A store keeps the preserved transcript, every committed working revision and tombstones of
deleted ids, so a session reopens exactly where it was. ``save`` is atomic: it either commits
the whole candidate or raises :class:`StorageError` and changes nothing. The session publishes a
revision only after ``save`` returned.

The SQLite store keeps revisions *by change*, so a save costs the size of its change, not of
the session:

- the transcript is append-only, one row per record;
- a **delta** row records one revision's transaction against the revision before it: the
  transcript positions it appended, the ids it dropped and the bodies it replaced;
- a **checkpoint** row describes a whole working revision as runs of transcript positions plus
  the records whose body differs from the transcript. It is written for a scope's first
  revision, every :data:`CHECKPOINT_EVERY` revisions, and whenever a change cannot be said as a
  delta; reading any revision replays at most ``CHECKPOINT_EVERY - 1`` deltas on top of one;
- **full** rows (schema 1) list every record of a revision; they stay readable as they are.

Every row is validated as it is read: bad JSON, a missing key, an unknown role, a number that is
not an integer or a transcript with a missing position raise :class:`StorageError` naming the
table, the scope and the row, never a raw decoding error. Schema changes are small numbered
migration functions (:data:`MIGRATIONS`) applied in order in one transaction.
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
