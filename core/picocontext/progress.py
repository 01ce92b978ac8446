"""Status lines with percentages, drawn as a progress bar on a terminal and kept sparse in a log.

Fetching or converting a model says ``Downloading qwen2.5-coder-1.5b (1093 mb, 22 wheels):
37%`` dozens of times. On a terminal those lines become one tqdm bar per stage, redrawn in
place (tqdm comes with the model extras; without it the log rule applies); in a log (not a
terminal) a stage prints its first line, every quarter and its end, so a cold first run stays
a few lines long. Every other line passes through unchanged. The headless smoke echoes the
window's status through it, and :func:`picocontext.models.embedded.stderr_progress` reports
the CLI's downloads and conversions through it.
"""

from __future__ import annotations

import importlib
import re
import sys
from typing import Any, TextIO

__all__ = ["LOG_STEP", "ProgressEcho", "split_percent"]

# A log line per stage at most every this many percent (and at the end).
LOG_STEP = 25
_PERCENT = re.compile(r"^(?P<stage>.+?):\s+(?P<percent>\d{1,3})%$")


def split_percent(line: str) -> tuple[str, int] | None:
    """``("Downloading x", 37)`` for a line ending in ``: 37%``, else ``None``."""
    match = _PERCENT.match(line.strip())
    if match is None:
        return None
    return match["stage"], min(100, int(match["percent"]))


class ProgressEcho:
    """A line printer: percentages as a bar on a terminal (``tqdm``), sparse lines
    otherwise."""

    def __init__(self, stream: TextIO | None = None, terminal: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        isatty = getattr(self.stream, "isatty", None)
        self.terminal = bool(isatty and isatty()) if terminal is None else terminal
        self._stage: str | None = None
        self._shown = -1
        self._bar: Any = None

    def __call__(self, line: str) -> None:
        parsed = split_percent(line)
        if parsed is None:
            self._end_stage()
            self._print(line)
            return
        stage, percent = parsed
        if stage != self._stage:
            self._end_stage()
            self._stage, self._shown = stage, -1
        if self.terminal and self._draw(stage, percent):
            return
        due = self._shown < 0 or percent >= self._shown + LOG_STEP or percent == 100
        if due and percent != self._shown:
            self._print(line)
            self._shown = percent

    def close(self) -> None:
        self._end_stage()

    def _draw(self, stage: str, percent: int) -> bool:
        """Move the stage's bar; ``False`` when tqdm is not installed."""
        if self._bar is None:
            try:
                tqdm: Any = importlib.import_module("tqdm").tqdm  # untyped; the model extras
            except ImportError:
                return False
            self._bar = tqdm(
                total=100, desc=stage, unit="%", file=self.stream, leave=True, dynamic_ncols=True
            )
        self._bar.update(max(0, percent - self._bar.n))
        return True

    def _end_stage(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        self._stage, self._shown = None, -1

    def _print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)
