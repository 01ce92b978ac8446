"""Revisions stored by change: a save writes its transaction, checkpoints bound the replay,
every revision loads exactly, and a schema-1 store migrates without losing anything."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import picocontext.persistence as persistence
import picocontext.persistence.migrations as migrations
from kettle import SCOPE, kettle_snapshot
from picocontext import (
    AppendTransaction,
    ContextSession,
    Delete,
    Edit,
    Record,
    Replace,
    Role,
    Snapshot,
    SQLiteStore,
    StorageError,
    ToolCall,
    WorkingContext,
)
from picocontext.models import ByteCounter, ScriptedBackend
from schema1 import kettle_history, write_schema_1


def columns(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    db = sqlite3.connect(path)
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    out = {t: db.execute(f"PRAGMA table_info({t})").fetchall() for t in sorted(tables)}
    db.close()
    return out


def rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


# -- migrations -----------------------------------------------------------------------------
def test_a_schema_1_store_opens_migrated_with_nothing_lost(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    history = kettle_history()
    write_schema_1(path, history)
    old_payloads = rows(path, "SELECT revision, records_json FROM revisions ORDER BY revision")
    with SQLiteStore(path) as store:
        assert store.load(SCOPE) == history[-1]
        for state in history:
            assert store.load_revision(SCOPE, state.revision) == state.snapshot
        assert store.revision_numbers(SCOPE) == [0, 1, 2]
        assert store.committed_at(SCOPE) == {0: 1000.0, 1: 1001.0, 2: 1002.0}
        assert store.tombstones(SCOPE) == {"old-call": 1, "old-result": 1}
        assert store.scopes() == [SCOPE]
    assert rows(path, "PRAGMA user_version") == [(persistence.SCHEMA_VERSION,)]
    # the old rows were not rewritten: they are read as they are
    assert rows(path, "SELECT revision, payload FROM revisions ORDER BY revision") == old_payloads
    assert columns(path) == columns_of_a_new_store(tmp_path)


def columns_of_a_new_store(tmp_path: Path) -> dict[str, list[tuple[Any, ...]]]:
    SQLiteStore(tmp_path / "new.db").close()
    return columns(tmp_path / "new.db")


def test_a_migrated_store_keeps_going_by_change(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    history = kettle_history()
    write_schema_1(path, history)
    with SQLiteStore(path) as store:
        s = ContextSession.open(store, SCOPE, ByteCounter(), ScriptedBackend())
        s.append_records([Record(id="q3", role=Role.USER, body="more")])
        s.apply(Edit(scope=SCOPE, base_revision=3, operations=(Delete(record_id="q3"),)))
        final = s.state
    kinds = rows(path, "SELECT revision, kind FROM revisions ORDER BY revision")
    assert kinds == [(0, "full"), (1, "full"), (2, "full"), (3, "delta"), (4, "delta")]
    with SQLiteStore(path) as store:
        assert store.load(SCOPE) == final
        for state in history:
            assert store.load_revision(SCOPE, state.revision) == state.snapshot
        assert store.load_revision(SCOPE, 3).ids == [*history[-1].snapshot.ids, "q3"]
        assert store.tombstones(SCOPE) == {"old-call": 1, "old-result": 1, "q3": 4}


def test_migrations_are_numbered_from_zero_and_end_at_the_schema_version() -> None:
    assert sorted(persistence.MIGRATIONS) == list(range(persistence.SCHEMA_VERSION))


def test_a_failing_migration_leaves_the_old_store_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    write_schema_1(path, kettle_history())
    before = columns(path)

    def half_done(db: sqlite3.Connection) -> None:
        migrations._m002_revisions_by_change(db)
        raise StorageError("migration interrupted")

    monkeypatch.setitem(migrations.MIGRATIONS, 1, half_done)
    with pytest.raises(StorageError, match="interrupted"):
        SQLiteStore(path)
    assert rows(path, "PRAGMA user_version") == [(1,)]
    assert columns(path) == before


# -- revisions by change --------------------------------------------------------------------
def big_history(n: int) -> Snapshot:
    records = [
        Record(id="instructions", role=Role.SYSTEM, body="Keep facts."),
        Record(id="task", role=Role.USER, protected=True, body="Track the log."),
    ]
    records += [Record(id=f"r{i}", role=Role.USER, body=f"entry {i} " * 40) for i in range(n)]
    return Snapshot(scope=SCOPE, records=tuple(records))


def file_bytes(path: Path) -> int:
    rows(path, "PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def test_an_append_costs_its_own_size_not_the_sessions(tmp_path: Path) -> None:
    path = tmp_path / "big.db"
    with SQLiteStore(path) as store:
        s = ContextSession(big_history(2_000), ByteCounter(), ScriptedBackend(), store)
        before = file_bytes(path)
        for i in range(200):
            s.append_records([Record(id=f"a{i}", role=Role.USER, body=f"note {i}")])
    growth = file_bytes(path) - before
    # a full copy of the record list per revision would be about 200 x 140 kB here
    assert growth < 200_000, growth
    payloads = rows(path, "SELECT kind, length(payload) FROM revisions WHERE revision > 0")
    deltas = [size for kind, size in payloads if kind == "delta"]
    checkpoints = [size for kind, size in payloads if kind == "checkpoint"]
    assert len(checkpoints) == 200 // persistence.CHECKPOINT_EVERY
    assert max(deltas) < 40 and max(checkpoints) < 40  # '{"add": [p, p+1]}' and '[[0, n]]'


def test_reading_replays_at_most_one_checkpoint_interval(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        s = ContextSession(kettle_snapshot(), ByteCounter(), ScriptedBackend(), store)
        for i in range(3 * persistence.CHECKPOINT_EVERY):
            s.append_records([Record(id=f"a{i}", role=Role.USER, body=f"note {i}")])
    chain = rows(path, "SELECT revision - base FROM revisions")
    assert max(r[0] for r in chain) == persistence.CHECKPOINT_EVERY - 1


def test_a_second_writer_on_the_same_file_gets_exact_revisions(tmp_path: Path) -> None:
    """Each store object remembers only what it wrote or read; a commit by another one makes
    it write a checkpoint instead of a delta against a head it no longer holds."""
    path = tmp_path / "s.db"
    expected = []
    with SQLiteStore(path) as a, SQLiteStore(path) as b:
        for i in range(6):
            store = (a, b)[i % 2]
            s = ContextSession.open(
                store, SCOPE, ByteCounter(), ScriptedBackend(), kettle_snapshot()
            )
            if i:
                s.append_records([Record(id=f"w{i}", role=Role.USER, body=f"writer {i % 2}")])
            expected.append(s.context)
        assert [a.load_revision(SCOPE, r.revision) for r in expected] == expected


def test_a_working_record_outside_the_transcript_is_refused(tmp_path: Path) -> None:
    start = WorkingContext.start(kettle_snapshot())
    stray = Record(id="stray", role=Role.USER, body="never appended")
    forged = WorkingContext(
        original=start.original,
        snapshot=start.snapshot.model_copy(update={"records": (*start.snapshot.records, stray)}),
    )
    with SQLiteStore(tmp_path / "s.db") as store, pytest.raises(StorageError, match="stray"):
        store.save(forged)
    with SQLiteStore(tmp_path / "s.db") as store:
        assert store.load(SCOPE) is None


def test_a_transcript_that_disagrees_with_the_stored_one_is_refused(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        s = ContextSession(kettle_snapshot(), ByteCounter(), ScriptedBackend(), store)
        state = s.state
        changed = state.original.records[1].with_body("another task")
        other = Snapshot(
            scope=SCOPE,
            revision=0,
            records=(state.original.records[0], changed, *state.original.records[2:]),
        )
        base = WorkingContext.start(other)
        note = (Record(id="n", role=Role.USER, body="x"),)
        candidate = base.append(AppendTransaction(scope=SCOPE, base_revision=0, records=note))
        with pytest.raises(StorageError, match="does not match"):
            store.save(candidate)


# -- every revision loads exactly, whatever the sequence of commits -------------------------
NOTE_IDS = st.integers(min_value=0, max_value=10_000)


@st.composite
def commits(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """A sequence of appends (notes or tool groups), replacements, deletions and reopens."""
    steps: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(min_value=1, max_value=25))):
        kind = draw(st.sampled_from(["note", "group", "replace", "delete", "reopen"]))
        steps.append((kind, draw(st.integers(min_value=0, max_value=10**6))))
    return steps


def step(state: WorkingContext, kind: str, n: int, counter: list[int]) -> WorkingContext:
    snap = state.snapshot
    notes = [r for r in snap.records if not r.protected and r.role is Role.USER]
    results = [r for r in snap.records if not r.protected and r.role is Role.TOOL]
    editable = notes if kind == "delete" else notes + results
    counter[0] += 1
    c = counter[0]
    if kind == "note" or (kind in ("replace", "delete") and not editable):
        new: tuple[Record, ...] = (Record(id=f"n{c}", role=Role.USER, body=f"note {n}"),)
    elif kind == "group":
        call = ToolCall(id=f"c{c}", name="look", arguments='{"n":1}')
        new = (
            Record(id=f"g{c}", role=Role.ASSISTANT, body="", tool_calls=(call,)),
            Record(id=f"t{c}", role=Role.TOOL, tool_call_id=f"c{c}", body=f"result {n}"),
        )
    else:
        target = editable[n % len(editable)]
        op: Delete | Replace = (
            Delete(record_id=target.id)
            if kind == "delete"
            else Replace(record_id=target.id, body=f"{target.body} / {n}")
        )
        return state.apply(Edit(scope=SCOPE, base_revision=snap.revision, operations=(op,)))
    return state.append(AppendTransaction(scope=SCOPE, base_revision=snap.revision, records=new))


@settings(max_examples=40, deadline=None)
@given(plan=commits(), every=st.integers(min_value=1, max_value=5))
def test_every_revision_loads_exactly(tmp_path_factory: Any, plan: Any, every: int) -> None:
    path = tmp_path_factory.mktemp("h") / "s.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(persistence, "CHECKPOINT_EVERY", every)
        store = SQLiteStore(path)
        state = WorkingContext.start(kettle_snapshot())
        store.save(state)
        expected = {0: state.snapshot}
        deleted: dict[str, int] = {}
        counter = [0]
        try:
            for kind, n in plan:
                if kind == "reopen":
                    store.close()
                    store = SQLiteStore(path)
                    continue
                nxt = step(state, kind, n, counter)
                store.save(nxt)
                for record_id in nxt.deleted_ids():
                    deleted.setdefault(record_id, nxt.revision)
                state = nxt
                expected[state.revision] = state.snapshot
            for fresh in (False, True):
                if fresh:
                    store.close()
                    store = SQLiteStore(path)
                assert store.load(SCOPE) == state
                for revision, snapshot in expected.items():
                    assert store.load_revision(SCOPE, revision) == snapshot
                assert store.tombstones(SCOPE) == deleted
        finally:
            store.close()


WRITER = """
import sys
from picocontext import ContextSession, Record, Role, SQLiteStore, StorageError
from picocontext.models import ByteCounter, ScriptedBackend
sys.path.insert(0, sys.argv[3])
from kettle import SCOPE, kettle_snapshot
store = SQLiteStore(sys.argv[1])
name, done, session = sys.argv[2], 0, None
while done < 40:
    try:
        if session is None:
            session = ContextSession.open(store, SCOPE, ByteCounter(), ScriptedBackend(),
                                          kettle_snapshot())
        session.append_records([Record(id=f"{name}{done}", role=Role.USER, body=name * done)])
        done += 1
    except StorageError:
        session = None  # another process committed first: reopen at its revision and retry
print("ok", flush=True)
"""


def test_two_processes_appending_lose_nothing_and_every_revision_loads(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "shared.db"
    support = str(Path(__file__).resolve().parents[1] / "support")
    children = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), name, support],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    for child in children:
        out, err = child.communicate(timeout=240)
        assert out.strip() == "ok", err
    with SQLiteStore(path) as store:
        final = store.load(SCOPE)
        assert final is not None
        appended = [r.id for r in final.original.records[len(kettle_snapshot().records) :]]
        assert sorted(appended) == sorted(f"{n}{i}" for n in "ab" for i in range(40))
        assert store.revision_numbers(SCOPE) == list(range(81))
        previous = store.load_revision(SCOPE, 0).records
        for revision in range(1, 81):
            records = store.load_revision(SCOPE, revision).records
            assert records[:-1] == previous  # each revision is the one before plus one record
            previous = records
        assert previous == final.snapshot.records
