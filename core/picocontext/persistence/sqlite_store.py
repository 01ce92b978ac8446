"""The SQLite session store: one file, revisions stored by change.

``save`` is atomic: it either commits the whole candidate or raises :class:`StorageError` and
changes nothing. The store keeps revisions *by change*, so a save costs the size of its
change, not of the session:

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
migration functions (:mod:`picocontext.persistence.migrations`) applied in order in one
transaction.

:class:`SQLiteStore` stays one module: its writes and reads share one connection, one lock and
the per-scope caches (the head revision and transcript last seen) that make a save a delta and a
read incremental, and every method checks those caches against the file inside the same
transaction. The row codec, the delta computation and the migrations, which need none of that,
live in their own modules.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from picocontext.errors import ContextError, StorageError
from picocontext.persistence import migrations
from picocontext.persistence.rows import (
    Change,
    Head,
    Transcript,
    as_int,
    as_number,
    as_text,
    body_hash,
    check_working_in_transcript,
    corrupt,
    delta_between,
    field,
    parse_json,
    parse_record,
    parse_span,
    record_meta,
    row_checksum,
    same_links,
    scope_key,
    transcript_record,
)
from picocontext.records import Record, Scope, Snapshot
from picocontext.working import WorkingContext, validate_snapshot

# A checkpoint at least every this many revisions bounds how many deltas a read replays.
CHECKPOINT_EVERY = 64

_T = TypeVar("_T")


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
        self._heads: dict[str, Head] = {}
        self._transcripts: dict[str, Transcript] = {}
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
            if version > migrations.SCHEMA_VERSION:
                raise StorageError(
                    f"{self.path} was written by a newer picocontext (store schema {version}); "
                    f"this version reads schema {migrations.SCHEMA_VERSION} or older. "
                    "Upgrade picocontext."
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
        if version < migrations.SCHEMA_VERSION:
            raise StorageError(
                f"{self.path} uses store schema {version}; open it once with picocontext "
                f"(which migrates it to schema {migrations.SCHEMA_VERSION}) before reading it here"
            )

    def _migrate(self, db: sqlite3.Connection, version: int) -> None:
        while version < migrations.SCHEMA_VERSION:
            migrate = migrations.MIGRATIONS.get(version)
            if migrate is None:
                raise StorageError(
                    f"{self.path} uses store schema {version}, which this version "
                    f"cannot migrate to {migrations.SCHEMA_VERSION}; nothing was changed"
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
        key = scope_key(scope)
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
    ) -> tuple[Head, Transcript]:
        snapshot = context.snapshot
        head = self._check_head(db, key, context)
        transcript = self._append_transcript(db, key, context)
        previous = self._previous(db, key, head)
        change = None
        if previous is not None and snapshot.revision - previous.base < CHECKPOINT_EVERY:
            change = delta_between(previous.records, snapshot.records, context.original.records)
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
        return Head(snapshot.revision, now, base, snapshot.records), transcript

    def _check_head(self, db: sqlite3.Connection, key: str, context: WorkingContext) -> int | None:
        """The stored head revision (None for a new scope), refusing stale or foreign saves."""
        scope = context.snapshot.scope
        row = db.execute("SELECT head_revision FROM sessions WHERE scope_key=?", (key,)).fetchone()
        if row is None:
            return None
        head = as_int(row[0], f"sessions, scope {scope}", "head_revision")
        if context.snapshot.revision != head + 1:
            raise StorageError(
                f"Stale save for {scope}: the store is at revision {head}, "
                f"this commit is revision {context.snapshot.revision}"
            )
        return head

    def _append_transcript(
        self, db: sqlite3.Connection, key: str, context: WorkingContext
    ) -> Transcript:
        """Insert the records the stored transcript does not have yet, after checking that
        ``context`` extends it (every stored record when they are known, else the last)."""
        scope = context.snapshot.scope
        transcript = context.original.records
        row = db.execute(
            "SELECT transcript_length FROM sessions WHERE scope_key=?", (key,)
        ).fetchone()
        stored = 0 if row is None else as_int(row[0], f"sessions, scope {scope}", "length")
        if len(transcript) < stored:
            raise StorageError(f"Refusing to shorten the stored transcript of {scope}")
        last_checksum = self._check_prefix(db, key, context, stored)
        rows = []
        for position, record in enumerate(transcript[stored:], start=stored):
            text = json.dumps(record_meta(record, "body", record.body), ensure_ascii=False)
            last_checksum = row_checksum(text)
            rows.append((key, position, record.id, text, last_checksum))
        db.executemany(
            "INSERT INTO transcript(scope_key, position, record_id, record_json, checksum) "
            "VALUES (?,?,?,?,?)",
            rows,
        )
        return Transcript(transcript, last_checksum)

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
        checksum = row_checksum(last[1])
        cached = self._transcripts.get(key)
        if (
            cached is not None
            and len(cached.records) == stored
            and cached.last_checksum == checksum
            and transcript[:stored] != cached.records  # identical objects compare in C
        ):
            raise StorageError(f"The stored transcript of {scope} does not match this one")
        return checksum

    def _previous(self, db: sqlite3.Connection, key: str, head: int | None) -> Head | None:
        """The cached head, if it is still exactly what the file holds at ``head``."""
        cached = self._heads.get(key)
        if head is None or cached is None or cached.revision != head:
            return None
        row = db.execute(
            "SELECT committed_at FROM revisions WHERE scope_key=? AND revision=?", (key, head)
        ).fetchone()
        return cached if row is not None and row[0] == cached.committed_at else None

    def _store_body(self, db: sqlite3.Connection, body: str) -> str:
        digest = body_hash(body)
        db.execute("INSERT OR IGNORE INTO bodies(hash, body) VALUES (?,?)", (digest, body))
        return digest

    def _delta(self, db: sqlite3.Connection, change: Change) -> dict[str, Any]:
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
            if p is None or source is None or not same_links(source, record):
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
        key = scope_key(scope)
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
        return tuple(as_int(value, where, name) for value, name in zip(row, names, strict=True))

    def _load(
        self, db: sqlite3.Connection, scope: Scope, key: str
    ) -> tuple[WorkingContext, Head] | None:
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
        check_working_in_transcript(scope, original.records, snapshot.records)
        context = WorkingContext(original=original, snapshot=snapshot)
        return context, Head(head, committed_at, base, snapshot.records)

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
            if as_int(position, where, "position") != len(records):
                break
            record, last_checksum = transcript_record(record_id, text, checksum, where)
            records.append(record)
        if len(records) != length:
            raise StorageError(
                f"The stored transcript of {scope} lost records: it should hold {length} "
                f"records at positions 0..{length - 1}, but position {len(records)} is missing. "
                "Nothing was loaded; restore the store from a backup or start a new one."
            )
        result = tuple(records)
        self._transcripts[key] = Transcript(result, last_checksum)
        return result

    def _cached_transcript(
        self, db: sqlite3.Connection, key: str, length: int
    ) -> Transcript | None:
        cached = self._transcripts.get(key)
        if cached is None or not cached.records or len(cached.records) > length:
            return None
        row = db.execute(
            "SELECT record_json FROM transcript WHERE scope_key=? AND position=?",
            (key, len(cached.records) - 1),
        ).fetchone()
        unchanged = row is not None and isinstance(row[0], str)
        return cached if unchanged and row_checksum(row[0]) == cached.last_checksum else None

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
        committed_at = as_number(head[0], where, "committed_at")
        base = as_int(head[1], where, "base")
        rows = db.execute(
            "SELECT revision, kind, payload FROM revisions WHERE scope_key=? "
            "AND revision BETWEEN ? AND ? ORDER BY revision",
            (key, base, revision),
        ).fetchall()
        if len(rows) != revision - base + 1 or rows[0][1] == "delta":
            raise corrupt(where, f"the revisions from its checkpoint {base} are incomplete")
        records: list[Record] = []
        for number, kind, payload in rows:
            at = f"revisions, scope {scope}, revision {number}"
            records = self._decode(db, kind, parse_json(payload, at), records, transcript, at)
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
        raise corrupt(where, f"unknown revision kind {str(kind)[:40]!r}")

    def _body(self, db: sqlite3.Connection, digest: object, where: str) -> str:
        digest = as_text(digest, where, "body hash")
        row = db.execute("SELECT body FROM bodies WHERE hash=?", (digest,)).fetchone()
        if row is None or not isinstance(row[0], str) or body_hash(row[0]) != digest:
            raise StorageError(f"The stored body {digest[:12]}… ({where}) is missing or corrupt")
        return row[0]

    def _full(self, db: sqlite3.Connection, payload: Any, where: str) -> list[Record]:
        if not isinstance(payload, list):
            raise corrupt(where, "a full revision is not a list of records")
        records = []
        for meta in payload:
            if not isinstance(meta, dict):
                raise corrupt(where, "a record is not a JSON object")
            records.append(
                parse_record(meta, self._body(db, field(meta, "body_hash", where), where), where)
            )
        return records

    def _from_checkpoint(
        self, db: sqlite3.Connection, payload: Any, transcript: Sequence[Record], where: str
    ) -> list[Record]:
        if not isinstance(payload, list):
            raise corrupt(where, "a checkpoint is not a list")
        records: list[Record] = []
        for item in payload:
            if isinstance(item, list):
                start, end = parse_span(item, len(transcript), where)
                records.extend(transcript[start:end])
            elif isinstance(item, dict) and "at" in item:
                p = as_int(item["at"], where, "at")
                if not 0 <= p < len(transcript):
                    raise corrupt(where, f"position {p} is outside the transcript")
                records.append(transcript[p].with_body(self._body(db, item.get("body"), where)))
            else:
                raise corrupt(where, "a checkpoint item is neither a range nor a body")
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
            raise corrupt(where, "a delta is not a JSON object")
        drops = payload.get("drop", [])
        if not isinstance(drops, list) or not all(isinstance(d, str) for d in drops):
            raise corrupt(where, "drop is not a list of ids")
        if drops:
            gone = set(drops)
            kept = [r for r in records if r.id not in gone]
            if len(gone) != len(drops) or len(kept) != len(records) - len(gone):
                raise corrupt(where, "it drops an id the revision before it does not hold")
            records = kept
        replaced = payload.get("set", [])
        if not isinstance(replaced, list):
            raise corrupt(where, "set is not a list")
        if replaced:
            records = self._replace_bodies(db, records, replaced, where)
        if "add" in payload:
            start, end = parse_span(payload["add"], len(transcript), where)
            records = [*records, *transcript[start:end]]
        return records

    def _replace_bodies(
        self, db: sqlite3.Connection, records: list[Record], replaced: list[Any], where: str
    ) -> list[Record]:
        index = {r.id: i for i, r in enumerate(records)}
        out = list(records)
        for item in replaced:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                raise corrupt(where, "a replacement is not [id, body hash]")
            i = index.get(item[0])
            if i is None:
                raise corrupt(where, f"it replaces {item[0][:40]!r}, which is not there")
            out[i] = out[i].with_body(self._body(db, item[1], where))
        return out

    def revision_numbers(self, scope: Scope) -> list[int]:
        """Every committed revision of ``scope``, oldest first."""

        def read(db: sqlite3.Connection) -> list[int]:
            rows = db.execute(
                "SELECT revision FROM revisions WHERE scope_key=? ORDER BY revision",
                (scope_key(scope),),
            )
            return [as_int(r[0], f"revisions, scope {scope}", "revision") for r in rows]

        return self._read(scope, read)

    def committed_at(self, scope: Scope) -> dict[int, float]:
        """Revision -> commit time (Unix seconds); records carry no time of their own."""

        def read(db: sqlite3.Connection) -> dict[int, float]:
            out = {}
            for revision, at in db.execute(
                "SELECT revision, committed_at FROM revisions WHERE scope_key=?",
                (scope_key(scope),),
            ):
                where = f"revisions, scope {scope}, revision {revision}"
                out[as_int(revision, where, "revision")] = as_number(at, where, "committed_at")
            return out

        return self._read(scope, read)

    def load_revision(self, scope: Scope, revision: int) -> Snapshot:
        """A past working revision, for history views and audits."""
        key = scope_key(scope)

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
                (scope_key(scope),),
            ):
                where = f"tombstones, scope {scope}, record {str(record_id)[:40]!r}"
                out[as_text(record_id, where, "record_id")] = as_int(revision, where, "revision")
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
                user, conversation, branch = (as_text(p, where, "scope part") for p in parts)
                out.append(Scope(user_id=user, conversation_id=conversation, branch_id=branch))
            return out

        return self._read("the session list", read)


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
