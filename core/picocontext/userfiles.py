"""Reading a file a user named on a command line: regular files only, at most a limit.

``stat()`` cannot be trusted for the size of what a path will yield (``/dev/zero`` reports 0
bytes, a FIFO blocks forever, a directory raises a raw ``IsADirectoryError``), so the file is
opened without blocking, checked to be a regular file on the open descriptor, and read through
a bounded read of one byte more than the limit.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from picocontext.errors import PicoContextError


class InputFileError(PicoContextError):
    """A file named by the user cannot be used: missing, not a regular file, too large, or
    not text."""


class InputTooLarge(InputFileError):
    """The file holds more than the limit."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_bytes_bounded(path: str | Path, limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit`` of them)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise InputFileError(f"{what} {path} is a directory, not a file") from None
    except OSError as exc:
        raise InputFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InputFileError(f"{what} {path} is {_kind(mode)}, not a regular file")
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise InputFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputTooLarge(f"{what} {path} is larger than the limit of {limit} bytes")
    return data


def read_text_bounded(path: str | Path, limit: int, what: str = "file") -> str:
    """:func:`read_bytes_bounded`, decoded as UTF-8 (a BOM is allowed)."""
    data = read_bytes_bounded(path, limit, what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{what} {path} is not UTF-8 text ({exc.reason})") from None
