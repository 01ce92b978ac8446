"""Every file and folder argument of ``picocontext distill`` given the wrong kind of path: a
folder where a file is expected (or a file where a folder is), a FIFO, and ``/dev/zero``. Each
run is a real process with a timeout, so a blocking open or an endless read fails the test
instead of hanging it; each must exit non-zero with one line on stderr and no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from picocontext.distill.cli import main

pytestmark = pytest.mark.skipif(
    not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="needs FIFOs and /dev/zero"
)

TIMEOUT = 60.0


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A corpus built from a small folder, and one path of each wrong kind."""
    root = tmp_path_factory.mktemp("args")
    docs = root / "docs"
    docs.mkdir()
    (docs / "kiln.md").write_text("# Kiln\n\nThe relay clicks at 900 C.\n", encoding="utf-8")
    corpus = root / "corpus"
    assert main(["--corpus", str(corpus), "sync", "--docs", str(docs)]) == 0
    fifo = root / "fifo"
    os.mkfifo(fifo)
    plain = root / "plain.txt"
    plain.write_text("not what was asked for\n", encoding="utf-8")
    return {
        "corpus": corpus,
        "docs": docs,
        "folder": root / "docs",
        "file": plain,
        "fifo": fifo,
        "zero": Path("/dev/zero"),
    }


# (argument, wrong kinds, argv with {path} where the argument goes)
CASES: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
    (
        "--corpus (sync)",
        ("file", "fifo", "zero"),
        ("--corpus", "{path}", "sync", "--docs", "{docs}"),
    ),
    ("--corpus (map)", ("file", "fifo", "zero"), ("--corpus", "{path}", "map")),
    ("--docs", ("file", "fifo", "zero"), ("--corpus", "{new}", "sync", "--docs", "{path}")),
    (
        "--sessions",
        ("folder", "fifo", "zero"),
        ("--corpus", "{new}", "sync", "--sessions", "{path}"),
    ),
    (
        "--model",
        ("file", "fifo", "zero"),
        (
            "--corpus",
            "{new}",
            "sync",
            "--docs",
            "{docs}",
            "--summarizer",
            "model",
            "--model",
            "{path}",
        ),
    ),
    ("--known", ("folder", "fifo", "zero"), ("--corpus", "{corpus}", "map", "--known", "{path}")),
]


def _params() -> list[object]:
    return [
        pytest.param(argv, kind, id=f"{name}-{kind}")
        for name, kinds, argv in CASES
        for kind in kinds
    ]


@pytest.mark.parametrize(("argv", "kind"), _params())
def test_a_wrong_kind_of_path_is_one_line_and_a_non_zero_exit(
    places: dict[str, Path], tmp_path: Path, argv: tuple[str, ...], kind: str
) -> None:
    new = tmp_path / "new-corpus"
    words = [
        w.format(path=places[kind], docs=places["docs"], corpus=places["corpus"], new=new)
        for w in argv
    ]
    done = subprocess.run(
        [sys.executable, "-m", "picocontext.distill.cli", *words],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        check=False,
    )
    assert done.returncode not in (0, 70), (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), done.stderr
    assert str(places[kind]) in lines[0]
    assert not new.exists()  # a refused sync creates no corpus
