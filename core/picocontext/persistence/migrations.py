"""The SQLite store's schema as small numbered migrations, applied in order.

:data:`MIGRATIONS` maps a from-version to the function that upgrades a connection, inside the
caller's transaction, to the next version; a new store is built by applying every migration
from version 0 up to :data:`SCHEMA_VERSION`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable


def _m001_initial(db: sqlite3.Connection) -> None:
    """Sessions, the append-only transcript, bodies by hash, full revisions, tombstones."""
    db.execute(
        "CREATE TABLE sessions (scope_key TEXT PRIMARY KEY, user_id TEXT NOT NULL, "
        "conversation_id TEXT NOT NULL, branch_id TEXT NOT NULL, "
        "head_revision INTEGER NOT NULL, transcript_revision INTEGER NOT NULL, "
        "transcript_length INTEGER NOT NULL, updated_at REAL NOT NULL)"
    )
    db.execute(
        "CREATE TABLE transcript (scope_key TEXT NOT NULL, position INTEGER NOT NULL, "
        "record_id TEXT NOT NULL, record_json TEXT NOT NULL, PRIMARY KEY (scope_key, position))"
    )
    db.execute("CREATE TABLE bodies (hash TEXT PRIMARY KEY, body TEXT NOT NULL)")
    db.execute(
        "CREATE TABLE revisions (scope_key TEXT NOT NULL, revision INTEGER NOT NULL, "
        "records_json TEXT NOT NULL, committed_at REAL NOT NULL, "
        "PRIMARY KEY (scope_key, revision))"
    )
    db.execute(
        "CREATE TABLE tombstones (scope_key TEXT NOT NULL, record_id TEXT NOT NULL, "
        "deleted_at_revision INTEGER NOT NULL, PRIMARY KEY (scope_key, record_id))"
    )


def _m002_revisions_by_change(db: sqlite3.Connection) -> None:
    """Revision rows gain a kind (full, checkpoint, delta) and the checkpoint they build on;
    transcript rows gain a checksum, because unchanged working records now read their body
    from the transcript row.

    Existing rows become ``full`` rows in place (no row is rewritten, so even a very large
    schema-1 store migrates in constant time); a NULL base means the row stands alone, a NULL
    checksum that the row predates checksums."""
    db.execute("ALTER TABLE revisions RENAME COLUMN records_json TO payload")
    db.execute("ALTER TABLE revisions ADD COLUMN kind TEXT NOT NULL DEFAULT 'full'")
    db.execute("ALTER TABLE revisions ADD COLUMN base INTEGER")
    db.execute("ALTER TABLE transcript ADD COLUMN checksum TEXT")


# from-version -> function upgrading a connection inside a transaction to from-version + 1.
# A new store is built by applying every migration from version 0.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    0: _m001_initial,
    1: _m002_revisions_by_change,
}
SCHEMA_VERSION = 2
