"""``picocontext-distill`` end to end on a small document folder with the fake summarizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picocontext.distill.cli import main


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "kiln.md").write_text(
        "# Kiln\n\nA small electric kiln.\n\n## Relay\n\nThe relay clicks at 900 C.\n\n"
        "## Elements\n\nElements measured 11 ohm each.\n",
        encoding="utf-8",
    )
    (root / "glaze.md").write_text(
        "# Glazes\n\nCone 6 glazes; write to ada@example.org for recipes.\n", encoding="utf-8"
    )
    return root


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_sync_map_digest_resolve_recall(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = str(tmp_path / "corpus")
    code, out, _ = _run(capsys, "--corpus", corpus, "sync", "--docs", str(docs))
    assert code == 0 and "doc: 4 units, 0 unchanged, 4 marked" in out
    code, out, _ = _run(capsys, "--corpus", corpus, "sync")  # remembers its sources
    assert code == 0 and "4 unchanged, 0 marked" in out and "summaries=0" in out

    code, out, _ = _run(capsys, "--corpus", corpus, "snapshot")
    known = json.loads(out)
    assert "digest:2:tenant" in known
    (tmp_path / "known.json").write_text(out, encoding="utf-8")

    code, out, _ = _run(capsys, "--corpus", corpus, "digest", "digest:2:tenant", "--json")
    view = json.loads(out)
    assert view["node"]["id"] == "digest:2:tenant" and view["summary"].startswith("rollup(")
    assert "ada@example.org" not in out  # the default regex guard redacted it

    code, out, _ = _run(capsys, "--corpus", corpus, "resolve", known["digest:2:tenant"])
    assert "exact: digest:2:tenant" in out

    (docs / "kiln.md").write_text(
        (docs / "kiln.md").read_text(encoding="utf-8").replace("11 ohm", "14 ohm"),
        encoding="utf-8",
    )
    code, out, _ = _run(capsys, "--corpus", corpus, "sync", "--json")
    assert json.loads(out)["reports"][0]["marked"] == 1
    code, out, _ = _run(
        capsys,
        "--corpus",
        corpus,
        "map",
        "--known",
        str(tmp_path / "known.json"),
        "--prune-unchanged",
        "--json",
    )
    diff = json.loads(out)
    changed = [x["id"] for x in diff["lines"] if not x.get("unchanged")]
    assert "digest:0:doc:kiln.md:kiln/elements" in changed and "digest:2:tenant" in changed
    code, out, _ = _run(capsys, "--corpus", corpus, "map")
    assert out.splitlines()[0].startswith("digest:2:tenant [tenant]")

    code, out, _ = _run(capsys, "--corpus", corpus, "recall", "relay clicks", "--json")
    assert json.loads(out)["items"]
    code, out, _ = _run(capsys, "--corpus", corpus, "call", "map", '{"scope": "kiln.md"}')
    assert json.loads(out)["lines"]
    code, out, _ = _run(capsys, "--corpus", corpus, "stats", "--json")
    assert json.loads(out)["pending"] == 0
    code, out, _ = _run(capsys, "--corpus", corpus, "gc", "--grace", "0")
    assert json.loads(out)["missing_live"] == []


def test_errors_are_reported_not_raised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = str(tmp_path / "corpus")
    code, _, err = _run(capsys, "--corpus", corpus, "map")
    assert code == 2 and "sync --docs" in err
    assert err.startswith("picocontext-distill map: error: ") and len(err.splitlines()) == 1
    code, _, err = _run(capsys, "--corpus", corpus, "sync")
    assert code == 2 and "Nothing to distil" in err
    code, _, err = _run(capsys, "--corpus", corpus, "sync", "--docs", str(tmp_path / "missing"))
    assert code == 2 and "does not exist" in err
    assert err.startswith("picocontext-distill sync: error: ") and len(err.splitlines()) == 1
    code, _, err = _run(
        capsys, "--corpus", corpus, "sync", "--docs", str(tmp_path), "--summarizer", "model"
    )
    assert code == 2 and "--model" in err


def test_tools_prints_the_schemas(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "tools")
    assert code == 0 and [s["function"]["name"] for s in json.loads(out)] == [
        "map",
        "digest",
        "resolve",
        "recall",
    ]


def test_watch_marks_changes_and_the_worker_sweeps(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = str(tmp_path / "corpus")
    assert _run(capsys, "--corpus", corpus, "sync", "--docs", str(docs))[0] == 0
    (docs / "glaze.md").write_text("# Glazes\n\nCone 5 now.\n", encoding="utf-8")
    code, out, _ = _run(
        capsys, "--corpus", corpus, "watch", "--iterations", "1", "--debounce", "0.05"
    )
    assert code == 0 and "doc: 1 changed, 0 deleted" in out and "sweep: 1 changes" in out
    code, out, _ = _run(capsys, "--corpus", corpus, "sync")
    assert "0 marked" in out


def test_sessions_from_a_session_store_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from picocontext import Record, Role, Scope, Snapshot, SQLiteStore
    from picocontext.working import WorkingContext

    scope = Scope(user_id="u", conversation_id="c", branch_id="b")
    store = SQLiteStore(tmp_path / "s.sqlite")
    store.save(
        WorkingContext.start(
            Snapshot(
                scope=scope,
                records=(
                    Record(id="q", role=Role.USER, protected=True, body="How hot is cone 6?"),
                    Record(id="a", role=Role.ASSISTANT, body="About 1220 C."),
                ),
            )
        )
    )
    store.close()
    corpus = str(tmp_path / "corpus")
    code, out, _ = _run(
        capsys, "--corpus", corpus, "sync", "--sessions", str(tmp_path / "s.sqlite")
    )
    assert code == 0 and "turn: 1 units" in out
    code, _, err = _run(
        capsys,
        "--corpus",
        str(tmp_path / "c2"),
        "sync",
        "--sessions",
        str(tmp_path / "nope.sqlite"),
    )
    assert code == 2 and "does not exist" in err
    assert not (tmp_path / "nope.sqlite").exists()


def test_pending_views_are_written_on_digest_or_by_complete(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder scope is a view (each section's primary parent is its document): the CLI's
    digest writes its pending summary on first read, `complete` writes the rest."""
    corpus = str(tmp_path / "corpus")
    assert _run(capsys, "--corpus", corpus, "sync", "--docs", str(docs))[0] == 0
    code, out, _ = _run(capsys, "--corpus", corpus, "map", "--json")
    lines = {x["id"]: x for x in json.loads(out)["lines"]}
    pending = sorted(i for i, x in lines.items() if x.get("pending"))
    assert pending and all(not lines[i]["semHash"] for i in pending)
    code, out, _ = _run(capsys, "--corpus", corpus, "stats", "--json")
    assert json.loads(out)["pending_views"] == len(pending)
    code, out, _ = _run(capsys, "--corpus", corpus, "digest", pending[0], "--json")
    view = json.loads(out)
    assert code == 0 and view["summary"].startswith("rollup(") and "pending" not in view["node"]
    code, out, _ = _run(capsys, "--corpus", corpus, "complete")
    assert code == 0 and f"wrote {len(pending) - 1} pending view summaries" in out
    code, out, _ = _run(capsys, "--corpus", corpus, "stats", "--json")
    assert json.loads(out)["pending_views"] == 0
