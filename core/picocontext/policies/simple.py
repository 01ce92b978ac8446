"""The registrations of the policies that run the session's own loop: append-only, editable
and summarize (editable with the fold-everything decision style). None has settings."""

from __future__ import annotations

from picocontext.backend import EditStyle
from picocontext.policies.base import AppendOnlyPolicy, EditablePolicy
from picocontext.policies.registry import NoConfig, PolicyContext, PolicySpec
from picocontext.report import RunMode


def _append_only(config: NoConfig, context: PolicyContext) -> AppendOnlyPolicy:
    return AppendOnlyPolicy(name=context.name)


def _editable(config: NoConfig, context: PolicyContext) -> EditablePolicy:
    return EditablePolicy(EditStyle.TARGETED, name=context.name)


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
    config=NoConfig,
    factory=_editable,
    mode=RunMode.EDITABLE,
    description="One decision call per turn may shorten or delete unprotected records.",
)
SUMMARIZE = PolicySpec(
    name="summarize",
    config=NoConfig,
    factory=_summarize,
    mode=RunMode.EDITABLE,
    description="One decision call per turn may fold all unprotected history into a summary.",
)
