"""Errors of :mod:`picocontext.build`: :class:`BuildError` and its subclasses, plus the
core's :class:`~picocontext.errors.ConfigError` and :class:`~picocontext.errors.SourceError`
(shared with distillation) for bad options and unreadable sources.

Each carries a message a user can act on; the CLI maps the classes to exit codes (2 for bad
input or configuration, 3 for a failed quality gate, 4 for a manifest that failed its own
validation or reachability assertion).
"""

from __future__ import annotations

from collections.abc import Sequence

from picocontext.errors import ConfigError, PicoContextError, SourceError


class BuildError(PicoContextError):
    """Base of every error raised by :mod:`picocontext.build`; most are bad input (a source
    the compiler cannot use), so a command ends with exit code 2."""

    exit_code = 2


class EngineError(BuildError):
    """A descriptor engine failed in a way the pipeline cannot repair."""

    exit_code = 1


class GateFailed(BuildError):
    """A quality gate (``--max-collision``, ``--min-fidelity``) rejected the build."""


class SelfCheckFailed(BuildError):
    """An emitted variant failed schema/structure validation, the baseline exceeded the
    budget, or a leaf is unreachable by an oracle navigator within the budget."""

    def __init__(self, budget: int, problems: Sequence[str]) -> None:
        self.budget = budget
        self.problems: tuple[str, ...] = tuple(problems)
        shown = "\n  ".join(self.problems[:15])
        more = f"\n  ... and {len(self.problems) - 15} more" if len(self.problems) > 15 else ""
        super().__init__(f"the {budget}-token variant failed its self-check:\n  {shown}{more}")


__all__ = [
    "BuildError",
    "ConfigError",
    "EngineError",
    "GateFailed",
    "SelfCheckFailed",
    "SourceError",
]
