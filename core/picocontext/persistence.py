"""Durable sessions: a store protocol, an in-memory store and a SQLite store.

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

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

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


# -- schema and migrations ------------------------------------------------------------------
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

# A checkpoint at least every this many revisions bounds how many deltas a read replays.
CHECKPOINT_EVERY = 64
# A change touching more records than this is stored as a checkpoint, which is no larger.
_MAX_DELTA_ITEMS = 256

_ROLES = {role.value: role for role in Role}
_T = TypeVar("_T")


# -- row codec: every value read from the file is checked before it is used ---------------
def _scope_key(scope: Scope) -> str:
    return json.dumps([scope.user_id, scope.conversation_id, scope.branch_id])


def _body_hash(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def _row_checksum(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


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


def _corrupt(where: str, reason: str) -> StorageError:
    return StorageError(
        f"The session store has a corrupt row ({where}): {reason}. Nothing was loaded; "
        "restore the store from a backup or start a new one."
    )


def _json(text: object, where: str) -> Any:
    if not isinstance(text, str):
        raise _corrupt(where, f"expected JSON text, found {type(text).__name__}")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise _corrupt(where, f"bad JSON ({exc})") from None
    except RecursionError:
        raise _corrupt(where, "JSON nested too deeply") from None


def _int(value: object, where: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _corrupt(where, f"{what} is not an integer ({str(value)[:40]!r})")
    return value


def _number(value: object, where: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _corrupt(where, f"{what} is not a number ({str(value)[:40]!r})")
    return float(value)


def _text(value: object, where: str, what: str) -> str:
    if not isinstance(value, str):
        raise _corrupt(where, f"{what} is not text ({str(value)[:40]!r})")
    return value


def _field(meta: dict[str, Any], key: str, where: str) -> Any:
    if key not in meta:
        raise _corrupt(where, f"missing key {key!r}")
    return meta[key]


def _calls(value: object, where: str) -> tuple[ToolCall, ...]:
    if not isinstance(value, list):
        raise _corrupt(where, "tool calls are not a list")
    calls = []
    for call in value:
        if not (
            isinstance(call, list) and len(call) == 3 and all(isinstance(x, str) for x in call)
        ):
            raise _corrupt(where, "a tool call is not [id, name, arguments]")
        calls.append(ToolCall.model_construct(id=call[0], name=call[1], arguments=call[2]))
    return tuple(calls)


def _record(meta: object, body: str, where: str) -> Record:
    if not isinstance(meta, dict):
        raise _corrupt(where, "a record is not a JSON object")
    role = _field(meta, "role", where)
    if not isinstance(role, str) or role not in _ROLES:
        raise _corrupt(where, f"unknown role {str(role)[:40]!r}")
    protected = _field(meta, "protected", where)
    if not isinstance(protected, bool):
        raise _corrupt(where, "protected is not true or false")
    result_for = meta.get("result_for")
    if result_for is not None:
        _text(result_for, where, "result_for")
    return Record.model_construct(
        id=_text(_field(meta, "id", where), where, "id"),
        role=_ROLES[role],
        body=body,
        protected=protected,
        tool_calls=_calls(meta.get("calls", []), where),
        tool_call_id=result_for,
    )


def _same_links(a: Record, b: Record) -> bool:
    """Same id, role, protection and tool links: ``b`` is ``a`` with, at most, another body."""
    return (
        a.id == b.id
        and a.role is b.role
        and a.protected == b.protected
        and a.tool_calls == b.tool_calls
        and a.tool_call_id == b.tool_call_id
    )


def _span(value: object, limit: int, where: str) -> tuple[int, int]:
    """A [start, end) range of transcript positions inside ``limit`` records."""
    if not (isinstance(value, list) and len(value) == 2):
        raise _corrupt(where, "a position range is not [start, end]")
    start, end = _int(value[0], where, "start"), _int(value[1], where, "end")
    if not 0 <= start <= end <= limit:
        raise _corrupt(where, f"positions {start}..{end} are outside the transcript")
    return start, end


@dataclass(frozen=True, slots=True)
class _Head:
    """What this store object last wrote or read for a scope, so the next save can be a
    delta against it instead of a full description."""

    revision: int
    committed_at: float
    base: int
    records: tuple[Record, ...]


@dataclass(frozen=True, slots=True)
class _Transcript:
    """The transcript records this store object has read or written for a scope, and the
    checksum of its last row: the transcript is append-only, so a later read only fetches
    the rows after it, once that last row is found unchanged."""

    records: tuple[Record, ...]
    last_checksum: str


@dataclass(frozen=True, slots=True)
class _Change:
    """One revision's transaction against the revision before it."""

    drops: list[str]
    replaced: list[Record]
    added: tuple[int, int] | None
    tombstones: list[str]


