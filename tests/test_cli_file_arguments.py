"""Every file argument of ``picocontext pcx ...``, ``picocontext eval ...`` and
``picocontext tables ...`` given what is not a readable file: a directory, a FIFO and
``/dev/zero`` (for a folder argument: a regular file, a FIFO and ``/dev/zero``; for a model
argument: an empty folder, a FIFO and ``/dev/zero``; an output argument gets ``/dev/zero``
through a symlink, so a regression could never overwrite the device). Each run must exit
non-zero (and not with the bug code), print one line on stderr that names the path, print no
traceback, and end within a timeout: a FIFO must not block, ``/dev/zero`` must not be read to
exhaustion.

The arguments come from the argparse tree itself: every argument that looks like a path
(``type=Path``, a PATH/FILE/DIR metavar, a path-like name or help text) must be a row of
:data:`ROWS` or listed in :data:`SKIPPED` with the reason, so a new file flag cannot be
forgotten. Another command adds its rows by extending :data:`COMMANDS`, :data:`ROWS` and
:data:`SKIPPED` here, or in a sibling module (``test_cli_file_arguments_<command>.py``) with
the helpers in ``tests/support/cliargs.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cliargs import path_arguments, run_row
from picocontext import cli

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = str(ROOT / "resources" / "manifests" / "homelab" / "homelab.pcx.2k.json")
CASES = str(ROOT / "resources" / "manifests" / "homelab" / "cases.json")
COMMANDS = ("pcx", "eval", "tables")

# Placeholders filled per test: {bad} the value under test, {docs} a small docs folder,
# {out} an output folder, {report} an output file.
FILE, FOLDER, MODEL = "file", "folder", "model"
# An output argument gets /dev/zero through a symlink in the test folder: a regression that
# wrote the report atomically (temp file, then rename) would replace the link, never the
# system's device.
OUTPUT_FILE, OUTPUT_FOLDER = "output-file", "output-folder"
BUILD = ["pcx", "build", "{docs}", "--kind", "docs", "--out", "{out}"]
ROWS: dict[tuple[str, ...], tuple[str, list[str]]] = {
    ("pcx", "validate", "manifest"): (FILE, ["pcx", "validate", "{bad}"]),
    ("pcx", "show", "manifest"): (FILE, ["pcx", "show", "{bad}"]),
    ("pcx", "eval", "manifest"): (FILE, ["pcx", "eval", "{bad}", CASES]),
    ("pcx", "eval", "cases"): (FILE, ["pcx", "eval", MANIFEST, "{bad}"]),
    ("pcx", "eval", "--leaves"): (FOLDER, ["pcx", "eval", MANIFEST, CASES, "--leaves", "{bad}"]),
    ("pcx", "eval", "--model"): (
        MODEL,
        ["pcx", "eval", MANIFEST, CASES, "--navigator", "llm", "--model", "{bad}"],
    ),
    ("pcx", "schema", "--check"): (FILE, ["pcx", "schema", "--check", "{bad}"]),
    ("pcx", "build", "path"): (
        FOLDER,
        ["pcx", "build", "{bad}", "--kind", "docs", "--out", "{out}"],
    ),
    ("pcx", "build", "--out"): (
        OUTPUT_FOLDER,
        ["pcx", "build", "{docs}", "--kind", "docs", "--out", "{bad}"],
    ),
    ("pcx", "build", "--cache"): (
        OUTPUT_FILE,
        [*BUILD, "--incremental", "--cache", "{bad}"],
    ),
    ("pcx", "build", "--model-dir"): (
        MODEL,
        [*BUILD, "--engine", "llm", "--model-dir", "{bad}"],
    ),
    ("eval", "--config"): (FILE, ["eval", "--config", "{bad}", "--output", "{report}"]),
    ("eval", "--conversation"): (FILE, ["eval", "--conversation", "{bad}", "--output", "{report}"]),
    ("eval", "--output"): (OUTPUT_FILE, ["eval", "--profile", "retention", "--output", "{bad}"]),
    ("eval", "--model"): (
        MODEL,
        ["eval", "--backend", "mlx", "--model", "{bad}", "--output", "{report}"],
    ),
    ("tables", "reports"): (FILE, ["tables", "{bad}"]),
}
SKIPPED: dict[tuple[str, ...], str] = {
    ("eval", "--tokenizer-dir"): (
        "read only after an OpenAI-compatible server answered (--backend openai needs one); "
        "the tokenizer folder is checked in tests/core/models/test_models_openai_server.py"
    ),
}


def test_every_path_argument_is_tested_or_skipped_with_a_reason() -> None:
    found = path_arguments(COMMANDS)
    assert found - ROWS.keys() - SKIPPED.keys() == set(), "add a row (or a reasoned skip)"
    assert (ROWS.keys() | SKIPPED.keys()) - found == set(), "a row names no argument"


def _bad_values(kind: str, tmp: Path) -> dict[str, Path]:
    fifo = tmp / "pipe.json"
    os.mkfifo(fifo)
    first = tmp / "a-folder"
    first.mkdir()
    if kind in (FILE, OUTPUT_FILE):
        (first / "x.json").write_text("{}", encoding="utf-8")
    elif kind in (FOLDER, OUTPUT_FOLDER):
        first = tmp / "a-file.json"
        first.write_text("{}", encoding="utf-8")
    zero = Path("/dev/zero")
    if kind in (OUTPUT_FILE, OUTPUT_FOLDER):
        zero = tmp / "zero"
        zero.symlink_to("/dev/zero")
    return {"first": first, "fifo": fifo, "dev-zero": zero}


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
@pytest.mark.parametrize("which", ["first", "fifo", "dev-zero"])
@pytest.mark.parametrize("row", sorted(ROWS), ids=" ".join)
def test_a_bad_path_is_one_clear_line_in_bounded_time(
    row: tuple[str, ...], which: str, tmp_path: Path
) -> None:
    kind, template = ROWS[row]
    bad = _bad_values(kind, tmp_path)[which]
    done = run_row([w.replace("{bad}", str(bad)) for w in template], tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode not in (0, cli.EXIT_BUG), (row, which, done.stderr)
    assert "Traceback" not in done.stderr, (row, which, done.stderr)
    assert len(lines) == 1, (row, which, done.stderr)
    assert str(bad) in lines[0], (row, which, done.stderr)
