"""Bounded reads of user files and input folders as a boundary."""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picocontext.files import InputFileError, files_under, read_bounded, read_text_bounded


def test_a_directory_is_refused_by_name(tmp_path: Path) -> None:
    expected = f"^{re.escape(str(tmp_path))}: is a directory, not a regular file$"
    with pytest.raises(InputFileError, match=expected):
        read_bounded(tmp_path)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "manifest.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(InputFileError, match="is a FIFO, not a regular file"):
        read_bounded(fifo)
    assert time.monotonic() - started < 2


def test_dev_zero_is_refused_before_reading() -> None:
    with pytest.raises(InputFileError, match="/dev/zero: is a character device"):
        read_bounded("/dev/zero", limit=10)


def test_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        with pytest.raises(InputFileError, match=r"cannot open|is a socket"):
            read_bounded(path)


def test_a_missing_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match=r"nope\.json: cannot open"):
        read_bounded(tmp_path / "nope.json")


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=50)
@given(data=st.binary(max_size=300), limit=st.integers(0, 300))
def test_a_file_is_returned_whole_up_to_the_limit_and_refused_past_it(
    tmp_path: Path, data: bytes, limit: int
) -> None:
    path = tmp_path / "blob"
    path.write_bytes(data)
    if len(data) <= limit:
        assert read_bounded(path, limit) == data
    else:
        with pytest.raises(InputFileError, match=f"larger than the {limit:,}-byte limit"):
            read_bounded(path, limit)


def test_text_drops_a_bom_and_names_the_offset_of_bad_bytes(tmp_path: Path) -> None:
    good = tmp_path / "good.md"
    good.write_bytes(b"\xef\xbb\xbfhello")
    assert read_text_bounded(good) == "hello"
    bad = tmp_path / "bad.md"
    bad.write_bytes(b"abc\xff")
    with pytest.raises(
        InputFileError, match=r"bad.md: not UTF-8 text \(invalid byte at offset 3\)"
    ):
        read_text_bounded(bad)


def test_symlinks_out_of_the_root_are_skipped_and_listed(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    (root / "guides").mkdir(parents=True)
    (root / "guides" / "install.md").write_text("install", encoding="utf-8")
    (root / "alias.md").symlink_to(root / "guides" / "install.md")
    (root / "passwd.md").symlink_to("/etc/passwd")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret", encoding="utf-8")
    (root / "more").symlink_to(outside)
    os.mkfifo(root / "pipe.md")
    walk = files_under(root)
    assert walk.files == [root / "alias.md", root / "guides" / "install.md"]
    assert walk.skipped == [
        f"{root / 'more'}: leads outside {root}",
        f"{root / 'passwd.md'}: leads outside {root}",
        f"{root / 'pipe.md'}: not a regular file",
    ]


def test_a_walk_needs_a_directory(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x", encoding="utf-8")
    with pytest.raises(InputFileError, match="not a directory"):
        files_under(tmp_path / "f")


def test_an_output_file_is_checked_without_creating_anything(tmp_path: Path) -> None:
    from picocontext.files import OutputFileError, check_output_file

    nested = tmp_path / "new" / "deeper" / "report.json"
    assert check_output_file(nested) == nested and not (tmp_path / "new").exists()
    existing = tmp_path / "old.json"
    existing.write_text("{}", encoding="utf-8")
    assert check_output_file(existing) == existing
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "nowhere" / "x")
    for bad, reason in [
        (tmp_path, "is a directory"),
        (fifo, "is a FIFO"),
        (dangling, "is a dangling symlink"),
        (existing / "r.json", f"cannot be created, {existing} is not a folder"),
        (existing / "a" / "r.json", f"cannot be created, {existing} is not a folder"),
    ]:
        with pytest.raises(OutputFileError, match=f"^{re.escape(str(bad))}: {re.escape(reason)}"):
            check_output_file(bad)


def test_an_output_folder_is_checked_without_creating_anything(tmp_path: Path) -> None:
    from picocontext.files import OutputFileError, check_output_folder

    assert check_output_folder(tmp_path / "dist" / "x") == tmp_path / "dist" / "x"
    assert not (tmp_path / "dist").exists()
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    with pytest.raises(OutputFileError, match="is not a folder"):
        check_output_folder(blocker)
    with pytest.raises(OutputFileError, match=f"{re.escape(str(blocker))} is not a folder"):
        check_output_folder(blocker / "out")
