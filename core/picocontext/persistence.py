"""Durable sessions: a store protocol, an in-memory store and a SQLite store.

A store keeps the preserved transcript, every committed working revision and tombstones of
deleted ids, so a session reopens exactly where it was. ``save`` is atomic: it either commits
the whole candidate or raises :class:`StorageError` and changes nothing. The session publishes a
revision only after ``save`` returned.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from picocontext.errors import ContextError, StorageError
from picocontext.records import Record, Role, Scope, Snapshot, ToolCall
from picocontext.working import WorkingContext, validate_snapshot


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


SCHEMA_VERSION = 1

_SCHEMA_V1 = """
CREATE TABLE sessions (
    scope_key TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    branch_id TEXT NOT NULL,
    head_revision INTEGER NOT NULL,
    transcript_revision INTEGER NOT NULL,
    transcript_length INTEGER NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE transcript (
    scope_key TEXT NOT NULL,
    position INTEGER NOT NULL,
    record_id TEXT NOT NULL,
    record_json TEXT NOT NULL,
    PRIMARY KEY (scope_key, position)
);
CREATE TABLE bodies (
    hash TEXT PRIMARY KEY,
    body TEXT NOT NULL
);
CREATE TABLE revisions (
    scope_key TEXT NOT NULL,
    revision INTEGER NOT NULL,
    records_json TEXT NOT NULL,
    committed_at REAL NOT NULL,
    PRIMARY KEY (scope_key, revision)
);
CREATE TABLE tombstones (
    scope_key TEXT NOT NULL,
    record_id TEXT NOT NULL,
    deleted_at_revision INTEGER NOT NULL,
    PRIMARY KEY (scope_key, record_id)
);
"""

# from-version -> function upgrading a connection inside a transaction to from-version + 1.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {}


def _scope_key(scope: Scope) -> str:
    return json.dumps([scope.user_id, scope.conversation_id, scope.branch_id])


def _record_meta(record: Record, body_field: str, body_value: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": record.id,
        "role": record.role.value,
        body_field: body_value,
        "protected": record.protected,
    }
    if record.tool_calls:
        meta["calls"] = [[c.id, c.name, c.arguments] for c in record.tool_calls]
    if record.tool_call_id is not None:
        meta["result_for"] = record.tool_call_id
    return meta


def _record_from(meta: dict[str, Any], body: str) -> Record:
    return Record.model_construct(
        id=meta["id"],
        role=Role(meta["role"]),
        body=body,
        protected=bool(meta["protected"]),
        tool_calls=tuple(
            ToolCall.model_construct(id=c[0], name=c[1], arguments=c[2])
            for c in meta.get("calls", [])
        ),
        tool_call_id=meta.get("result_for"),
    )


def _body_hash(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


class SQLiteStore:
    """One SQLite file (WAL, synchronous=FULL). Safe to share between threads of one process;
    concurrent writers from other processes are serialized by SQLite and detected as stale."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None, timeout=30.0
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._prepare_schema()
        except sqlite3.Error as exc:
            raise StorageError(f"Cannot open session store {self.path}: {exc}") from exc

    # -- schema -------------------------------------------------------------------------
    def _prepare_schema(self) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            tables = {
                row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            if version == 0 and not tables:
                for statement in _SCHEMA_V1.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            elif version == 0:
                raise StorageError(
                    f"{self.path} is not a picocontext session store (it has tables "
                    f"{sorted(tables)} but no schema version); refusing to touch it"
                )
            elif version > SCHEMA_VERSION:
                raise StorageError(
                    f"{self.path} was written by a newer picocontext (store schema {version}); "
                    f"this version reads schema {SCHEMA_VERSION} or older. Upgrade picocontext."
                )
            else:
                while version < SCHEMA_VERSION:
                    migrate = MIGRATIONS.get(version)
                    if migrate is None:
                        raise StorageError(
                            f"{self.path} uses store schema {version}, which this version "
                            f"cannot migrate to {SCHEMA_VERSION}; nothing was changed"
                        )
                    migrate(db)
                    version += 1
                    db.execute(f"PRAGMA user_version={version}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes -------------------------------------------------------------------------
    def save(self, context: WorkingContext) -> None:
        scope = context.snapshot.scope
        key = _scope_key(scope)
        with self._lock:
            db = self._db
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StorageError(f"Cannot save {scope}: {exc}") from exc
            try:
                self._save_in_tx(db, key, context)
                db.execute("COMMIT")
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                if isinstance(exc, StorageError):
                    raise
                if isinstance(exc, sqlite3.Error):
                    raise StorageError(f"Cannot save {scope}: {exc}") from exc
                raise

    def _save_in_tx(self, db: sqlite3.Connection, key: str, context: WorkingContext) -> None:
        scope = context.snapshot.scope
        snapshot = context.snapshot
        transcript = context.original.records
        row = db.execute(
            "SELECT head_revision, transcript_length FROM sessions WHERE scope_key=?", (key,)
        ).fetchone()
        stored_length = 0
        if row is not None:
            head, stored_length = int(row[0]), int(row[1])
            if snapshot.revision != head + 1:
                raise StorageError(
                    f"Stale save for {scope}: the store is at revision {head}, "
                    f"this commit is revision {snapshot.revision}"
                )
            if len(transcript) < stored_length:
                raise StorageError(f"Refusing to shorten the stored transcript of {scope}")
            last = db.execute(
                "SELECT record_id FROM transcript WHERE scope_key=? AND position=?",
                (key, stored_length - 1),
            ).fetchone()
            if stored_length and (last is None or last[0] != transcript[stored_length - 1].id):
                raise StorageError(f"The stored transcript of {scope} does not match this one")
        for position in range(stored_length, len(transcript)):
            record = transcript[position]
            db.execute(
                "INSERT INTO transcript(scope_key, position, record_id, record_json) "
                "VALUES (?,?,?,?)",
                (
                    key,
                    position,
                    record.id,
                    json.dumps(_record_meta(record, "body", record.body), ensure_ascii=False),
                ),
            )
        metas = []
        for record in snapshot.records:
            digest = _body_hash(record.body)
            db.execute(
                "INSERT OR IGNORE INTO bodies(hash, body) VALUES (?,?)", (digest, record.body)
            )
            metas.append(_record_meta(record, "body_hash", digest))
        now = time.time()
        db.execute(
            "INSERT INTO revisions(scope_key, revision, records_json, committed_at) "
            "VALUES (?,?,?,?)",
            (key, snapshot.revision, json.dumps(metas, ensure_ascii=False), now),
        )
        for record_id in context.deleted_ids():
            db.execute(
                "INSERT OR IGNORE INTO tombstones(scope_key, record_id, deleted_at_revision) "
                "VALUES (?,?,?)",
                (key, record_id, snapshot.revision),
            )
        db.execute(
            "INSERT INTO sessions(scope_key, user_id, conversation_id, branch_id, head_revision, "
            "transcript_revision, transcript_length, updated_at) VALUES (?,?,?,?,?,?,?,?) "
            "ON CONFLICT(scope_key) DO UPDATE SET head_revision=excluded.head_revision, "
            "transcript_revision=excluded.transcript_revision, "
            "transcript_length=excluded.transcript_length, updated_at=excluded.updated_at",
            (
                key,
                scope.user_id,
                scope.conversation_id,
                scope.branch_id,
                snapshot.revision,
                context.original.revision,
                len(transcript),
                now,
            ),
        )

    # -- reads --------------------------------------------------------------------------
    def load(self, scope: Scope) -> WorkingContext | None:
        key = _scope_key(scope)
        with self._lock:
            try:
                return self._load(scope, key)
            except sqlite3.Error as exc:
                raise StorageError(f"Cannot load {scope}: {exc}") from exc

    def _load(self, scope: Scope, key: str) -> WorkingContext | None:
        db = self._db
        db.execute("BEGIN")
        try:
            row = db.execute(
                "SELECT head_revision, transcript_revision FROM sessions WHERE scope_key=?",
                (key,),
            ).fetchone()
            if row is None:
                return None
            head, transcript_revision = int(row[0]), int(row[1])
            transcript = [
                _record_from(meta, meta["body"])
                for meta in (
                    json.loads(r[0])
                    for r in db.execute(
                        "SELECT record_json FROM transcript WHERE scope_key=? ORDER BY position",
                        (key,),
                    )
                )
            ]
            working = self._revision_records(db, key, head)
        finally:
            db.execute("COMMIT")
        original = Snapshot.model_construct(
            scope=scope, revision=transcript_revision, records=tuple(transcript)
        )
        snapshot = Snapshot.model_construct(scope=scope, revision=head, records=tuple(working))
        try:
            validate_snapshot(original)
            validate_snapshot(snapshot)
        except ContextError as exc:
            raise StorageError(f"The stored state of {scope} does not validate: {exc}") from exc
        return WorkingContext(original=original, snapshot=snapshot)

    def _revision_records(self, db: sqlite3.Connection, key: str, revision: int) -> list[Record]:
        row = db.execute(
            "SELECT records_json FROM revisions WHERE scope_key=? AND revision=?",
            (key, revision),
        ).fetchone()
        if row is None:
            raise StorageError(f"Revision {revision} is missing from the store")
        records = []
        for meta in json.loads(row[0]):
            body_row = db.execute(
                "SELECT body FROM bodies WHERE hash=?", (meta["body_hash"],)
            ).fetchone()
            if body_row is None or _body_hash(body_row[0]) != meta["body_hash"]:
                raise StorageError(f"The stored body of record {meta['id']} is missing or corrupt")
            records.append(_record_from(meta, body_row[0]))
        return records

    def revision_numbers(self, scope: Scope) -> list[int]:
        """Every committed revision of ``scope``, oldest first."""
        with self._lock:
            return [
                int(r[0])
                for r in self._db.execute(
                    "SELECT revision FROM revisions WHERE scope_key=? ORDER BY revision",
                    (_scope_key(scope),),
                )
            ]

    def committed_at(self, scope: Scope) -> dict[int, float]:
        """Revision -> commit time (Unix seconds); records carry no time of their own."""
        with self._lock:
            return {
                int(r[0]): float(r[1])
                for r in self._db.execute(
                    "SELECT revision, committed_at FROM revisions WHERE scope_key=?",
                    (_scope_key(scope),),
                )
            }

    def load_revision(self, scope: Scope, revision: int) -> Snapshot:
        """A past working revision, for history views and audits."""
        with self._lock:
            records = self._revision_records(self._db, _scope_key(scope), revision)
        return Snapshot.model_construct(scope=scope, revision=revision, records=tuple(records))

    def tombstones(self, scope: Scope) -> dict[str, int]:
        """Deleted record id -> revision that deleted it."""
        with self._lock:
            return {
                str(r[0]): int(r[1])
                for r in self._db.execute(
                    "SELECT record_id, deleted_at_revision FROM tombstones WHERE scope_key=?",
                    (_scope_key(scope),),
                )
            }

    def scopes(self) -> list[Scope]:
        with self._lock:
            return [
                Scope(user_id=r[0], conversation_id=r[1], branch_id=r[2])
                for r in self._db.execute(
                    "SELECT user_id, conversation_id, branch_id FROM sessions ORDER BY scope_key"
                )
            ]
