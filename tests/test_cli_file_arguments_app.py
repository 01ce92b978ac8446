"""Every file argument of ``picocontext app`` (the playground's smoke modes) given what is not a
file it can use: a directory, a FIFO and a character device. Outputs get the device through a
symlink with the right extension, so a regression that renamed a report over it would replace
the link, never the system's ``/dev/zero``. One line on stderr naming the path, a non-zero
exit, no traceback, bounded time (the rows come from the argparse tree, as for the other
commands in ``tests/test_cli_file_arguments.py``; helpers in ``tests/support/cliargs.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cliargs import path_arguments, run_row
from picocontext import cli

SMOKE = ["app", "--episode-smoke", "retention"]
ROWS: dict[tuple[str, ...], tuple[str, list[str]]] = {
    ("app", "--report"): ("output", [*SMOKE, "--backend", "scripted", "--report", "{bad}"]),
    ("app", "--image"): ("output", [*SMOKE, "--backend", "scripted", "--image", "{bad}"]),
    ("app", "--model-dir"): ("model", [*SMOKE, "--model-dir", "{bad}"]),
    ("app", "--model"): ("model", [*SMOKE, "--model", "{bad}"]),
}


def test_every_app_path_argument_is_a_row() -> None:
    assert path_arguments(("app",)) == set(ROWS)


def _bad(kind: str, which: str, tmp: Path, suffix: str) -> Path:
    if which == "fifo":
        os.mkfifo(tmp / f"pipe{suffix}")
        return tmp / f"pipe{suffix}"
    if which == "folder":
        (tmp / f"a-folder{suffix}").mkdir()
        return tmp / f"a-folder{suffix}"
    if kind == "output":
        (tmp / f"zero{suffix}").symlink_to("/dev/zero")
        return tmp / f"zero{suffix}"
    return Path("/dev/zero")  # read as a model: never written


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
@pytest.mark.parametrize("which", ["folder", "fifo", "device"])
@pytest.mark.parametrize("row", sorted(ROWS), ids=" ".join)
def test_a_bad_path_is_one_clear_line(row: tuple[str, ...], which: str, tmp_path: Path) -> None:
    kind, template = ROWS[row]
    suffix = ".png" if row[-1] == "--image" else ".json" if row[-1] == "--report" else ""
    bad = _bad(kind, which, tmp_path, suffix)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    done = run_row([w.replace("{bad}", str(bad)) for w in template], tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode not in (0, cli.EXIT_BUG), (row, which, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, (row, which, done.stderr)
    assert len(lines) == 1 and (str(bad) in lines[0] or bad.name in lines[0]), (row, done.stderr)
    assert Path("/dev/zero").is_char_device()
