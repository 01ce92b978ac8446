"""The engine protocol the descriptor pipeline drives.

The pipeline owns the control flow (bottom-up order, contrast rounds, grading, repair, the
incremental cache) and counts every engine call; an engine only answers single questions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from picocontext.build.ir import SourceNode
from picocontext.build.quality import Descriptor
from picocontext.build.signals import Signals


class Grade(BaseModel):
    """A self-grade in [0, 1]. ``failed`` means the grader produced nothing usable -- which
    the pipeline treats as a failing grade, never as a pass (B17)."""

    model_config = ConfigDict(frozen=True)

    score: float
    reason: str = ""
    failed: bool = False


class DescriptorEngine(Protocol):
    name: str

    def bind(self, signals: Signals) -> None:
        """Receive the corpus statistics before the first call."""

    @property
    def signature(self) -> str:
        """Everything about the engine a descriptor depends on (name, version, prompt
        version, settings, corpus statistics): part of every incremental key (B3)."""

    def describe_leaf(self, node: SourceNode, feedback: str | None = None) -> Descriptor: ...

    def describe_branch(
        self,
        node: SourceNode,
        children: Sequence[tuple[SourceNode, Descriptor]],
        feedback: str | None = None,
    ) -> Descriptor: ...

    def contrast(
        self, parent: SourceNode, members: Sequence[tuple[SourceNode, Descriptor]]
    ) -> list[Descriptor]:
        """Rewrite the members so they can be told apart; same length and order."""

    def grade(
        self, node: SourceNode, desc: Descriptor, siblings: Sequence[Descriptor]
    ) -> Grade | None:
        """A self-grade, or None when the engine does not grade."""

    def fidelity(self, node: SourceNode, desc: Descriptor) -> float | None:
        """Predict-then-verify fidelity in 1..5, or None when the engine has no such check."""
