"""``scripts/bench.sh prefetch``: one line per navigator, a JSON last line, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picocontext_diagnostics.bench import prefetch
from picocontext_diagnostics.episodes.fixtures import fixtures_dir

STATE = str(fixtures_dir() / "evaluation" / "state.json")


def test_the_archive_navigator_answers_more_than_no_prefetch_on_a_byte_counted_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """At 3 bytes per token (a 12,288-byte window) the recent tail no longer holds the
    previous answer, so what the reader answers with from the archive is the prefetch's. At 4
    bytes per token the tail holds it and every navigator, none included, answers 16/16."""
    out = tmp_path / "prefetch.json"
    code = prefetch.run(
        [
            "--config",
            str(fixtures_dir() / "evaluation" / "long-history.json"),
            "--tokenizer",
            "bytes",
            "--bytes-per-token",
            "3",
            "--navigators",
            "off,archive",
            "--output",
            str(out),
        ]
    )
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    last = json.loads(lines[-1])
    assert last["benchmark"] == "prefetch" and last["default"] == "archive"
    assert last["answered"]["archive"] > last["answered"]["off"]
    assert lines[0].lstrip().startswith("off") and lines[1].lstrip().startswith("archive")
    saved = json.loads(out.read_text())
    assert [r["navigator"] for r in saved["rows"]] == ["off", "archive"]
    assert saved["rows"][0]["prefetched_opens"] == 0 < saved["rows"][1]["prefetched_opens"]


def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        prefetch.run(["--navigators", "nope", "--tokenizer", "bytes"])
    assert exc.value.code == 2 and "unknown navigator" in capsys.readouterr().err
    assert prefetch.run(["--config", str(tmp_path / "missing.json"), "--tokenizer", "bytes"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("prefetch bench: ") and len(err.splitlines()) == 1
    assert prefetch.run(["--config", STATE, "--tokenizer", "no-such-model"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("prefetch bench: ") and len(err.splitlines()) == 1
