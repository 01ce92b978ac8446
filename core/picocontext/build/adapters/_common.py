"""Helpers shared by the adapters: reading text safely and walking folders deterministically."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from picocontext.build.errors import SourceError
from picocontext.build.ir import IdRegistry, SourceNode, humanize, path_id

ROOT_ID = "r"
MAX_FILE_BYTES = 4 * 1024 * 1024


def read_text(path: Path) -> str:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise SourceError(f"{path}: {size} bytes is larger than the {MAX_FILE_BYTES} limit")
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if b"\x00" in data[:4096]:
        raise SourceError(f"{path}: looks binary")
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n")


def require_dir(path: Path, kind: str) -> None:
    if not path.exists():
        raise SourceError(f"{kind} source {path} does not exist")
    if not path.is_dir():
        raise SourceError(f"{kind} source {path} must be a directory")


def sorted_entries(folder: Path) -> Iterator[Path]:
    """Folders first, then files, each by name; hidden entries and caches skipped."""
    try:
        entries = list(folder.iterdir())
    except OSError as exc:
        raise SourceError(f"cannot list {folder}: {exc.strerror or exc}") from exc
    entries = [e for e in entries if not e.name.startswith((".", "_")) or e.name == "__init__.py"]
    entries = [e for e in entries if e.name not in ("__pycache__", "node_modules")]
    dirs = sorted((e for e in entries if e.is_dir() and not e.is_symlink()), key=lambda p: p.name)
    files = sorted((e for e in entries if e.is_file()), key=lambda p: p.name)
    yield from dirs
    yield from files


def folder_node(ids: IdRegistry, parts: list[str], kind: str) -> SourceNode:
    """The branch for a sub-folder at ``parts`` (path segments), shared by folder adapters."""
    joined = "/".join(parts)
    return SourceNode(
        id=ids.claim(path_id(parts) + "/"),
        title=humanize(parts[-1]),
        facets={"kind": kind, "folder": parts[0]},
        meta={"path": joined},
        origin=joined + "/",
    )
