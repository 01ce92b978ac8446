"""Sliding window: drop the oldest turns until the prompt fits.

This is what local servers do when a conversation outgrows the window (often silently): the
model sees the protected records (instructions, the task), the latest user request and the
longest run of newest history whose completion prompt still fits ``fill`` of the room the
window leaves after the answer's output allowance. The cut is between whole units, so a tool
group (an assistant call and its results) is kept or dropped together, never orphaned. The
working context is not changed: the next turn slides over the whole history again, and the
transcript keeps every record.

The helpers here (:func:`completion_tokens`, :func:`fit_newest`) are the measured "what fits"
step the compaction and retrieval policies share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from picocontext.backend import ModelInput, Phase, TokenCounter
from picocontext.budget import RunBudget
from picocontext.cancel import CancelToken
from picocontext.policies.history import split_history
from picocontext.policies.registry import PolicyContext, PolicySpec
from picocontext.records import Role, Snapshot
from picocontext.report import RunMode, RunReport
from picocontext.session import ContextSession
from picocontext.working import WorkingContext

NAME = "sliding-window"

Measure = Callable[[Snapshot], int]


def completion_tokens(counter: TokenCounter) -> Measure:
    """Exact tokens of the completion prompt of a view, rendered by ``counter``."""

    def measure(view: Snapshot) -> int:
        return counter.prepare(ModelInput(context=view, phase=Phase.COMPLETION)).token_count

    return measure


def prompt_room(budget: RunBudget, fill: float = 1.0) -> int:
    """Tokens the completion prompt may use: ``fill`` of the window less the answer's
    output allowance (never negative)."""
    return max(0, int((budget.context_window - budget.completion_output_tokens) * fill))


@dataclass(frozen=True)
class WindowCut:
    """``view`` is what the model reads; ``dropped_ids`` the records it no longer sees."""

    view: Snapshot
    dropped_ids: tuple[str, ...]
    view_tokens: int


def fit_newest(snapshot: Snapshot, measure: Measure, room: int) -> WindowCut:
    """Protected units and the latest user request always; then the newest unprotected
    units while ``measure(view) <= room`` (whole units, original order)."""
    base = split_history(snapshot, measure, 0)
    base_tokens = measure(base.view)
    split = split_history(snapshot, measure, max(0, room - base_tokens))
    dropped = tuple(r.id for unit in split.archive for r in unit)
    return WindowCut(view=split.view, dropped_ids=dropped, view_tokens=measure(split.view))


def latest_request(snapshot: Snapshot) -> str:
    """The body of the newest user record (the question a turn answers), or ``""``."""
    for record in reversed(snapshot.records):
        if record.role is Role.USER:
            return record.body
    return ""


class SlidingWindowSettings(BaseModel):
    """``fill``: share of (window − answer allowance) the prompt may use; 1.0 fills the
    window, 0.5 behaves like a server that keeps half the window on overflow."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    fill: float = Field(default=1.0, gt=0.0, le=1.0)


class SlidingWindowPolicy:
    """Answers from the newest history that fits; the oldest turns fall out of view."""

    def __init__(self, settings: SlidingWindowSettings | None = None, name: str = NAME) -> None:
        self.settings = settings or SlidingWindowSettings()
        self.name = name
        self.last_cut: WindowCut | None = None

    def cut(self, snapshot: Snapshot, counter: TokenCounter, budget: RunBudget) -> WindowCut:
        """What this policy would show for ``snapshot`` under ``budget``."""
        room = prompt_room(budget, self.settings.fill)
        return fit_newest(snapshot, completion_tokens(counter), room)

    def turn(
        self, session: ContextSession, budget: RunBudget, cancel: CancelToken | None = None
    ) -> RunReport:
        def build(state: WorkingContext) -> Snapshot:
            self.last_cut = self.cut(state.snapshot, session.counter, budget)
            return self.last_cut.view

        return session.run_view(build, budget, self.name, cancel)

    def close(self) -> None:
        return None


def _create(config: SlidingWindowSettings, context: PolicyContext) -> SlidingWindowPolicy:
    return SlidingWindowPolicy(config, name=context.name)


SPEC = PolicySpec(
    name=NAME,
    config=SlidingWindowSettings,
    factory=_create,
    mode=RunMode.APPEND_ONLY,
    description="The oldest turns are dropped until the prompt fits the window.",
)
