"""Store rows are validated on load: a corrupt row is a StorageError that names it, a
transcript that lost a record is refused when the session is opened, and a store in a place
that cannot be written says so."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kettle import SCOPE, kettle_snapshot
from picocontext import (
    ContextSession,
    Edit,
    Record,
    Replace,
    Role,
    SQLiteStore,
    StorageError,
)
from picocontext.models import ByteCounter, ScriptedBackend
from schema1 import kettle_history, write_schema_1


@pytest.fixture()
def old_store(tmp_path: Path) -> Path:
    """A schema-1 file: its rows carry no checksums, so each validator is reached directly."""
    path = tmp_path / "s.db"
    write_schema_1(path, kettle_history())
    return path


def corrupt(path: Path, sql: str) -> None:
    db = sqlite3.connect(path)
    assert db.execute(sql).rowcount > 0, sql
    db.commit()
    db.close()


READERS: dict[str, Callable[[SQLiteStore], object]] = {
    "load": lambda store: store.load(SCOPE),
    "load_revision": lambda store: store.load_revision(SCOPE, 1),
    "revision_numbers": lambda store: store.revision_numbers(SCOPE),
    "committed_at": lambda store: store.committed_at(SCOPE),
    "tombstones": lambda store: store.tombstones(SCOPE),
    "scopes": lambda store: store.scopes(),
}

T = "UPDATE transcript SET record_json = "
R = "UPDATE revisions SET records_json = "


@pytest.mark.parametrize(
    ("sql", "reader", "message"),
    [
        (T + "'{\"id\": ' WHERE position=2", "load", r"transcript.*position 2\).*bad JSON"),
        (T + "'[1, 2]' WHERE position=2", "load", r"position 2\).*not a JSON object"),
        (T + "json_remove(record_json, '$.role') WHERE position=3", "load", "missing key 'role'"),
        (T + "json_set(record_json, '$.role', 'wizard') WHERE position=3", "load", "'wizard'"),
        (T + "json_set(record_json, '$.protected', 'yes') WHERE position=1", "load", "protected"),
        (T + "json_set(record_json, '$.body', 7) WHERE position=1", "load", "body is not text"),
        (T + "json_set(record_json, '$.calls', 'x') WHERE position=2", "load", "tool calls"),
        (T + "json_set(record_json, '$.id', 'other') WHERE position=2", "load", "record_id"),
        ("UPDATE sessions SET head_revision = 'two'", "load", "head_revision is not an integer"),
        ("UPDATE sessions SET transcript_length = 2.5", "load", "transcript_length"),
        (R + "'[' WHERE revision=1", "load_revision", r"revision 1\).*bad JSON"),
        (
            R + "json_remove(records_json, '$[0].body_hash') WHERE revision=1",
            "load_revision",
            "body_hash",
        ),
        (
            R + "json_set(records_json, '$[1].role', 'oracle') WHERE revision=1",
            "load_revision",
            "oracle",
        ),
        (R + "'{}' WHERE revision=1", "load_revision", "not a list"),
        ("UPDATE revisions SET revision = 'one' WHERE revision=1", "revision_numbers", "revision"),
        ("UPDATE revisions SET committed_at = 'noon'", "committed_at", "committed_at"),
        ("UPDATE tombstones SET deleted_at_revision = 'x'", "tombstones", "revision"),
        ("UPDATE sessions SET user_id = x'01'", "scopes", "scope part"),
    ],
)
def test_a_corrupt_row_is_a_storage_error_that_names_it(
    old_store: Path, sql: str, reader: str, message: str
) -> None:
    corrupt(old_store, sql)
    with SQLiteStore(old_store) as store, pytest.raises(StorageError, match=message):
        READERS[reader](store)


@pytest.mark.parametrize("position", [7, 5])
def test_a_transcript_that_lost_a_record_is_refused_at_open(old_store: Path, position: int) -> None:
    corrupt(old_store, f"DELETE FROM transcript WHERE position={position}")
    with SQLiteStore(old_store) as store, pytest.raises(StorageError, match="lost records"):
        ContextSession.open(store, SCOPE, ByteCounter(), ScriptedBackend())


def test_a_working_record_missing_from_the_transcript_is_refused(old_store: Path) -> None:
    """The transcript row count agrees, but the record a revision holds is not in it."""
    corrupt(
        old_store,
        "UPDATE transcript SET record_id = 'q9', "
        "record_json = json_set(record_json, '$.id', 'q9') WHERE position=7",
    )
    with SQLiteStore(old_store) as store, pytest.raises(StorageError, match="'q2'"):
        store.load(SCOPE)


def native_store(path: Path) -> Path:
    """Revision 0 a checkpoint, 1 an append delta, 2 a replacement delta."""
    with SQLiteStore(path) as store:
        s = ContextSession(kettle_snapshot(), ByteCounter(), ScriptedBackend(), store)
        s.append_records([Record(id="n1", role=Role.USER, body="one")])
        s.apply(Edit(scope=SCOPE, base_revision=1, operations=(Replace(record_id="n1", body="1"),)))
    return path


P = "UPDATE revisions SET payload = "


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (P + "'{\"add\": [0, 99]}' WHERE revision=1", "outside the transcript"),
        (P + '\'{"drop": ["zz"]}\' WHERE revision=1', "drops an id"),
        (P + '\'{"set": [["zz", "00"]]}\' WHERE revision=2', "'zz'"),
        (P + "'[[3, 1]]' WHERE revision=0", "outside the transcript"),
        (P + '\'[{"at": 99, "body": "00"}]\' WHERE revision=0', "outside the transcript"),
        ("UPDATE revisions SET kind = 'mystery' WHERE revision=2", "mystery"),
        ("UPDATE revisions SET base = 5 WHERE revision=2", "incomplete"),
        ("DELETE FROM revisions WHERE revision=1", "incomplete"),
        ("UPDATE bodies SET body = 'forged'", "corrupt"),
    ],
)
def test_a_changed_checkpoint_or_delta_row_is_refused(
    tmp_path: Path, sql: str, message: str
) -> None:
    path = native_store(tmp_path / "s.db")
    corrupt(path, sql)
    with SQLiteStore(path) as store, pytest.raises(StorageError, match=message):
        store.load(SCOPE)


# -- where the store lives ------------------------------------------------------------------
def test_a_store_under_a_file_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(StorageError, match="writable location"):
        SQLiteStore(tmp_path / "notes.txt" / "sessions" / "s.db")


def test_a_store_on_a_read_only_file_system_is_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def read_only(self: Path, *args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(StorageError, match=r"Read-only file system.*writable location"):
        SQLiteStore(tmp_path / "mnt" / "s.db")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores permissions")
def test_a_store_in_a_read_only_folder_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(StorageError, match="read-only"):
            SQLiteStore(folder / "s.db")
        with pytest.raises(StorageError, match="writable location"):
            SQLiteStore(folder / "sub" / "s.db")
    finally:
        folder.chmod(0o755)


def test_a_folder_in_place_of_the_store_says_so(tmp_path: Path) -> None:
    (tmp_path / "s.db").mkdir()
    with pytest.raises(StorageError, match="folder"):
        SQLiteStore(tmp_path / "s.db")


# -- no corruption escapes the error hierarchy ----------------------------------------------
CELLS = [
    ("sessions", "head_revision"),
    ("sessions", "transcript_revision"),
    ("sessions", "transcript_length"),
    ("sessions", "user_id"),
    ("transcript", "position"),
    ("transcript", "record_id"),
    ("transcript", "record_json"),
    ("revisions", "revision"),
    ("revisions", "payload"),
    ("revisions", "committed_at"),
    ("revisions", "kind"),
    ("revisions", "base"),
    ("bodies", "body"),
    ("tombstones", "deleted_at_revision"),
    ("tombstones", "record_id"),
]
JSONISH = st.sampled_from(
    [
        "[",
        "{}",
        "[]",
        "null",
        '"text"',
        "[[0, 1]]",
        "[[5, 1]]",
        '[{"at": 0}]',
        '[{"at": "x", "body": 1}]',
        '{"add": [0]}',
        '{"drop": "a"}',
        '{"set": [["a"]]}',
        '[{"id": 1}]',
        '{"id": "task", "role": "user", "body": "b", "protected": true, "calls": [[1, 2, 3]]}',
        '{"id": "task", "role": "user", "body": "b", "protected": true, "result_for": 5}',
        "[" * 5000,
    ]
)
VALUES = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=8),
    JSONISH,
)


@settings(max_examples=150, deadline=None)
@given(cell=st.sampled_from(CELLS), value=VALUES, row=st.integers(0, 8), native=st.booleans())
def test_no_corrupt_cell_escapes_as_anything_but_a_storage_error(
    tmp_path_factory: Any, cell: tuple[str, str], value: object, row: int, native: bool
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "s.db"
    if native:
        native_store(path)
    else:
        write_schema_1(path, kettle_history())
        SQLiteStore(path).close()  # migrate first, so the cell names are today's
    table, column = cell
    db = sqlite3.connect(path)
    try:
        db.execute(f"UPDATE transcript SET checksum = NULL WHERE {row} % 2 = 0")
        db.execute(
            f"UPDATE {table} SET {column} = ? WHERE rowid = "
            f"(SELECT rowid FROM {table} ORDER BY rowid LIMIT 1 OFFSET ?)",
            (value, row),
        )
        db.commit()
    except sqlite3.IntegrityError:
        return  # a NOT NULL or key constraint refused the change
    finally:
        db.close()
    with SQLiteStore(path) as store:
        for reader in READERS.values():
            with contextlib.suppress(StorageError):
                reader(store)
