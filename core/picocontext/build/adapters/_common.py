"""Helpers shared by the adapters: reading text safely and walking folders deterministically.

A source folder is a boundary. Every folder adapter walks it once through
:func:`picocontext.files.files_under`, which yields only regular files whose real path stays
inside the folder: a ``passwd.md`` symlink to ``/etc/passwd`` is skipped, and so are symlinked
folders, FIFOs and devices. What was skipped, and why, travels with the tree
(:attr:`SourceTree.skipped`) so ``pcx build`` can say so. The tree of folders is built from
that one walk, never from a second listing, so what is read is exactly what was checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from picocontext.build.errors import SourceError
from picocontext.build.ir import IdRegistry, SourceNode, humanize, path_id
from picocontext.files import InputFileError, files_under, inside, read_bounded

ROOT_ID = "r"
MAX_FILE_BYTES = 4 * 1024 * 1024
_CACHES = ("__pycache__", "node_modules")


def read_text(path: Path, root: Path | None = None) -> str:
    """A source file as text (undecodable bytes replaced), through a bounded read of regular
    files only; with ``root``, a file whose real path left the root is refused."""
    if root is not None and not inside(root, path):
        raise SourceError(f"{path}: leads outside {root}")
    try:
        data = read_bounded(path, MAX_FILE_BYTES)
    except InputFileError as exc:
        raise SourceError(exc.message) from None
    if b"\x00" in data[:4096]:
        raise SourceError(f"{path}: looks binary")
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n")


def require_dir(path: Path, kind: str) -> None:
    if not path.exists():
        raise SourceError(f"{kind} source {path} does not exist")
    if not path.is_dir():
        raise SourceError(f"{kind} source {path} must be a directory")


def hidden(path: Path) -> bool:
    """Entries a folder adapter never indexes: dot and underscore names (``__init__.py``
    excepted) and dependency or bytecode caches."""
    name = path.name
    if name in _CACHES:
        return True
    return name.startswith((".", "_")) and name != "__init__.py"


def dot_name(path: Path) -> bool:
    """Only dot names (the skills adapter keeps ``_drafts/``)."""
    return path.name.startswith(".")


class SourceScan:
    """One bounded walk of a source folder: its files grouped by folder, the sub-folders that
    hold any of them, and what the walk refused (``path: reason``)."""

    def __init__(self, root: Path, ignore: Callable[[Path], bool] = hidden) -> None:
        try:
            walk = files_under(root, ignore=ignore)
        except InputFileError as exc:
            raise SourceError(exc.message) from None
        self.root = root
        self.files: list[Path] = walk.files
        self.skipped: list[str] = walk.skipped
        self._files: dict[Path, list[Path]] = {}
        self._dirs: dict[Path, set[Path]] = {}
        for f in walk.files:
            self._files.setdefault(f.parent, []).append(f)
            self._register(f.parent)

    def _register(self, folder: Path) -> None:
        while folder != self.root:
            parent = folder.parent
            known = self._dirs.setdefault(parent, set())
            if folder in known:
                return
            known.add(folder)
            folder = parent

    def entries(self, folder: Path) -> Iterator[Path]:
        """Sub-folders first, then files, each by name."""
        yield from sorted(self._dirs.get(folder, ()), key=lambda p: p.name)
        yield from sorted(self._files.get(folder, ()), key=lambda p: p.name)

    def is_dir(self, path: Path) -> bool:
        return path in self._dirs.get(path.parent, ())

    def read(self, path: Path) -> str:
        return read_text(path, self.root)

    def read_or_skip(self, path: Path) -> str | None:
        """The file's text, or None with the reason added to :attr:`skipped` (binary, over
        the size limit, gone or swapped since the walk): one unreadable file does not stop
        the build of the others."""
        try:
            return self.read(path)
        except SourceError as exc:
            self.skipped.append(exc.message)
            return None


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
