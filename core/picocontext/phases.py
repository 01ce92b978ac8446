"""The phases of a model call and the edit styles of an editable run.

Both the model input (:mod:`picocontext.backend`) and the texts for each phase
(:mod:`picocontext.prompts`) need these names, so they live in a module that imports nothing
of ours: each of the two depends on this one, and prompts never depends on the backend.
"""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    """``edit``: the tool-call context decision (edit/keep tools); ``choice``: one short
    question of the incremental decision, answered by one option of ``answer_schema_json``;
    ``completion``: the answer (tool calls refused); ``tools``: a policy's own tool step
    (navigation or digest verbs, given in ``tools_json``)."""

    EDIT = "edit"
    CHOICE = "choice"
    COMPLETION = "completion"
    TOOLS = "tools"


class EditStyle(StrEnum):
    """How an editable run decides. ``incremental``: for each new record, one constrained
    choice "which earlier record does it replace, or none" (designed by measurement for
    0.5–1.5B models, see docs/policies.md). ``targeted`` and ``summarize`` are the tool-call
    protocol (one ``edit_context``/``keep_context`` call with operations), kept for
    comparison."""

    TARGETED = "targeted"
    SUMMARIZE = "summarize"
    INCREMENTAL = "incremental"
