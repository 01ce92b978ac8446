"""The registrations of the policies that run the session's own loop: append-only, editable
and summarize (editable with the fold-everything decision style). Only editable has a setting:
its decision protocol."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from picocontext.backend import EditStyle
from picocontext.policies.base import AppendOnlyPolicy, EditablePolicy
from picocontext.policies.registry import NoConfig, PolicyContext, PolicySpec
from picocontext.report import RunMode

DecisionProtocol = Literal["tool-call", "incremental"]

# The decision protocol of ``editable`` when a config does not name one.
DEFAULT_DECISION: DecisionProtocol = "tool-call"


class EditableConfig(BaseModel):
    """``decision``: ``incremental`` asks one constrained choice per new record (which earlier
    record it replaces, or none); ``tool-call`` is the one ``edit_context``/``keep_context``
    call with operations. See docs/policies.md for how each scores on small models."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision: DecisionProtocol = DEFAULT_DECISION

    @property
    def style(self) -> EditStyle:
        return EditStyle.INCREMENTAL if self.decision == "incremental" else EditStyle.TARGETED


def _append_only(config: NoConfig, context: PolicyContext) -> AppendOnlyPolicy:
    return AppendOnlyPolicy(name=context.name)


def _editable(config: EditableConfig, context: PolicyContext) -> EditablePolicy:
    return EditablePolicy(config.style, name=context.name)


def _summarize(config: NoConfig, context: PolicyContext) -> EditablePolicy:
    return EditablePolicy(EditStyle.SUMMARIZE, name=context.name)


APPEND_ONLY = PolicySpec(
    name="append-only",
    config=NoConfig,
    factory=_append_only,
    mode=RunMode.APPEND_ONLY,
    description="The model answers from the full history; nothing is edited.",
)
EDITABLE = PolicySpec(
    name="editable",
    config=EditableConfig,
    factory=_editable,
    mode=RunMode.EDITABLE,
    description="A bounded decision per turn may shorten or delete unprotected records "
    '(decision: "tool-call" or "incremental").',
)
SUMMARIZE = PolicySpec(
    name="summarize",
    config=NoConfig,
    factory=_summarize,
    mode=RunMode.EDITABLE,
    description="One decision call per turn may fold all unprotected history into a summary.",
)