def _walk(
    old: Sequence[Record], new: Sequence[Record]
) -> tuple[list[str], list[Record], Sequence[Record]] | None:
    """Drops, body replacements and the appended tail that turn ``old`` into ``new``."""
    if len(new) >= len(old) and tuple(new[: len(old)]) == tuple(old):
        return [], [], new[len(old) :]  # an append: compared in C, identical objects first
    drops: list[str] = []
    replaced: list[Record] = []
    i = 0
    for j, record in enumerate(new):
        while i < len(old) and old[i].id != record.id:
            drops.append(old[i].id)
            i += 1
        if i == len(old):
            return drops, replaced, new[j:]
        before = old[i]
        i += 1
        if before is record:
            continue
        if not _same_links(before, record):
            return None
        if before.body != record.body:
            replaced.append(record)
    drops.extend(r.id for r in old[i:])
    return drops, replaced, ()


def _change(
    old: Sequence[Record], new: Sequence[Record], transcript: Sequence[Record]
) -> _Change | None:
    """The delta from ``old`` to ``new``, or None when only a checkpoint can say it."""
    walked = _walk(old, new)
    if walked is None:
        return None
    drops, replaced, tail = walked
    if len(drops) + len(replaced) > _MAX_DELTA_ITEMS:
        return None
    added = None
    if tail:
        start = len(transcript) - len(tail)
        if start < 0 or tuple(transcript[start:]) != tuple(tail):
            return None
        added = (start, len(transcript))
    live = {r.id for r in tail}
    return _Change(drops, replaced, added, [d for d in drops if d not in live])


def _transcript_record(
    record_id: object, text: object, checksum: object, where: str
) -> tuple[Record, str]:
    """One transcript row as a record, and the checksum of its text."""
    meta = _json(text, where)
    digest = _row_checksum(str(text))
    if checksum is not None and digest != checksum:
        raise _corrupt(where, "its checksum does not match: the row was changed")
    if not isinstance(meta, dict):
        raise _corrupt(where, "a record is not a JSON object")
    record = _record(meta, _text(_field(meta, "body", where), where, "body"), where)
    if record.id != record_id:
        raise _corrupt(where, f"record_id {str(record_id)[:40]!r} is not the record's id")
    return record, digest


