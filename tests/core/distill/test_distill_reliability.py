"""Distill sources are a boundary and a corpus has one source: symlinks never lead out of a
document folder, one unreadable item is skipped and named while the rest is built, a sync of
other sources is refused unless asked to replace, a failed first sync leaves no corpus, a
session store given as a source is never written to, and a crash between commits never leaves
a child id without its node."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from picocontext import Record, Role, Scope, Snapshot, SQLiteStore, StorageError
from picocontext.distill import DocumentFolderSource, RollupReport, Unit
from picocontext.distill.cli import main
from picocontext.distill.testing import VariedEmbedder, build
from picocontext.working import WorkingContext


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    _write(root / "kiln.md", "# Kiln\n\nThe relay clicks at 900 C.\n")
    _write(root / "glaze" / "cone.md", "# Cone 6\n\nGlazes mature at 1220 C.\n")
    return root


def _leaf_ids(corpus: Path) -> set[str]:
    db = sqlite3.connect(corpus / "nodes.sqlite")
    try:
        return {r[0] for r in db.execute("SELECT id FROM digest_nodes WHERE level=0")}
    finally:
        db.close()


# -- the folder is a boundary ------------------------------------------------------------------


def test_a_symlink_out_of_the_folder_is_skipped_named_and_never_recalled(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = _write(tmp_path / "etc" / "passwd", "root:x:0:0:root:/root:/bin/bash\n")
    (docs / "passwd.md").symlink_to(secret)
    (docs / "linked").symlink_to(secret.parent, target_is_directory=True)
    corpus = tmp_path / "corpus"
    code, out, err = _run(capsys, "--corpus", str(corpus), "sync", "--docs", str(docs))
    assert code == 1  # something in the source was not read
    assert f"skipped: {docs / 'passwd.md'}: leads outside" in err
    assert "linked" in err and "2 skipped" in out
    assert not any("passwd" in leaf for leaf in _leaf_ids(corpus))
    code, out, _ = _run(capsys, "--corpus", str(corpus), "recall", "root bash", "--json")
    assert code == 0 and "/bin/bash" not in out and "passwd" not in out
    assert json.loads(out)["items"]  # the folder's own documents are there


def test_a_symlink_inside_the_folder_is_kept(tmp_path: Path, docs: Path) -> None:
    (docs / "alias.md").symlink_to(docs / "kiln.md")
    source = DocumentFolderSource(docs)
    units = source.units()
    assert {u.unit_id.split(":")[0] for u in units} == {"alias.md", "glaze/cone.md", "kiln.md"}
    assert source.skipped == []


# -- partial failure ---------------------------------------------------------------------------


def test_one_bad_file_is_skipped_and_named_the_rest_is_built(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(docs / "latin1.md", "# Caf\xe9\n\nbad bytes\n".encode("latin-1"))
    os.mkfifo(docs / "pipe.md")  # would block a plain open() forever
    corpus = tmp_path / "corpus"
    code, out, err = _run(capsys, "--corpus", str(corpus), "sync", "--docs", str(docs))
    assert code == 1
    assert f"skipped: {docs / 'latin1.md'}: not UTF-8 text" in err
    assert f"skipped: {docs / 'pipe.md'}: not a regular file" in err
    assert {leaf.split(":")[3] for leaf in _leaf_ids(corpus)} == {"kiln.md", "glaze/cone.md"}
    assert "doc: 2 units" in out


def test_an_oversized_document_is_skipped_without_being_read(docs: Path) -> None:
    _write(docs / "huge.md", "# Huge\n\n" + "word " * 400)
    source = DocumentFolderSource(docs, max_bytes=1000)
    units = source.units()
    assert "huge.md" not in {u.unit_id.split(":")[0] for u in units}
    assert source.skipped == [f"{docs / 'huge.md'}: larger than the 1,000-byte limit"]


def test_the_skipped_items_are_in_the_json_report(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(docs / "bad.txt", b"\xff\xfe")
    code, out, _ = _run(
        capsys, "--corpus", str(tmp_path / "c"), "sync", "--docs", str(docs), "--json"
    )
    report = json.loads(out)["reports"][0]
    assert code == 1 and report["skipped"] == [
        f"{docs / 'bad.txt'}: not UTF-8 text (invalid byte at offset 0)"
    ]


# -- one source per corpus ---------------------------------------------------------------------


def test_a_sync_of_other_sources_is_refused_unless_replace(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other"
    _write(other / "pump.md", "# Pump\n\nThe pump hums at 50 Hz.\n")
    corpus = str(tmp_path / "corpus")
    assert _run(capsys, "--corpus", corpus, "sync", "--docs", str(docs))[0] == 0
    before = _leaf_ids(Path(corpus))

    code, out, err = _run(capsys, "--corpus", corpus, "sync", "--docs", str(other))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "holds other sources" in err and "--replace" in err
    assert _leaf_ids(Path(corpus)) == before  # nothing was mixed in

    assert _run(capsys, "--corpus", corpus, "sync")[0] == 0  # the stored source still syncs
    code, _, err = _run(capsys, "--corpus", corpus, "sync", "--docs", str(other), "--replace")
    assert code == 0 and "replaced" in err
    assert {leaf.split(":")[3] for leaf in _leaf_ids(Path(corpus))} == {"pump.md"}
    code, out, _ = _run(capsys, "--corpus", corpus, "stats", "--json")
    assert json.loads(out)["config"]["docs"] == [str(other.resolve())]
    code, out, _ = _run(capsys, "--corpus", corpus, "sync", "--docs", str(other))
    assert code == 0 and "0 marked" in out  # the same source again is an ordinary sync


def test_the_source_check_and_the_marks_happen_under_the_corpus_gate(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stored sources are read after the gate is taken, so a sync that raced another
    one sees the sources the winner recorded."""
    from picocontext.distill import Distiller

    corpus = tmp_path / "corpus"
    assert _run(capsys, "--corpus", str(corpus), "sync", "--docs", str(docs))[0] == 0
    other = _write(tmp_path / "other" / "a.md", "# A\n\ntext\n").parent
    seen: list[bool] = []
    original = Distiller.reset

    def reset(self: Distiller) -> None:
        seen.append(self._gate_depth > 0)
        original(self)

    monkeypatch.setattr(Distiller, "reset", reset)
    code, _, _ = _run(capsys, "--corpus", str(corpus), "sync", "--docs", str(other), "--replace")
    assert code == 0 and seen == [True]


