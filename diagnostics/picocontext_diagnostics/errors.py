"""The diagnostics error hierarchy.

It derives from :class:`picocontext.PicoContextError` so a caller that already catches core
errors also catches ours, while ``DiagnosticsError`` alone still singles out this package.
"""

from __future__ import annotations

from picocontext import PicoContextError


class DiagnosticsError(PicoContextError):
    """Base of every error raised by :mod:`picocontext_diagnostics`."""


class FixtureError(DiagnosticsError):
    """A fixture file is missing, unreadable or breaks its schema or invariants."""


class InvalidEpisode(DiagnosticsError):
    """An episode or its runner bounds are out of range (thrown, never reported)."""


class InvalidConfiguration(DiagnosticsError):
    """An evaluation configuration or its limits are out of range."""

    exit_code = 2


class AnswerFormatError(DiagnosticsError):
    """An answer is not the strict ``{"facts": {...}}`` shape; ``offset`` points at the problem."""

    def __init__(self, reason: str, offset: int) -> None:
        super().__init__(f"{reason} at offset {offset}")
        self.reason = reason
        self.offset = offset


class BackendSetupError(DiagnosticsError):
    """A requested backend or model cannot be set up (names the fix)."""
