"""Which report a path asks for, and whether it can be written — before anything runs.

``--report`` and **Save report…** choose the format by the file's extension: ``.txt`` the
plain-text audit, ``.json`` the machine-readable run, ``.html`` the self-contained page. A run
can take many minutes on a real model, so an unknown extension or a path that cannot be written
is refused up front with one line saying what to change, not after the work is done.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from picocontext import OutputFileError, check_output_file
from picocontext_playground.errors import SetupError
from picocontext_playground.results import ComparisonResult
from picocontext_playground.textreport import write_atomically

Renderer = Callable[[ComparisonResult], str]


def _text(result: ComparisonResult) -> str:
    from picocontext_playground.textreport import render_report

    return render_report(result)


def _json(result: ComparisonResult) -> str:
    from picocontext_playground.jsonreport import render_json

    return render_json(result)


def _html(result: ComparisonResult) -> str:
    from picocontext_playground.htmlreport import render_html

    return render_html(result)


# extension -> (what the file dialog calls it, renderer)
FORMATS: dict[str, tuple[str, Renderer]] = {
    ".txt": ("Text report", _text),
    ".json": ("JSON run (machine-readable)", _json),
    ".html": ("Web page (self-contained)", _html),
}


def dialog_filters() -> str:
    """``Text report (*.txt);;…`` for a save dialog, in :data:`FORMATS` order."""
    return ";;".join(f"{label} (*{ext})" for ext, (label, _r) in FORMATS.items())


def report_format(path: Path, what: str = "--report") -> str:
    """The extension of ``path`` if it names a known format; otherwise :class:`SetupError`."""
    ext = Path(path).suffix.lower()
    if ext not in FORMATS:
        known = ", ".join(FORMATS)
        shown = f"extension {ext}" if ext else "no extension"
        raise SetupError(f"{what} {path}: {shown} is not a report format; use {known}")
    return ext


def check_writable(path: Path, what: str) -> None:
    """Refuse a path that cannot be written: a directory, a parent that is a file or cannot
    be created, a directory without write permission. Creates the missing parent folders and
    probes them with a temporary file, so the answer is the file system's, not a guess."""
    path = Path(path)
    if path.is_dir():
        raise SetupError(f"{what} {path} is a directory; give a file name")
    try:
        check_output_file(path)  # a FIFO, a device or a symlink to one is never replaced
    except OutputFileError as exc:
        raise SetupError(f"{what} {exc.message}") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(fd)
        os.unlink(probe)
        if path.exists() and not os.access(path, os.W_OK):
            raise PermissionError(f"{path} is read-only")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SetupError(f"{what} {path} cannot be written: {reason}") from None


def check_report_path(path: Path, what: str = "--report") -> None:
    """Both checks for a report path (format first: it needs no file system)."""
    report_format(path, what)
    check_writable(path, what)


def render(result: ComparisonResult, path: Path) -> str:
    """The report for ``result`` in the format ``path`` asks for."""
    return FORMATS[report_format(path)][1](result)


def write_report(result: ComparisonResult, path: Path) -> None:
    """Render by extension and write atomically."""
    write_atomically(path, render(result, path).encode("utf-8"))


__all__ = [
    "FORMATS",
    "check_report_path",
    "check_writable",
    "dialog_filters",
    "render",
    "report_format",
    "write_report",
]