# -- failed syncs and session sources ----------------------------------------------------------


def test_a_missing_docs_folder_leaves_no_corpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    code, _, err = _run(capsys, "--corpus", str(corpus), "sync", "--docs", str(tmp_path / "no"))
    assert code == 2 and "does not exist" in err
    assert not corpus.exists()


def test_an_empty_session_file_is_refused_and_not_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "EMPTY.db"
    empty.touch()
    corpus = tmp_path / "corpus"
    code, _, err = _run(capsys, "--corpus", str(corpus), "sync", "--sessions", str(empty))
    assert code == 2 and err.count("\n") == 1 and "not a picocontext session store" in err
    assert empty.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["EMPTY.db"]


def _session_store(path: Path) -> Path:
    with SQLiteStore(path) as store:
        for conversation, question in (("c1", "How hot is cone 6?"), ("c2", "Which relay?")):
            scope = Scope(user_id="u", conversation_id=conversation, branch_id="b")
            records = (
                Record(id="q", role=Role.USER, protected=True, body=question),
                Record(id="a", role=Role.ASSISTANT, body="About 1220 C."),
            )
            store.save(WorkingContext.start(Snapshot(scope=scope, records=records)))
    return path


def test_a_session_source_is_read_without_writing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _session_store(tmp_path / "s.db")
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    code, out, _ = _run(capsys, "--corpus", str(tmp_path / "c"), "sync", "--sessions", str(path))
    assert code == 0 and "turn: 2 units" in out
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name != "c"}
    assert after.get("s.db") == before["s.db"]


def test_a_corrupt_conversation_is_skipped_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _session_store(tmp_path / "s.db")
    db = sqlite3.connect(path)
    db.execute(
        "UPDATE transcript SET record_json='{not json' WHERE scope_key IN "
        "(SELECT scope_key FROM sessions WHERE conversation_id='c2')"
    )
    db.commit()
    db.close()
    code, out, err = _run(capsys, "--corpus", str(tmp_path / "c"), "sync", "--sessions", str(path))
    assert code == 1 and "turn: 1 units" in out and "1 skipped" in out
    (line,) = [x for x in err.splitlines() if "skipped:" in x]
    assert "conversation u/c2/b" in line or "c2" in line
    assert "Traceback" not in err


