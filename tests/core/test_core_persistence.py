"""Durable sessions: SQLite keeps transcript, every revision and tombstones; reopening resumes
exactly; schema versions are checked; kill -9 never exposes a half-written commit."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kettle import GOOD_EDIT_OPS, SCOPE, kettle_snapshot, phased
from picocontext import (
    ContextSession,
    Edit,
    Record,
    Replace,
    Role,
    Scope,
    SQLiteStore,
    StorageError,
    WorkingContext,
    validate_snapshot,
)
from picocontext.models import ByteCounter


def open_session(store: SQLiteStore) -> ContextSession:
    return ContextSession.open(store, SCOPE, ByteCounter(), phased([]), initial=kettle_snapshot())


def test_reopen_resumes_exactly_where_it_was(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    with SQLiteStore(path) as store:
        s = open_session(store)
        s.apply(Edit(scope=SCOPE, base_revision=0, operations=GOOD_EDIT_OPS))
        s.append_records(
            [Record(id="q2", role=Role.USER, protected=True, body="nul \x00 and ünïcode 🫖")]
        )
        before = s.state
    with SQLiteStore(path) as store:
        again = open_session(store)
        assert again.state == before
        assert again.original_context.revision == 2
        assert store.revision_numbers(SCOPE) == [0, 1, 2]
        assert store.load_revision(SCOPE, 0).records == kettle_snapshot().records
        assert store.tombstones(SCOPE) == {"old-call": 1, "old-result": 1}
        assert store.scopes() == [SCOPE]
        times = store.committed_at(SCOPE)
        assert sorted(times) == [0, 1, 2] and times[0] <= times[1] <= times[2]


def test_open_without_history_or_initial_is_a_clear_error(tmp_path: Path) -> None:
    with (
        SQLiteStore(tmp_path / "s.db") as store,
        pytest.raises(StorageError, match="No stored session"),
    ):
        ContextSession.open(store, SCOPE, ByteCounter(), phased([]))


def test_branches_are_separate_rows(tmp_path: Path) -> None:
    other = Scope(user_id="u-1", conversation_id="kettle-order", branch_id="alt")
    with SQLiteStore(tmp_path / "s.db") as store:
        a = open_session(store)
        ContextSession(kettle_snapshot(other), ByteCounter(), phased([]), store)
        a.apply(Edit(scope=SCOPE, base_revision=0, operations=GOOD_EDIT_OPS))
        assert store.load(other).snapshot.revision == 0  # type: ignore[union-attr]
        assert store.load(SCOPE).snapshot.revision == 1  # type: ignore[union-attr]


def test_stale_writer_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store_a, SQLiteStore(path) as store_b:
        a = open_session(store_a)
        b = open_session(store_b)
        a.apply(Edit(scope=SCOPE, base_revision=0, operations=GOOD_EDIT_OPS))
        with pytest.raises(StorageError, match="Stale save"):
            b.apply(
                Edit(
                    scope=SCOPE,
                    base_revision=0,
                    operations=(Replace(record_id="new-result", body="other writer"),),
                )
            )
        assert b.context.revision == 0  # nothing published in b
        assert store_b.load(SCOPE) == a.state


def test_newer_schema_fails_clearly_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version=99")
    db.commit()
    db.close()
    with pytest.raises(StorageError, match="newer picocontext"):
        SQLiteStore(path)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 99
    db.close()


def test_foreign_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes(x)")
    db.execute("INSERT INTO notes VALUES (1)")
    db.commit()
    db.close()
    with pytest.raises(StorageError, match="not a picocontext session store"):
        SQLiteStore(path)
    db = sqlite3.connect(path)
    assert db.execute("SELECT x FROM notes").fetchall() == [(1,)]
    db.close()


def test_older_schema_without_migration_fails_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import picocontext.persistence.migrations as migrations

    path = tmp_path / "s.db"
    SQLiteStore(path).close()
    current = migrations.SCHEMA_VERSION
    monkeypatch.setattr(migrations, "SCHEMA_VERSION", current + 1)
    with pytest.raises(StorageError, match="cannot migrate"):
        SQLiteStore(path)
    seen: list[int] = []
    monkeypatch.setattr(migrations, "MIGRATIONS", {current: lambda db: seen.append(current)})
    SQLiteStore(path).close()
    assert seen == [current]
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == current + 1
    db.close()


def test_corrupted_body_is_an_error_not_served(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        # a replaced body is stored by hash; unchanged ones are read from the transcript
        open_session(store).apply(Edit(scope=SCOPE, base_revision=0, operations=GOOD_EDIT_OPS))
    db = sqlite3.connect(path)
    assert db.execute("UPDATE bodies SET body = body || 'tampered'").rowcount > 0
    db.commit()
    db.close()
    with SQLiteStore(path) as store, pytest.raises(StorageError, match="corrupt"):
        store.load(SCOPE)


def test_changed_transcript_row_is_an_error_not_served(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        open_session(store)
    db = sqlite3.connect(path)
    db.execute("UPDATE transcript SET record_json = replace(record_json, 'kettle', 'teapot')")
    db.commit()
    db.close()
    with SQLiteStore(path) as store, pytest.raises(StorageError, match="checksum"):
        store.load(SCOPE)


CHILD = textwrap.dedent(
    """
    import sys
    from picocontext import ContextSession, Record, Role, Replace, Edit, SQLiteStore
    from picocontext.models import ByteCounter, ScriptedBackend
    sys.path.insert(0, sys.argv[2])
    from kettle import SCOPE, kettle_snapshot
    store = SQLiteStore(sys.argv[1])
    s = ContextSession.open(store, SCOPE, ByteCounter(), ScriptedBackend(), kettle_snapshot())
    print("ready", s.context.revision, flush=True)
    i = s.context.revision
    while True:
        i += 1
        if i % 2:
            s.append_records([Record(id=f"n{i}", role=Role.USER, body="x" * (i % 500))])
        else:
            s.apply(Edit(scope=SCOPE, base_revision=s.context.revision,
                         operations=(Replace(record_id="new-result", body=f"v{i}"),)))
        print(s.context.revision, flush=True)
    """
)


def test_kill_minus_nine_never_exposes_a_half_written_commit(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    support = str(Path(__file__).resolve().parents[1] / "support")
    rng = random.Random(1234)
    last_seen = 0
    for _round in range(24):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), support],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        ready = child.stdout.readline()  # imports done and the session is stored
        assert ready.startswith("ready"), ready + (child.stderr.read() if child.stderr else "")
        time.sleep(rng.uniform(0.05, 0.4))
        os.kill(child.pid, signal.SIGKILL)
        out, err = child.communicate()
        printed = [int(line) for line in out.split()]
        assert "Traceback" not in err, err
        with SQLiteStore(path) as store:
            state = store.load(SCOPE)
        assert state is not None
        validate_snapshot(state.snapshot)
        validate_snapshot(state.original)
        # the store holds the last printed commit, or the one after it (committed, not printed)
        newest = printed[-1] if printed else last_seen
        assert state.snapshot.revision in (newest, newest + 1)
        assert state.snapshot.revision >= last_seen
        assert isinstance(WorkingContext.start(state.original), WorkingContext)
        last_seen = state.snapshot.revision
    assert last_seen > 24  # the children really committed between kills
