"""The node store: one SQLite file per corpus (WAL) holding digest rows, vectors, the persisted
dirty queue, the guard's negative cache, metadata and adapter state.

The dirty queue makes intake at-least-once (fix H): a mark is committed before it returns, and
a ref leaves the queue only in the same transaction that applied it, so a crash anywhere loses
nothing — reprocessing an applied ref is a short-circuit.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from picocontext.distill.data import DigestNode, Unit
from picocontext.distill.errors import StoreError

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE digest_nodes (
    id TEXT PRIMARY KEY,
    level INTEGER NOT NULL,
    kind TEXT NOT NULL,
    scope_name TEXT NOT NULL DEFAULT '',
    scope_id TEXT NOT NULL DEFAULT '',
    source_id TEXT NOT NULL DEFAULT '',
    source_kind TEXT NOT NULL DEFAULT '',
    summary_hash TEXT NOT NULL DEFAULT '',
    content_hash TEXT NOT NULL DEFAULT '',
    sem_hash TEXT NOT NULL DEFAULT '',
    membership_hash TEXT NOT NULL DEFAULT '',
    source_hash TEXT NOT NULL DEFAULT '',
    child_ids TEXT NOT NULL DEFAULT '[]',
    parent_ids TEXT NOT NULL DEFAULT '[]',
    updated_at INTEGER NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0,
    title TEXT NOT NULL DEFAULT ''
);
CREATE INDEX digest_nodes_level ON digest_nodes(level);
CREATE INDEX digest_nodes_source ON digest_nodes(source_kind, source_id);
CREATE INDEX digest_nodes_summary ON digest_nodes(summary_hash);
CREATE INDEX digest_nodes_content ON digest_nodes(content_hash);
CREATE TABLE digest_vectors (
    id TEXT PRIMARY KEY,
    dims INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE dirty_refs (
    ref TEXT PRIMARY KEY,
    op TEXT NOT NULL CHECK (op IN ('upsert', 'delete')),
    payload TEXT,
    seq INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE guard_blocked (
    node_id TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    guard_version TEXT NOT NULL,
    reason TEXT NOT NULL,
    PRIMARY KEY (node_id, content_hash, guard_version)
);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE source_state (
    adapter TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (adapter, key)
);
"""

_COLUMNS = (
    "id, level, kind, scope_name, scope_id, source_id, source_kind, summary_hash, content_hash, "
    "sem_hash, membership_hash, source_hash, child_ids, parent_ids, updated_at, tokens, title"
)


