"""Reading user files safely: regular files only, bounded reads, no way out of an input folder.

``stat().st_size`` is not a limit: ``/dev/zero`` and ``/proc`` files report 0 bytes and never
end, and a FIFO blocks ``open`` until a writer appears. So a user file is opened non-blocking,
checked with ``fstat`` on the descriptor that is actually read (no race between the check
and the read), refused unless it is a regular file, and read at most ``limit + 1`` bytes so
anything larger is refused without reading it whole. Text is strict UTF-8 (a leading BOM is
accepted and dropped); a decoding error names the byte offset.

Input folders are a boundary: :func:`files_under` walks a source root and yields only regular
files whose real path stays inside the root's real path, so a ``passwd.md`` symlink to
``/etc/passwd`` in a docs folder is skipped (and listed as skipped, so the caller can say so)
rather than compiled, indexed or summarised.

Output paths are checked before the work that fills them (:func:`check_output_file`): a report
path that is a folder, a device, or under a file cannot be written, and finding that out after
an hour-long evaluation loses the evaluation.
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from picocontext.errors import PicoContextError

__all__ = [
    "DEFAULT_LIMIT",
    "InputFileError",
    "OutputFileError",
    "SourceWalk",
    "check_output_file",
    "check_output_folder",
    "files_under",
    "inside",
    "read_bounded",
    "read_text_bounded",
]

DEFAULT_LIMIT = 64 * 1024 * 1024
_CHUNK = 1 << 20
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class InputFileError(PicoContextError):
    """A user file that cannot be read as asked; the message names the file and the reason."""

    exit_code = 2


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _open_regular(path: Path) -> int:
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        reason = exc.strerror or errno.errorcode.get(exc.errno or 0, str(exc))
        raise InputFileError(f"{path}: cannot open ({reason})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InputFileError(f"{path}: is {_kind(mode)}, not a regular file")
    return fd


def read_bounded(path: Path | str, limit: int = DEFAULT_LIMIT) -> bytes:
    """The bytes of the regular file ``path``; refused when it holds more than ``limit``."""
    path = Path(path)
    if limit < 0:
        raise ValueError("limit must not be negative")
    fd = _open_regular(path)
    chunks: list[bytes] = []
    size = 0
    try:
        while size <= limit:
            block = os.read(fd, min(_CHUNK, limit + 1 - size))
            if not block:
                break
            chunks.append(block)
            size += len(block)
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if size > limit:
        raise InputFileError(f"{path}: larger than the {limit:,}-byte limit")
    return b"".join(chunks)


def read_text_bounded(path: Path | str, limit: int = DEFAULT_LIMIT) -> str:
    """The text of ``path`` as strict UTF-8 (a BOM is dropped); errors name the byte offset."""
    raw = read_bounded(path, limit)
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8) :]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(
            f"{path}: not UTF-8 text (invalid byte at offset {exc.start})"
        ) from None


def inside(root: Path, path: Path) -> bool:
    """Whether ``path``'s real location (every symlink followed) is within ``root``'s."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return False
    return real.is_relative_to(root.resolve())


@dataclass
class SourceWalk:
    """The files of one walk and what it refused (``path: reason``), in walk order."""

    files: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


Ignore = Callable[[Path], bool]


def _entries(
    root: Path, folder: Path, walk: SourceWalk, ignore: Ignore | None = None
) -> Iterator[Path]:
    try:
        children = sorted(folder.iterdir())
    except OSError as exc:
        walk.skipped.append(f"{folder}: cannot list ({exc.strerror or exc})")
        return
    for child in children:
        if ignore is not None and ignore(child):
            continue
        if not inside(root, child):
            walk.skipped.append(f"{child}: leads outside {root}")
        elif child.is_dir():
            if not child.is_symlink():
                yield from _entries(root, child, walk, ignore)
            else:
                walk.skipped.append(f"{child}: symlinked folder (not followed)")
        elif child.is_file():
            yield child
        else:
            walk.skipped.append(f"{child}: not a regular file")


def files_under(root: Path | str, *, ignore: Ignore | None = None) -> SourceWalk:
    """Every regular file under ``root`` (sorted, depth first) that stays inside it.

    Symlinks to files inside the root are kept (their real path is checked); symlinks that
    lead outside, symlinked folders, devices, FIFOs and sockets are skipped and listed.
    ``ignore(path)`` leaves an entry out quietly (hidden files, caches), and a folder it
    ignores is not entered: what a caller never wanted is not reported as skipped."""
    root = Path(root)
    if not root.is_dir():
        raise InputFileError(f"{root}: not a directory")
    walk = SourceWalk()
    walk.files.extend(_entries(root, root, walk, ignore))
    return walk


class OutputFileError(PicoContextError):
    """An output path that cannot be written; the message names the path and the reason."""

    exit_code = 2


def _nearest_existing(path: Path) -> Path:
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def check_output_file(path: Path | str) -> Path:
    """``path``, if a file can be written there (missing folders can be created); otherwise
    :class:`OutputFileError` saying why: it is a folder or not a regular file, a file stands
    where a folder is needed, or the folder is not writable. Nothing is created."""
    path = Path(path)
    try:
        return _check_output_file(path)
    except OSError as exc:  # a parent that cannot even be looked into
        raise OutputFileError(f"{path}: cannot be checked ({exc.strerror or exc})") from None


def _check_output_file(path: Path) -> Path:
    if path.exists() or path.is_symlink():
        mode = path.stat().st_mode if path.exists() else 0
        if not stat.S_ISREG(mode):
            kind = _kind(mode) if mode else "a dangling symlink"
            raise OutputFileError(f"{path}: is {kind}; give the path of a file to write")
    folder = _nearest_existing(path)
    if not folder.is_dir():
        raise OutputFileError(f"{path}: cannot be created, {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputFileError(f"{path}: cannot write in {folder} (permission denied)")
    return path


def check_output_folder(path: Path | str) -> Path:
    """``path``, if it is a folder or one can be created there; otherwise
    :class:`OutputFileError`. Nothing is created."""
    path = Path(path)
    try:
        return _check_output_folder(path)
    except OSError as exc:
        raise OutputFileError(f"{path}: cannot be checked ({exc.strerror or exc})") from None


def _check_output_folder(path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise OutputFileError(f"{path}: is not a folder; give a folder to write into")
    folder = path if path.is_dir() else _nearest_existing(path)
    if not folder.is_dir():
        raise OutputFileError(f"{path}: cannot be created, {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputFileError(f"{path}: cannot write in {folder} (permission denied)")
    return path
