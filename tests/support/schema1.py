"""A schema-1 session store written exactly as the first SQLite store wrote it, for tests of
the migration and of row validation (which must hold for old rows too)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from kettle import GOOD_EDIT_OPS, SCOPE, kettle_snapshot
from picocontext import AppendTransaction, Edit, Record, Role, WorkingContext

# The schema-1 layout exactly as the first SQLite store created it.
SCHEMA_1 = """
CREATE TABLE sessions (
    scope_key TEXT PRIMARY KEY, user_id TEXT NOT NULL, conversation_id TEXT NOT NULL,
    branch_id TEXT NOT NULL, head_revision INTEGER NOT NULL,
    transcript_revision INTEGER NOT NULL, transcript_length INTEGER NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE transcript (
    scope_key TEXT NOT NULL, position INTEGER NOT NULL, record_id TEXT NOT NULL,
    record_json TEXT NOT NULL, PRIMARY KEY (scope_key, position)
);
CREATE TABLE bodies (hash TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE revisions (
    scope_key TEXT NOT NULL, revision INTEGER NOT NULL, records_json TEXT NOT NULL,
    committed_at REAL NOT NULL, PRIMARY KEY (scope_key, revision)
);
CREATE TABLE tombstones (
    scope_key TEXT NOT NULL, record_id TEXT NOT NULL, deleted_at_revision INTEGER NOT NULL,
    PRIMARY KEY (scope_key, record_id)
);
"""


def v1_meta(record: Record, field: str, value: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"id": record.id, "role": record.role.value, field: value}
    meta["protected"] = record.protected
    if record.tool_calls:
        meta["calls"] = [[c.id, c.name, c.arguments] for c in record.tool_calls]
    if record.tool_call_id is not None:
        meta["result_for"] = record.tool_call_id
    return meta


def write_schema_1(path: Path, states: list[WorkingContext]) -> None:
    """What a schema-1 store wrote for these commits: every revision as a full list of
    records, each body once by its SHA-256."""
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_1)
    db.execute("PRAGMA user_version=1")
    key = json.dumps([SCOPE.user_id, SCOPE.conversation_id, SCOPE.branch_id])
    stored = 0
    for n, state in enumerate(states):
        for position in range(stored, len(state.original.records)):
            record = state.original.records[position]
            text = json.dumps(v1_meta(record, "body", record.body), ensure_ascii=False)
            db.execute("INSERT INTO transcript VALUES (?,?,?,?)", (key, position, record.id, text))
        stored = len(state.original.records)
        metas = []
        for record in state.snapshot.records:
            digest = hashlib.sha256(record.body.encode()).hexdigest()
            db.execute("INSERT OR IGNORE INTO bodies VALUES (?,?)", (digest, record.body))
            metas.append(v1_meta(record, "body_hash", digest))
        db.execute(
            "INSERT INTO revisions VALUES (?,?,?,?)",
            (key, state.revision, json.dumps(metas, ensure_ascii=False), 1000.0 + n),
        )
        for record_id in state.deleted_ids():
            db.execute("INSERT OR IGNORE INTO tombstones VALUES (?,?,?)", (key, record_id, n))
        db.execute("DELETE FROM sessions")
        db.execute(
            "INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?)",
            (
                key,
                *(SCOPE.user_id, SCOPE.conversation_id, SCOPE.branch_id),
                state.revision,
                state.original.revision,
                stored,
                1000.0 + n,
            ),
        )
    db.commit()
    db.close()


def kettle_history() -> list[WorkingContext]:
    """Revision 0, an edit that deletes a group (1) and an append (2)."""
    first = WorkingContext.start(kettle_snapshot())
    edited = first.apply(Edit(scope=SCOPE, base_revision=0, operations=GOOD_EDIT_OPS))
    note = Record(id="q2", role=Role.USER, protected=True, body="nul \x00 and ünïcode 🫖")
    appended = edited.append(AppendTransaction(scope=SCOPE, base_revision=1, records=(note,)))
    return [first, edited, appended]