class DirtyRef(BaseModel):
    """One pending change: an upsert carries the unit (latest wins), a delete carries none."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    ref: str
    op: str
    unit: Unit | None = None
    source_kind: str = ""
    unit_id: str = ""
    seq: int


def _row_to_node(row: Sequence[Any]) -> DigestNode:
    return DigestNode.model_construct(
        id=row[0],
        level=int(row[1]),
        kind=row[2],
        scope_name=row[3],
        scope_id=row[4],
        source_id=row[5],
        source_kind=row[6],
        summary_hash=row[7],
        content_hash=row[8],
        sem_hash=row[9],
        membership_hash=row[10],
        source_hash=row[11],
        child_ids=tuple(json.loads(row[12])),
        parent_ids=tuple(json.loads(row[13])),
        updated_at=int(row[14]),
        tokens=int(row[15]),
        title=row[16],
    )


class NodeStore:
    """Thread-safe access to one corpus database. Counts node writes for the invariants."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._depth = 0
        self.node_writes = 0
        # Bumped by every write through this connection; with SQLite's data_version (which
        # changes when another connection commits) it keys the cache of nodes().
        self._generation = 0
        self._nodes_cache: dict[int | None, tuple[tuple[int, int], list[DigestNode]]] = {}
        if self.path.exists() and not self.path.is_file():  # sqlite would block on a FIFO
            raise StoreError(f"Cannot open the digest store {self.path}: it is not a file.")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None, timeout=30.0
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode survives process kills (only power loss can drop the last
            # commits), which is the crash model of a desktop worker.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._prepare()
        except sqlite3.Error as exc:
            raise StoreError(f"Cannot open the digest store {self.path}: {exc}") from exc
        except OSError as exc:
            raise StoreError(
                f"Cannot create the digest store {self.path}: {exc.strerror or exc}."
            ) from exc

    def _prepare(self) -> None:
        with self.transaction():
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            tables = {
                r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            if version == 0 and not tables:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            elif version != SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} is not a digest store of schema {SCHEMA_VERSION} "
                    f"(found schema {version}, tables {sorted(tables)}); refusing to touch it."
                )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """A write transaction; nested uses join the outer one."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"Cannot write {self.path}: {exc}") from exc
            self._depth = 1
            try:
                yield
            except BaseException:
                self._depth = 0
                self._generation += 1  # what a read cached inside the transaction is gone
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                raise
            self._depth = 0
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreError(f"Cannot commit to {self.path}: {exc}") from exc

    def _q(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"Digest store {self.path}: {exc}") from exc

    def _x(self, sql: str, args: Sequence[Any] = ()) -> int:
        with self._lock:
            self._generation += 1
            try:
                return self._db.execute(sql, args).rowcount
            except sqlite3.Error as exc:
                raise StoreError(f"Digest store {self.path}: {exc}") from exc

    # -- nodes -------------------------------------------------------------------------------
    def get(self, node_id: str) -> DigestNode | None:
        rows = self._q(f"SELECT {_COLUMNS} FROM digest_nodes WHERE id=?", (node_id,))
        return _row_to_node(rows[0]) if rows else None

    def nodes(self, level: int | None = None) -> list[DigestNode]:
        """All nodes (or one level), ordered by (level, id). Read once per state of the
        database: a reader asks for every node many times between writes (a conversation's
        40 questions, 150 times), and building the nodes was most of its time."""
        with self._lock:
            if self._depth:
                # inside a write transaction: what it reads may yet be rolled back
                return self._read_nodes(level)
            version = (int(self._q("PRAGMA data_version")[0][0]), self._generation)
            cached = self._nodes_cache.get(level)
            if cached is not None and cached[0] == version:
                return list(cached[1])
            found = self._read_nodes(level)
            self._nodes_cache[level] = (version, found)
            return list(found)

    def _read_nodes(self, level: int | None) -> list[DigestNode]:
        if level is None:
            rows = self._q(f"SELECT {_COLUMNS} FROM digest_nodes ORDER BY level, id")
        else:
            rows = self._q(
                f"SELECT {_COLUMNS} FROM digest_nodes WHERE level=? ORDER BY id", (level,)
            )
        return [_row_to_node(r) for r in rows]

    def count(self) -> int:
        return int(self._q("SELECT COUNT(*) FROM digest_nodes")[0][0])

    def l0_hashes(self) -> dict[str, tuple[str, str]]:
        """L0 id -> (content_hash, membership_hash): what a reconcile compares against."""
        return {
            str(r[0]): (str(r[1]), str(r[2]))
            for r in self._q(
                "SELECT id, content_hash, membership_hash FROM digest_nodes WHERE level=0"
            )
        }

    def find_donor(self, content_hash: str, exclude_id: str) -> DigestNode | None:
        """The first node by id with this ContentHash and a summary (exact dedup)."""
        rows = self._q(
            f"SELECT {_COLUMNS} FROM digest_nodes WHERE content_hash=? AND id<>? "
            "AND summary_hash<>'' ORDER BY id LIMIT 1",
            (content_hash, exclude_id),
        )
        return _row_to_node(rows[0]) if rows else None

    def by_content_hash(self, content_hash: str) -> list[DigestNode]:
        rows = self._q(
            f"SELECT {_COLUMNS} FROM digest_nodes WHERE content_hash=? ORDER BY level, id",
            (content_hash,),
        )
        return [_row_to_node(r) for r in rows]

    def upsert(self, node: DigestNode) -> None:
        self._x(
            f"INSERT OR REPLACE INTO digest_nodes({_COLUMNS}) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                node.id,
                node.level,
                node.kind,
                node.scope_name,
                node.scope_id,
                node.source_id,
                node.source_kind,
                node.summary_hash,
                node.content_hash,
                node.sem_hash,
                node.membership_hash,
                node.source_hash,
                json.dumps(list(node.child_ids)),
                json.dumps(list(node.parent_ids)),
                node.updated_at,
                node.tokens,
                node.title,
            ),
        )
        self.node_writes += 1

    def delete(self, node_id: str) -> bool:
        """Delete a node, its vector, and its id from every node that lists it as a child,
        in one transaction: no committed state (what a reader sees, or a crash leaves) holds a
        child id without its node. The parents' hashes are brought up to date by the next
        rollup, which every delete requests."""
        with self.transaction():
            removed = self._x("DELETE FROM digest_nodes WHERE id=?", (node_id,)) > 0
            self._x("DELETE FROM digest_vectors WHERE id=?", (node_id,))
            if removed:
                self.node_writes += 1
                self._drop_child(node_id)
        return removed

    def _drop_child(self, child_id: str) -> None:
        rows = self._q(
            f"SELECT {_COLUMNS} FROM digest_nodes WHERE level > 0 AND instr(child_ids, ?) > 0",
            (json.dumps(child_id),),
        )
        for parent in map(_row_to_node, rows):
            if child_id in parent.child_ids:
                kept = tuple(c for c in parent.child_ids if c != child_id)
                self.upsert(parent.model_copy(update={"child_ids": kept}))

    def clear(self) -> None:
        """Forget every node, vector, mark, negative-cache entry, adapter state and setting
        (blobs stay in the CAS for ``gc``): the corpus is then as a new one."""
        with self.transaction():
            for table in (
                "digest_nodes",
                "digest_vectors",
                "dirty_refs",
                "guard_blocked",
                "meta",
                "source_state",
            ):
                self._x(f"DELETE FROM {table}")

    def live_blob_addresses(self) -> set[str]:
        """GC roots: every summary and source blob a live node references."""
        out: set[str] = set()
        for summary_hash, source_hash in self._q(
            "SELECT summary_hash, source_hash FROM digest_nodes"
        ):
            if summary_hash:
                out.add(str(summary_hash))
            if source_hash:
                out.add(str(source_hash))
        return out

    # -- vectors -----------------------------------------------------------------------------
    def put_vector(self, node_id: str, vector: npt.NDArray[np.float32]) -> None:
        vec = np.asarray(vector, dtype=np.float32).reshape(-1)
        self._x(
            "INSERT OR REPLACE INTO digest_vectors(id, dims, data) VALUES (?,?,?)",
            (node_id, int(vec.size), vec.tobytes()),
        )

    def deferred_ids(self) -> list[str]:
        """Internal nodes whose summary is pending (deferred views), sorted by id."""
        return sorted(
            str(r[0])
            for r in self._q("SELECT id FROM digest_nodes WHERE level > 0 AND summary_hash = ''")
        )

    def delete_vector(self, node_id: str) -> None:
        """A node whose summary is pending has no embedding until it is written."""
        self._x("DELETE FROM digest_vectors WHERE id=?", (node_id,))

    def get_vector(self, node_id: str) -> npt.NDArray[np.float32] | None:
        rows = self._q("SELECT dims, data FROM digest_vectors WHERE id=?", (node_id,))
        if not rows:
            return None
        return np.frombuffer(rows[0][1], dtype=np.float32).copy()

    def vectors(self) -> dict[str, npt.NDArray[np.float32]]:
        return {
            str(r[0]): np.frombuffer(r[1], dtype=np.float32).copy()
            for r in self._q("SELECT id, data FROM digest_vectors")
        }

    # -- dirty queue -------------------------------------------------------------------------
    def mark(self, ref: str, op: str, unit: Unit | None, source_kind: str, unit_id: str) -> int:
        """Persist a pending change (latest wins per ref) and return its sequence number."""
        payload = json.dumps(
            {
                "unit": unit.model_dump(mode="json") if unit is not None else None,
                "source_kind": source_kind,
                "unit_id": unit_id,
            }
        )
        with self.transaction():
            seq = int(self.meta_get("dirty_seq", "0")) + 1
            self.meta_set("dirty_seq", str(seq))
            self._x(
                "INSERT OR REPLACE INTO dirty_refs(ref, op, payload, seq) VALUES (?,?,?,?)",
                (ref, op, payload, seq),
            )
        return seq

    def pending(self) -> list[DirtyRef]:
        """Pending refs in sorted ref order (fix L: a deterministic sweep order)."""
        out = []
        for ref, op, payload, seq in self._q(
            "SELECT ref, op, payload, seq FROM dirty_refs ORDER BY ref"
        ):
            data = json.loads(payload)
            unit = Unit.model_validate(data["unit"]) if data.get("unit") else None
            out.append(
                DirtyRef(
                    ref=ref,
                    op=op,
                    unit=unit,
                    source_kind=data.get("source_kind", ""),
                    unit_id=data.get("unit_id", ""),
                    seq=int(seq),
                )
            )
        return out

    def pending_count(self) -> int:
        return int(self._q("SELECT COUNT(*) FROM dirty_refs")[0][0])

    def fail_dirty(self, ref: str, seq: int, max_attempts: int) -> bool:
        """Count a failed attempt; drop the ref after ``max_attempts``. True if dropped."""
        self._x("UPDATE dirty_refs SET attempts=attempts+1 WHERE ref=? AND seq=?", (ref, seq))
        rows = self._q("SELECT attempts FROM dirty_refs WHERE ref=? AND seq=?", (ref, seq))
        if rows and int(rows[0][0]) >= max_attempts:
            self.clear_dirty(ref, seq)
            return True
        return False

    def clear_dirty(self, ref: str, seq: int) -> None:
        """Drop a processed ref unless it was re-marked meanwhile (a newer seq stays)."""
        self._x("DELETE FROM dirty_refs WHERE ref=? AND seq=?", (ref, seq))

    # -- negative cache (fix E) ------------------------------------------------------------
    def is_blocked(self, node_id: str, content_hash: str, guard_version: str) -> bool:
        return bool(
            self._q(
                "SELECT 1 FROM guard_blocked WHERE node_id=? AND content_hash=? "
                "AND guard_version=?",
                (node_id, content_hash, guard_version),
            )
        )

    def add_blocked(self, node_id: str, content_hash: str, guard_version: str, reason: str) -> None:
        self._x(
            "INSERT OR REPLACE INTO guard_blocked(node_id, content_hash, guard_version, reason) "
            "VALUES (?,?,?,?)",
            (node_id, content_hash, guard_version, reason),
        )

    def clear_blocked(self, node_id: str) -> None:
        self._x("DELETE FROM guard_blocked WHERE node_id=?", (node_id,))

    def blocked_count(self) -> int:
        return int(self._q("SELECT COUNT(*) FROM guard_blocked")[0][0])

    # -- metadata and adapter state ----------------------------------------------------------
    def meta_get(self, key: str, default: str = "") -> str:
        rows = self._q("SELECT value FROM meta WHERE key=?", (key,))
        return str(rows[0][0]) if rows else default

    def meta_set(self, key: str, value: str) -> None:
        self._x("INSERT OR REPLACE INTO meta(key, value) VALUES (?,?)", (key, value))

    def state_get(self, adapter: str, key: str) -> str | None:
        rows = self._q("SELECT value FROM source_state WHERE adapter=? AND key=?", (adapter, key))
        return str(rows[0][0]) if rows else None

    def state_set(self, adapter: str, key: str, value: str) -> None:
        self._x(
            "INSERT OR REPLACE INTO source_state(adapter, key, value) VALUES (?,?,?)",
            (adapter, key, value),
        )