def test_an_old_session_store_is_not_migrated_by_a_sync(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from schema1 import kettle_history, write_schema_1

    path = tmp_path / "old.db"
    write_schema_1(path, kettle_history())
    before = path.read_bytes()
    corpus = tmp_path / "c"
    code, _, err = _run(capsys, "--corpus", str(corpus), "sync", "--sessions", str(path))
    assert code == 2 and err.count("\n") == 1 and "uses store schema 1" in err
    assert path.read_bytes() == before and not corpus.exists()


def test_a_read_only_store_refuses_writes_and_old_files(tmp_path: Path) -> None:
    path = _session_store(tmp_path / "s.db")
    with SQLiteStore(path, read_only=True) as store:
        scope = store.scopes()[0]
        context = store.load(scope)
        assert context is not None
        with pytest.raises(StorageError):
            store.save(context)
    with pytest.raises(StorageError, match="does not exist"):
        SQLiteStore(tmp_path / "none.db", read_only=True)
    assert not (tmp_path / "none.db").exists()
    with pytest.raises(StorageError, match="is not a file"):
        SQLiteStore(tmp_path, read_only=True)


def test_model_given_as_a_file_says_it_is_not_a_directory(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _write(tmp_path / "weights.bin", "x")
    corpus = tmp_path / "corpus"
    code, _, err = _run(
        capsys,
        "--corpus",
        str(corpus),
        "sync",
        "--docs",
        str(docs),
        "--summarizer",
        "model",
        "--model",
        str(model),
    )
    assert code == 2 and f"--model {model} is not a directory" in err
    assert not corpus.exists()


def test_the_corpus_path_is_checked_before_any_work(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file where the corpus folder should be is refused first, before the sources or
    the model are looked at (here the model could not be had at all)."""
    corpus = _write(tmp_path / "corpus", "a file")
    argv = ["sync", "--docs", str(docs), "--summarizer", "model", "--model", "no-such-model"]
    code, out, err = _run(capsys, "--corpus", str(corpus), *argv)
    assert code == 2 and out == ""
    assert err == (
        f"picocontext-distill sync: error: --corpus {corpus} is not a directory; a corpus is "
        "a folder.\n"
    )
    code, _, err = _run(capsys, "--corpus", str(corpus / "sub"), *argv)
    assert code == 2 and f"{corpus} is not a directory" in err


def test_an_unwritable_corpus_location_is_refused_before_any_work(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """(Tests run as root here, where every folder is writable, so os.access is stubbed.)"""
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != locked and real_access(p, mode))
    argv = ["sync", "--docs", str(docs), "--summarizer", "model", "--model", "no-such-model"]
    code, _, err = _run(capsys, "--corpus", str(locked / "corpus"), *argv)
    assert code == 2 and err == (
        f"picocontext-distill sync: error: --corpus {locked / 'corpus'}: {locked} is not "
        "writable.\n"
    )


# -- map --known and call ----------------------------------------------------------------------


@pytest.fixture
def corpus(tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str]) -> str:
    path = str(tmp_path / "corpus")
    assert _run(capsys, "--corpus", path, "sync", "--docs", str(docs))[0] == 0
    return path


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{bad", "is not JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"a": 1}', "must be a JSON object"),
        ("[" * 100_000 + "]" * 100_000, "is not JSON"),
        (None, "cannot open"),
    ],
    ids=["bad", "list", "not-strings", "deep", "missing"],
)
def test_map_known_with_a_bad_file_is_one_line(
    tmp_path: Path,
    corpus: str,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
    expected: str,
) -> None:
    known = tmp_path / "known.json"
    if content is not None:
        known.write_text(content, encoding="utf-8")
    code, out, err = _run(capsys, "--corpus", corpus, "map", "--known", str(known))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("picocontext-distill map: error: --known") and expected in err


def test_call_with_deeply_nested_arguments_is_one_line(
    corpus: str, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = '{"scope": ' + "[" * 50_000 + "]" * 50_000 + "}"
    code, out, err = _run(capsys, "--corpus", corpus, "call", "map", deep)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("picocontext-distill call: error: ")
    assert "map: arguments are not valid JSON (nested too deeply)" in err


# -- a crash between commits -------------------------------------------------------------------


def _dangling(d: object) -> list[tuple[str, str]]:
    from picocontext.distill import Distiller

    assert isinstance(d, Distiller)
    nodes = {n.id: n for n in d.store.nodes()}
    return [(n.id, c) for n in nodes.values() for c in n.child_ids if c not in nodes]


class Crash(BaseException):
    """Stands for the process dying: nothing after it runs, nothing catches it."""


def test_a_crash_after_a_delete_leaves_no_dangling_child_ids(tmp_path: Path) -> None:
    """A deleted leaf inside an intermediate (a split scope) is unlinked in the same commit
    that deletes it, so a crash before the rollup leaves a consistent tree for readers."""
    d = build(tmp_path / "c", embedder=VariedEmbedder(), max_fan_in=3, sub_bits=1)
    units = [
        Unit(source_kind="note", unit_id=f"n{i:02d}", text=f"note {i}", scopes=(("site", "a"),))
        for i in range(12)
    ]
    d.apply(units)
    assert not _dangling(d)
    nodes = {n.id: n for n in d.store.nodes()}
    inner = [n for n in nodes.values() if "#" in n.id and any(c in nodes for c in n.child_ids)]
    victim = next(c for n in inner for c in n.child_ids if nodes[c].level == 0)

    def crash() -> RollupReport:
        raise Crash()

    d._rollup = crash  # type: ignore[method-assign]
    d.mark_delete("note", nodes[victim].source_id)
    with pytest.raises(Crash):
        d.sweep()
    d.close()
    reopened = build(tmp_path / "c", embedder=VariedEmbedder(), max_fan_in=3, sub_bits=1)
    assert reopened.store.get(victim) is None
    assert _dangling(reopened) == []
    reopened.sweep()
    assert _dangling(reopened) == [] and reopened.store.meta_get("rollup_needed") == "0"
    reopened.close()


def test_a_session_list_that_cannot_be_read_is_one_line_and_leaves_no_corpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _session_store(tmp_path / "s.db")
    db = sqlite3.connect(path)
    db.execute("UPDATE sessions SET user_id = X'ff'")
    db.commit()
    db.close()
    corpus = tmp_path / "c"
    code, out, err = _run(capsys, "--corpus", str(corpus), "sync", "--sessions", str(path))
    assert code == 2 and out == "" and "Traceback" not in err
    (line,) = err.splitlines()
    assert line.startswith("picocontext-distill sync: error: Cannot list conversations")
    assert "sessions" in line
    assert not corpus.exists()
