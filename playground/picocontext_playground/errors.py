"""The playground's error hierarchy.

It derives from :class:`picocontext.PicoContextError`, so one ``except`` catches core,
diagnostics and playground errors alike; :class:`SetupError` is what makes the command exit
non-zero (a run that completes with failed checks is not an error).
"""

from __future__ import annotations

from picocontext import PicoContextError


class PlaygroundError(PicoContextError):
    """Base of every error raised by :mod:`picocontext_playground`."""


class SetupError(PlaygroundError):
    """The comparison cannot start: bad arguments, no model, no display, unwritable output."""
