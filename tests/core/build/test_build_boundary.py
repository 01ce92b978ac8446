"""A source folder is a boundary for ``pcx build``: a symlink that leads out of it is skipped
and named (stderr and the JSON stats), never read into leaves, manifests or ``llms.txt``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from picocontext import cli
from picocontext.build.adapters import load_source

SECRET = "root:x:0:0:root:/root:/bin/bash"
KINDS = ("docs", "files", "skills", "memory")


def _source(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(f"# Accounts\n\n{SECRET}\n", encoding="utf-8")
    src = tmp_path / "src"
    src.mkdir()
    (src / "kiln.md").write_text(
        "---\nname: kiln\ndescription: firing the kiln\n---\n# Kiln\n\nFire at cone 6.\n",
        encoding="utf-8",
    )
    (src / "passwd.md").symlink_to(outside / "secret.txt")
    os.mkfifo(src / "pipe.md")
    return src


@pytest.mark.parametrize("kind", KINDS)
def test_every_folder_adapter_skips_a_symlink_out_of_the_source(tmp_path: Path, kind: str) -> None:
    tree = load_source(_source(tmp_path), kind, "src")
    contents = [n.content for n in tree.root.walk()]
    assert not any(SECRET in c for c in contents)
    assert any("cone 6" in c for c in contents)
    assert any(
        s.endswith("passwd.md: leads outside " + str(tmp_path / "src")) for s in tree.skipped
    )
    assert any("pipe.md: not a regular file" in s for s in tree.skipped)


def test_pcx_build_names_what_it_skipped_and_indexes_nothing_from_outside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = _source(tmp_path), tmp_path / "out"
    argv = ["pcx", "build", str(src), "--kind", "docs", "--out", str(out), "--json", "--quiet"]
    assert cli.main(argv) == 0
    stdout, stderr = capsys.readouterr()
    stats = json.loads(stdout)
    assert any("passwd.md: leads outside" in s for s in stats["skipped"])
    assert f"skipped: {src / 'passwd.md'}: leads outside {src}" in stderr.splitlines()
    written = [p.read_text(encoding="utf-8") for p in out.iterdir() if p.is_file()]
    assert written and not any(SECRET in text or "passwd" in text for text in written)


def test_a_symlink_inside_the_source_is_still_followed(tmp_path: Path) -> None:
    src = _source(tmp_path)
    (src / "alias.md").symlink_to(src / "kiln.md")
    tree = load_source(src, "docs", "src")
    assert sum("cone 6" in n.content for n in tree.root.walk()) == 2


@pytest.mark.parametrize("where", ["file", "under-file"])
def test_an_output_folder_that_cannot_be_written_is_refused_before_the_build(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.md").write_text("# A\n\nalpha text\n", encoding="utf-8")
    blocker = tmp_path / "blocker"
    blocker.write_text("x", encoding="utf-8")
    out = blocker if where == "file" else blocker / "out"
    code = cli.main(["pcx", "build", str(src), "--kind", "docs", "--out", str(out)])
    stdout, stderr = capsys.readouterr()
    assert code == 2 and stdout == "" and "building" not in stderr
    assert stderr.startswith(f"picocontext pcx build: error: {out}: ")
    assert len(stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--collision-threshold", "nan"),
        ("--collision-threshold", "1.5"),
        ("--max-collision", "inf"),
        ("--min-fidelity", "0"),
        ("--max-contrast-rounds", "-1"),
        ("--max-repairs", "1.5"),
    ],
)
def test_numeric_build_flags_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    code = cli.main(["pcx", "build", str(tmp_path), "--kind", "docs", flag, value])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.splitlines()) == 1 and flag in err and repr(value) in err


@pytest.mark.parametrize("kind", KINDS)
def test_an_unreadable_file_is_skipped_and_named_and_the_rest_built(
    tmp_path: Path, kind: str
) -> None:
    src = _source(tmp_path)
    (src / "blob.md").write_bytes(b"\x00\x01\x02 not text")
    tree = load_source(src, kind, "src")
    assert any("cone 6" in n.content for n in tree.root.walk())
    named = tree.warnings if kind == "files" else tree.skipped  # files: its own warnings
    assert any("blob.md: looks binary" in s for s in named), named
