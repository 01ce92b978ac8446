"""What a walk's caller never wanted is pruned before any check, and never listed."""

from __future__ import annotations

from pathlib import Path

from picocontext.files import files_under


def test_an_ignored_folder_is_not_entered_and_not_listed(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "escape").symlink_to("/etc/passwd")
    (tmp_path / "keep.md").write_text("x", encoding="utf-8")
    (tmp_path / "out.md").symlink_to("/etc/passwd")
    walk = files_under(tmp_path, ignore=lambda path: path.name == ".git")
    assert walk.files == [tmp_path / "keep.md"]
    assert walk.skipped == [f"{tmp_path / 'out.md'}: leads outside {tmp_path}"]