class SQLiteStore:
    """One SQLite file (WAL, synchronous=FULL). Safe to share between threads of one process;
    concurrent writers from other processes are serialized by SQLite and detected as stale.

    Each store object remembers, per scope, the head revision and the transcript it last
    wrote or read. That is what lets a save be a delta and a read parse only new transcript
    rows; both are checked against the file inside the transaction (the head's commit time,
    the checksum of the last known transcript row), so a commit by any other writer simply
    makes the next save a checkpoint and the next read a full one."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        """``read_only`` opens an existing store for reading and never writes to it (no
        schema, no migration, no journal-mode change): for tools that read someone's
        sessions, such as a distill source. Such a store refuses an empty or old file."""
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.RLock()
        self._heads: dict[str, _Head] = {}
        self._transcripts: dict[str, _Transcript] = {}
        self._db = self._connect()
        try:
            self._prepare_schema()
        except sqlite3.Error as exc:
            self._db.close()
            raise StorageError(f"Cannot open session store {self.path}: {exc}") from exc
        except BaseException:
            self._db.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            return self._connect_read_only()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"Cannot create the folder of session store {self.path}: "
                f"{exc.strerror or exc}. Choose a writable location for the store."
            ) from exc
        db = None
        try:
            db = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None, timeout=30.0
            )
            _wal(db, deadline=time.monotonic() + 30.0)
            db.execute("PRAGMA synchronous=FULL")
            db.execute("PRAGMA foreign_keys=ON")
            return db
        except sqlite3.Error as exc:
            if db is not None:
                db.close()
            raise StorageError(self._open_problem(exc)) from exc

    def _connect_read_only(self) -> sqlite3.Connection:
        if not self.path.is_file():
            what = "is not a file" if self.path.exists() else "does not exist"
            raise StorageError(f"Cannot open session store {self.path}: it {what}")
        uri = f"{self.path.resolve().as_uri()}?mode=ro"
        try:
            db = sqlite3.connect(
                uri, uri=True, check_same_thread=False, isolation_level=None, timeout=30.0
            )
        except sqlite3.Error as exc:
            raise StorageError(f"Cannot open session store {self.path}: {exc}") from exc
        return db

    def _open_problem(self, exc: sqlite3.Error) -> str:
        if self.path.is_dir():
            return f"Cannot open session store {self.path}: it is a folder, not a store file"
        target = self.path if self.path.exists() else self.path.parent
        if not os.access(target, os.W_OK):
            return (
                f"Cannot open session store {self.path}: {target} is read-only. "
                "Choose a writable location for the store."
            )
        return f"Cannot open session store {self.path}: {exc}"

    # -- schema -------------------------------------------------------------------------
    def _prepare_schema(self) -> None:
        db = self._db
        db.execute("BEGIN" if self.read_only else "BEGIN IMMEDIATE")
        try:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            tables = {
                row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            if version == 0 and tables:
                raise StorageError(
                    f"{self.path} is not a picocontext session store (it has tables "
                    f"{sorted(tables)} but no schema version); refusing to touch it"
                )
            if version > SCHEMA_VERSION:
                raise StorageError(
                    f"{self.path} was written by a newer picocontext (store schema {version}); "
                    f"this version reads schema {SCHEMA_VERSION} or older. Upgrade picocontext."
                )
            if self.read_only:
                self._check_readable(version)
            else:
                self._migrate(db, version)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _check_readable(self, version: int) -> None:
        if version == 0:
            raise StorageError(f"{self.path} is empty, not a picocontext session store")
        if version < SCHEMA_VERSION:
            raise StorageError(
                f"{self.path} uses store schema {version}; open it once with picocontext "
                f"(which migrates it to schema {SCHEMA_VERSION}) before reading it here"
            )

    def _migrate(self, db: sqlite3.Connection, version: int) -> None:
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
                head, transcript = self._save_in_tx(db, key, context)
                db.execute("COMMIT")
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                if isinstance(exc, StorageError):
                    raise
                if isinstance(exc, sqlite3.Error):
                    raise StorageError(f"Cannot save {scope}: {exc}") from exc
                raise
            self._heads[key] = head
            self._transcripts[key] = transcript

    def _save_in_tx(
        self, db: sqlite3.Connection, key: str, context: WorkingContext
    ) -> tuple[_Head, _Transcript]:
        snapshot = context.snapshot
        head = self._check_head(db, key, context)
        transcript = self._append_transcript(db, key, context)
        previous = self._previous(db, key, head)
        change = None
        if previous is not None and snapshot.revision - previous.base < CHECKPOINT_EVERY:
            change = _change(previous.records, snapshot.records, context.original.records)
        now = time.time()
        payload: Any
        if change is None or previous is None:
            base = snapshot.revision
            kind, payload = "checkpoint", self._checkpoint(db, context)
            deleted = context.deleted_ids()
        else:
            base = previous.base
            kind, payload = "delta", self._delta(db, change)
            deleted = change.tombstones
        db.execute(
            "INSERT INTO revisions(scope_key, revision, payload, committed_at, kind, base) "
            "VALUES (?,?,?,?,?,?)",
            (key, snapshot.revision, json.dumps(payload, ensure_ascii=False), now, kind, base),
        )
        for record_id in deleted:
            db.execute(
                "INSERT OR IGNORE INTO tombstones(scope_key, record_id, deleted_at_revision) "
                "VALUES (?,?,?)",
                (key, record_id, snapshot.revision),
            )
        self._write_session(db, key, context, now)
        return _Head(snapshot.revision, now, base, snapshot.records), transcript

    def _check_head(self, db: sqlite3.Connection, key: str, context: WorkingContext) -> int | None:
        """The stored head revision (None for a new scope), refusing stale or foreign saves."""
        scope = context.snapshot.scope
        row = db.execute("SELECT head_revision FROM sessions WHERE scope_key=?", (key,)).fetchone()
        if row is None:
            return None
        head = _int(row[0], f"sessions, scope {scope}", "head_revision")
        if context.snapshot.revision != head + 1:
            raise StorageError(
                f"Stale save for {scope}: the store is at revision {head}, "
                f"this commit is revision {context.snapshot.revision}"
            )
        return head

    def _append_transcript(
        self, db: sqlite3.Connection, key: str, context: WorkingContext
    ) -> _Transcript:
        """Insert the records the stored transcript does not have yet, after checking that
        ``context`` extends it (every stored record when they are known, else the last)."""
        scope = context.snapshot.scope
        transcript = context.original.records
        row = db.execute(
            "SELECT transcript_length FROM sessions WHERE scope_key=?", (key,)
        ).fetchone()
        stored = 0 if row is None else _int(row[0], f"sessions, scope {scope}", "length")
        if len(transcript) < stored:
            raise StorageError(f"Refusing to shorten the stored transcript of {scope}")
        last_checksum = self._check_prefix(db, key, context, stored)
        rows = []
        for position, record in enumerate(transcript[stored:], start=stored):
            text = json.dumps(_record_meta(record, "body", record.body), ensure_ascii=False)
            last_checksum = _row_checksum(text)
            rows.append((key, position, record.id, text, last_checksum))
        db.executemany(
            "INSERT INTO transcript(scope_key, position, record_id, record_json, checksum) "
            "VALUES (?,?,?,?,?)",
            rows,
        )
        return _Transcript(transcript, last_checksum)

    def _check_prefix(
        self, db: sqlite3.Connection, key: str, context: WorkingContext, stored: int
    ) -> str:
        """The checksum of the last stored transcript row, once ``context`` matches it."""
        if not stored:
            return ""
        scope = context.snapshot.scope
        transcript = context.original.records
        last = db.execute(
            "SELECT record_id, record_json FROM transcript WHERE scope_key=? AND position=?",
            (key, stored - 1),
        ).fetchone()
        if last is None or last[0] != transcript[stored - 1].id or not isinstance(last[1], str):
            raise StorageError(f"The stored transcript of {scope} does not match this one")
        checksum = _row_checksum(last[1])
        cached = self._transcripts.get(key)
        if (
            cached is not None
            and len(cached.records) == stored
            and cached.last_checksum == checksum
            and transcript[:stored] != cached.records  # identical objects compare in C
        ):
            raise StorageError(f"The stored transcript of {scope} does not match this one")
        return checksum

    def _previous(self, db: sqlite3.Connection, key: str, head: int | None) -> _Head | None:
        """The cached head, if it is still exactly what the file holds at ``head``."""
        cached = self._heads.get(key)
        if head is None or cached is None or cached.revision != head:
            return None
        row = db.execute(
            "SELECT committed_at FROM revisions WHERE scope_key=? AND revision=?", (key, head)
        ).fetchone()
        return cached if row is not None and row[0] == cached.committed_at else None

    def _store_body(self, db: sqlite3.Connection, body: str) -> str:
        digest = _body_hash(body)
        db.execute("INSERT OR IGNORE INTO bodies(hash, body) VALUES (?,?)", (digest, body))
        return digest

    def _delta(self, db: sqlite3.Connection, change: _Change) -> dict[str, Any]:
        payload: dict[str, Any] = {}
        if change.drops:
            payload["drop"] = change.drops
        if change.replaced:
            payload["set"] = [[r.id, self._store_body(db, r.body)] for r in change.replaced]
        if change.added is not None:
            payload["add"] = list(change.added)
        return payload

    def _checkpoint(self, db: sqlite3.Connection, context: WorkingContext) -> list[Any]:
        """Runs ``[start, end]`` of unchanged transcript records and ``{"at", "body"}`` for a
        transcript record with another body. A working record must be a transcript record."""
        transcript = context.original.records
        position = {r.id: i for i, r in enumerate(transcript)}
        items: list[Any] = []
        for record in context.snapshot.records:
            p = position.get(record.id)
            source = None if p is None else transcript[p]
            if p is None or source is None or not _same_links(source, record):
                raise StorageError(
                    f"Cannot save {context.snapshot.scope}: working record {record.id!r} is "
                    "not a record of the transcript (only bodies may differ)"
                )
            if source is not record and source.body != record.body:
                items.append({"at": p, "body": self._store_body(db, record.body)})
            elif items and isinstance(items[-1], list) and items[-1][1] == p:
                items[-1][1] = p + 1
            else:
                items.append([p, p + 1])
        return items

    def _write_session(
        self, db: sqlite3.Connection, key: str, context: WorkingContext, now: float
    ) -> None:
        scope = context.snapshot.scope
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
                context.snapshot.revision,
                context.original.revision,
                len(context.original.records),
                now,
            ),
        )

    # -- reads --------------------------------------------------------------------------
    def _read(self, what: object, read: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``read`` in one read transaction, so it sees a single committed state."""
        with self._lock:
            db = self._db
            try:
                db.execute("BEGIN")
                try:
                    return read(db)
                finally:
                    db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StorageError(f"Cannot load {what} from {self.path}: {exc}") from exc

    def load(self, scope: Scope) -> WorkingContext | None:
        key = _scope_key(scope)
        with self._lock:
            loaded = self._read(scope, lambda db: self._load(db, scope, key))
            if loaded is None:
                return None
            context, head = loaded
            self._heads[key] = head
            return context

    def _session_row(
        self, db: sqlite3.Connection, scope: Scope, key: str
    ) -> tuple[int, ...] | None:
        row = db.execute(
            "SELECT head_revision, transcript_revision, transcript_length FROM sessions "
            "WHERE scope_key=?",
            (key,),
        ).fetchone()
        if row is None:
            return None
        where = f"sessions, scope {scope}"
        names = ("head_revision", "transcript_revision", "transcript_length")
        return tuple(_int(value, where, name) for value, name in zip(row, names, strict=True))

    def _load(
        self, db: sqlite3.Connection, scope: Scope, key: str
    ) -> tuple[WorkingContext, _Head] | None:
        row = self._session_row(db, scope, key)
        if row is None:
            return None
        head, transcript_revision, length = row
        transcript = self._transcript(db, scope, key, length)
        working, committed_at, base = self._revision(db, scope, key, head, transcript)
        original = Snapshot.model_construct(
            scope=scope, revision=transcript_revision, records=tuple(transcript)
        )
        snapshot = Snapshot.model_construct(scope=scope, revision=head, records=tuple(working))
        try:
            validate_snapshot(original)
            validate_snapshot(snapshot)
        except ContextError as exc:
            raise StorageError(f"The stored state of {scope} does not validate: {exc}") from exc
        _check_working_in_transcript(scope, original.records, snapshot.records)
        context = WorkingContext(original=original, snapshot=snapshot)
        return context, _Head(head, committed_at, base, snapshot.records)

    def _transcript(
        self, db: sqlite3.Connection, scope: Scope, key: str, length: int
    ) -> tuple[Record, ...]:
        """All ``length`` transcript records; rows already read by this object are reused
        once the last of them is found unchanged, so only new rows are parsed."""
        cached = self._cached_transcript(db, key, length)
        records = list(cached.records) if cached is not None else []
        last_checksum = cached.last_checksum if cached is not None else ""
        rows = db.execute(
            "SELECT position, record_id, record_json, checksum FROM transcript "
            "WHERE scope_key=? AND position>=? ORDER BY position",
            (key, len(records)),
        )
        label = str(scope)
        for position, record_id, text, checksum in rows:
            where = f"transcript, scope {label}, position {position}"
            if _int(position, where, "position") != len(records):
                break
            record, last_checksum = _transcript_record(record_id, text, checksum, where)
            records.append(record)
        if len(records) != length:
            raise StorageError(
                f"The stored transcript of {scope} lost records: it should hold {length} "
                f"records at positions 0..{length - 1}, but position {len(records)} is missing. "
                "Nothing was loaded; restore the store from a backup or start a new one."
            )
        result = tuple(records)
        self._transcripts[key] = _Transcript(result, last_checksum)
        return result

    def _cached_transcript(
        self, db: sqlite3.Connection, key: str, length: int
    ) -> _Transcript | None:
        cached = self._transcripts.get(key)
        if cached is None or not cached.records or len(cached.records) > length:
            return None
        row = db.execute(
            "SELECT record_json FROM transcript WHERE scope_key=? AND position=?",
            (key, len(cached.records) - 1),
        ).fetchone()
        unchanged = row is not None and isinstance(row[0], str)
        return cached if unchanged and _row_checksum(row[0]) == cached.last_checksum else None

    def _revision(
        self,
        db: sqlite3.Connection,
        scope: Scope,
        key: str,
        revision: int,
        transcript: Sequence[Record],
    ) -> tuple[list[Record], float, int]:
        """Records, commit time and checkpoint of ``revision``: its checkpoint plus deltas."""
        head = db.execute(
            "SELECT committed_at, COALESCE(base, revision) FROM revisions "
            "WHERE scope_key=? AND revision=?",
            (key, revision),
        ).fetchone()
        if head is None:
            raise StorageError(f"Revision {revision} of {scope} is missing from the store")
        where = f"revisions, scope {scope}, revision {revision}"
        committed_at = _number(head[0], where, "committed_at")
        base = _int(head[1], where, "base")
        rows = db.execute(
            "SELECT revision, kind, payload FROM revisions WHERE scope_key=? "
            "AND revision BETWEEN ? AND ? ORDER BY revision",
            (key, base, revision),
        ).fetchall()
        if len(rows) != revision - base + 1 or rows[0][1] == "delta":
            raise _corrupt(where, f"the revisions from its checkpoint {base} are incomplete")
        records: list[Record] = []
        for number, kind, payload in rows:
            at = f"revisions, scope {scope}, revision {number}"
            records = self._decode(db, kind, _json(payload, at), records, transcript, at)
        return records, committed_at, base

    def _decode(
        self,
        db: sqlite3.Connection,
        kind: object,
        payload: Any,
        records: list[Record],
        transcript: Sequence[Record],
        where: str,
    ) -> list[Record]:
        if kind == "full":
            return self._full(db, payload, where)
        if kind == "checkpoint":
            return self._from_checkpoint(db, payload, transcript, where)
        if kind == "delta":
            return self._apply_delta(db, payload, records, transcript, where)
        raise _corrupt(where, f"unknown revision kind {str(kind)[:40]!r}")

    def _body(self, db: sqlite3.Connection, digest: object, where: str) -> str:
        digest = _text(digest, where, "body hash")
        row = db.execute("SELECT body FROM bodies WHERE hash=?", (digest,)).fetchone()
        if row is None or not isinstance(row[0], str) or _body_hash(row[0]) != digest:
            raise StorageError(f"The stored body {digest[:12]}… ({where}) is missing or corrupt")
        return row[0]

    def _full(self, db: sqlite3.Connection, payload: Any, where: str) -> list[Record]:
        if not isinstance(payload, list):
            raise _corrupt(where, "a full revision is not a list of records")
        records = []
        for meta in payload:
            if not isinstance(meta, dict):
                raise _corrupt(where, "a record is not a JSON object")
            records.append(
                _record(meta, self._body(db, _field(meta, "body_hash", where), where), where)
            )
        return records

    def _from_checkpoint(
        self, db: sqlite3.Connection, payload: Any, transcript: Sequence[Record], where: str
    ) -> list[Record]:
        if not isinstance(payload, list):
            raise _corrupt(where, "a checkpoint is not a list")
        records: list[Record] = []
        for item in payload:
            if isinstance(item, list):
                start, end = _span(item, len(transcript), where)
                records.extend(transcript[start:end])
            elif isinstance(item, dict) and "at" in item:
                p = _int(item["at"], where, "at")
                if not 0 <= p < len(transcript):
                    raise _corrupt(where, f"position {p} is outside the transcript")
                records.append(transcript[p].with_body(self._body(db, item.get("body"), where)))
            else:
                raise _corrupt(where, "a checkpoint item is neither a range nor a body")
        return records

    def _apply_delta(
        self,
        db: sqlite3.Connection,
        payload: Any,
        records: list[Record],
        transcript: Sequence[Record],
        where: str,
    ) -> list[Record]:
        if not isinstance(payload, dict):
            raise _corrupt(where, "a delta is not a JSON object")
        drops = payload.get("drop", [])
        if not isinstance(drops, list) or not all(isinstance(d, str) for d in drops):
            raise _corrupt(where, "drop is not a list of ids")
        if drops:
            gone = set(drops)
            kept = [r for r in records if r.id not in gone]
            if len(gone) != len(drops) or len(kept) != len(records) - len(gone):
                raise _corrupt(where, "it drops an id the revision before it does not hold")
            records = kept
        replaced = payload.get("set", [])
        if not isinstance(replaced, list):
            raise _corrupt(where, "set is not a list")
        if replaced:
            records = self._replace_bodies(db, records, replaced, where)
        if "add" in payload:
            start, end = _span(payload["add"], len(transcript), where)
            records = [*records, *transcript[start:end]]
        return records

    def _replace_bodies(
        self, db: sqlite3.Connection, records: list[Record], replaced: list[Any], where: str
    ) -> list[Record]:
        index = {r.id: i for i, r in enumerate(records)}
        out = list(records)
        for item in replaced:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                raise _corrupt(where, "a replacement is not [id, body hash]")
            i = index.get(item[0])
            if i is None:
                raise _corrupt(where, f"it replaces {item[0][:40]!r}, which is not there")
            out[i] = out[i].with_body(self._body(db, item[1], where))
        return out

    def revision_numbers(self, scope: Scope) -> list[int]:
        """Every committed revision of ``scope``, oldest first."""

        def read(db: sqlite3.Connection) -> list[int]:
            rows = db.execute(
                "SELECT revision FROM revisions WHERE scope_key=? ORDER BY revision",
                (_scope_key(scope),),
            )
            return [_int(r[0], f"revisions, scope {scope}", "revision") for r in rows]

        return self._read(scope, read)

    def committed_at(self, scope: Scope) -> dict[int, float]:
        """Revision -> commit time (Unix seconds); records carry no time of their own."""

        def read(db: sqlite3.Connection) -> dict[int, float]:
            out = {}
            for revision, at in db.execute(
                "SELECT revision, committed_at FROM revisions WHERE scope_key=?",
                (_scope_key(scope),),
            ):
                where = f"revisions, scope {scope}, revision {revision}"
                out[_int(revision, where, "revision")] = _number(at, where, "committed_at")
            return out

        return self._read(scope, read)

    def load_revision(self, scope: Scope, revision: int) -> Snapshot:
        """A past working revision, for history views and audits."""
        key = _scope_key(scope)

        def read(db: sqlite3.Connection) -> list[Record]:
            row = self._session_row(db, scope, key)
            if row is None:
                raise StorageError(f"Revision {revision} of {scope} is missing from the store")
            transcript = self._transcript(db, scope, key, row[2])
            return self._revision(db, scope, key, revision, transcript)[0]

        records = self._read(scope, read)
        return Snapshot.model_construct(scope=scope, revision=revision, records=tuple(records))

    def tombstones(self, scope: Scope) -> dict[str, int]:
        """Deleted record id -> revision that deleted it."""

        def read(db: sqlite3.Connection) -> dict[str, int]:
            out = {}
            for record_id, revision in db.execute(
                "SELECT record_id, deleted_at_revision FROM tombstones WHERE scope_key=?",
                (_scope_key(scope),),
            ):
                where = f"tombstones, scope {scope}, record {str(record_id)[:40]!r}"
                out[_text(record_id, where, "record_id")] = _int(revision, where, "revision")
            return out

        return self._read(scope, read)

    def scopes(self) -> list[Scope]:
        def read(db: sqlite3.Connection) -> list[Scope]:
            out = []
            for key, *parts in db.execute(
                "SELECT scope_key, user_id, conversation_id, branch_id FROM sessions "
                "ORDER BY scope_key"
            ):
                where = f"sessions, scope key {str(key)[:60]!r}"
                user, conversation, branch = (_text(p, where, "scope part") for p in parts)
                out.append(Scope(user_id=user, conversation_id=conversation, branch_id=branch))
            return out

        return self._read("the session list", read)


def _check_working_in_transcript(
    scope: Scope, transcript: Sequence[Record], working: Sequence[Record]
) -> None:
    """Every working record is a transcript record (same id and links, maybe another body)."""
    by_id = {r.id: r for r in transcript}
    for record in working:
        source = by_id.get(record.id)
        if source is None or not _same_links(source, record):
            raise StorageError(
                f"The stored working revision of {scope} holds record {record.id!r}, which the "
                "stored transcript does not: the transcript lost a record. Nothing was loaded; "
                "restore the store from a backup or start a new one."
            )


def _wal(db: sqlite3.Connection, deadline: float) -> None:
    """Switch ``db`` to write-ahead logging. Another process opening the same new store at the
    same moment holds the lock that switch needs, and SQLite answers "database is locked" at
    once instead of waiting out the busy timeout: retry with a short backoff until
    ``deadline`` (two processes appending to one store failed here under load)."""
    pause = 0.01
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if ("locked" not in text and "busy" not in text) or time.monotonic() > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.25)
