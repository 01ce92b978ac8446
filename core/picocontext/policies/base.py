"""ContextPolicy: how one caller turn uses the model and the window.

Every policy runs a turn over a :class:`~picocontext.session.ContextSession` and returns a
:class:`~picocontext.report.RunReport`, so runners, evaluations and the playground treat all
policies alike, and every policy object is closed by whoever created it. Append-only and
editable are thin wrappers over the session loop; tool-using policies (navigated, distilled)
build a :class:`~picocontext.session.ToolLoop` per turn.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from picocontext.backend import EditStyle
from picocontext.budget import RunBudget
from picocontext.cancel import CancelToken
from picocontext.choices import ChoiceRules
from picocontext.report import RunMode, RunReport
from picocontext.session import ContextSession


@runtime_checkable
class ContextPolicy(Protocol):
    """``name`` is stable (used in configs, reports and column titles)."""

    @property
    def name(self) -> str: ...

    def turn(
        self, session: ContextSession, budget: RunBudget, cancel: CancelToken | None = None
    ) -> RunReport:
        """Run one turn; failures other than cancellation are report outcomes."""
        ...

    def close(self) -> None:
        """Release what the policy holds (caches, corpora); safe to call twice."""
        ...


class AppendOnlyPolicy:
    """The baseline: the model answers from the full working history, nothing is edited."""

    def __init__(self, name: str = "append-only") -> None:
        self.name = name

    def turn(
        self, session: ContextSession, budget: RunBudget, cancel: CancelToken | None = None
    ) -> RunReport:
        report = session.run(RunMode.APPEND_ONLY, budget, EditStyle.TARGETED, cancel)
        return report.model_copy(update={"policy": self.name})

    def close(self) -> None:
        return None


class EditablePolicy:
    """One bounded decision per turn may replace or delete unprotected records."""

    def __init__(
        self,
        style: EditStyle = EditStyle.TARGETED,
        name: str | None = None,
        none_margin: float | None = None,
        apply_at: float = 0.0,
        choice_rules: ChoiceRules | None = None,
    ) -> None:
        self.style = style
        self.name = name or ("summarize" if style is EditStyle.SUMMARIZE else "editable")
        self.none_margin = none_margin
        self.apply_at = apply_at
        self.choice_rules = choice_rules

    def turn(
        self, session: ContextSession, budget: RunBudget, cancel: CancelToken | None = None
    ) -> RunReport:
        report = session.run(
            RunMode.EDITABLE,
            budget,
            self.style,
            cancel,
            none_margin=self.none_margin,
            apply_at=self.apply_at,
            choice_rules=self.choice_rules,
        )
        return report.model_copy(update={"policy": self.name})

    def close(self) -> None:
        return None
