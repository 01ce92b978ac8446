"""Errors of :mod:`picocontext.manifest`, all under :class:`ManifestError`.

Every refusal leaves the runtime untouched, so a caller can catch, read the message and retry
with a different choice.
"""

from __future__ import annotations

from collections.abc import Sequence

from picocontext.errors import PicoContextError


class ManifestError(PicoContextError):
    """Base of every error raised by :mod:`picocontext.manifest`."""


class ManifestInvalid(ManifestError):
    """A manifest failed parsing, the schema, the structure checks or a size limit."""

    exit_code = 2

    def __init__(self, errors: Sequence[str], source: str = "manifest") -> None:
        self.errors: tuple[str, ...] = tuple(errors)
        if len(self.errors) == 1:  # one problem, one line
            super().__init__(f"{source} is not a valid pcx 0.2 manifest: {self.errors[0]}")
            return
        shown = "\n  ".join(self.errors[:20])
        more = f"\n  ... and {len(self.errors) - 20} more" if len(self.errors) > 20 else ""
        super().__init__(f"{source} is not a valid pcx 0.2 manifest:\n  {shown}{more}")


class UnknownNode(ManifestError):
    """A node id the manifest does not have (``pcx show --open``: bad input)."""

    exit_code = 2

    def __init__(self, node_id: str) -> None:
        super().__init__(f"Unknown node id {node_id!r}.")
        self.node_id = node_id


class NotOnFrontier(ManifestError):
    """Opening a node the model has not been shown is refused, never silently allowed."""

    def __init__(self, node_id: str, hint: str) -> None:
        super().__init__(f"Node {node_id!r} is not on the frontier; {hint}")
        self.node_id = node_id


class BudgetTooSmall(ManifestError):
    """The effective budget cannot even hold the always-loaded baseline (a ``--budget`` or
    ``--reserve`` that no run can use: bad input)."""

    exit_code = 2

    def __init__(self, effective: int, baseline: int) -> None:
        super().__init__(
            f"Effective budget {effective} is below the baseline of {baseline} tokens "
            "(the index shown before any expansion); raise the budget or lower the reserve."
        )
        self.effective = effective
        self.baseline = baseline


class DisclosureRefused(ManifestError):
    """A disclosure would exceed the budget; nothing was charged."""

    def __init__(self, node_id: str, cost: int, remaining: int, suggestion: str) -> None:
        super().__init__(
            f"Opening {node_id!r} costs {cost} tokens but only {remaining} remain; {suggestion}"
        )
        self.node_id = node_id
        self.cost = cost
        self.remaining = remaining
        self.suggestion = suggestion

    @property
    def overage(self) -> int:
        return self.cost - self.remaining


class LevelUnavailable(ManifestError):
    def __init__(self, node_id: str, level: str, reason: str) -> None:
        super().__init__(f"Cannot render {node_id!r} at level {level!r}: {reason}")
        self.node_id = node_id
        self.level = level


class ResolveError(ManifestError):
    """A leaf's verbatim content is not in the resident store."""


class LoaderError(ManifestError):
    """A fetcher broke the loader contract, or nothing usable is cached."""


class EvalError(ManifestError):
    """Bad eval input, such as a case whose target is not in the manifest."""

    exit_code = 2


class NavigatorError(ManifestError):
    """A navigator could not produce a usable decision."""
