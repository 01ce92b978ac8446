"""Errors of :mod:`picocontext.build`, all under :class:`BuildError`.

Each carries a message a user can act on; the CLI maps the classes to exit codes (2 for bad
input or configuration, 3 for a failed quality gate, 4 for a manifest that failed its own
validation or reachability assertion).
"""

from __future__ import annotations

from collections.abc import Sequence

from picocontext.errors import PicoContextError


class BuildError(PicoContextError):
    """Base of every error raised by :mod:`picocontext.build`."""


class SourceError(BuildError):
    """The source cannot be read or does not have the shape its adapter expects."""


class ConfigError(BuildError):
    """A bad option: budgets, preset, engine settings."""


class EngineError(BuildError):
    """A descriptor engine failed in a way the pipeline cannot repair."""


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
