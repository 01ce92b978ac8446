"""Instruction texts, runtime guidance, tool schemas and control-record texts.

The wording is ours; the facts the protocol depends on are fixed: the revision lines, the
accepted/kept receipt details and the retry feedback (which never quotes model output).
"""

from __future__ import annotations

from typing import Any

from picocontext.edits import EDIT_TOOL, KEEP_TOOL, MAX_EDIT_OPERATIONS
from picocontext.headers import header_field
from picocontext.headers import record_header as record_header
from picocontext.phases import EditStyle, Phase
from picocontext.records import Snapshot

DECISION_INSTRUCTIONS = "\n".join(
    [
        "Before the next answer you may tidy the working history that your next call will see.",
        f"Call {EDIT_TOOL} to make a useful change, or {KEEP_TOOL} with baseRevision to leave "
        "it as it is.",
        "Shorten long record bodies into brief factual notes that keep every exact task fact.",
        "Delete an old record only together with its whole assistant/tool-result group.",
        "Record IDs, roles, protection and tool links are fixed; protected records are "
        "never edited.",
        "Send one atomic call: baseRevision plus operations, each with action (replace or "
        "delete), recordID, and body for replace.",
        "Never include scope, roles or new records, and do not answer the user yet.",
    ]
)

SUMMARIZE_INSTRUCTIONS = "\n".join(
    [
        "Policy: summarize the whole history rather than trimming one record.",
        "Read every unprotected record and fold the task-relevant current state into short notes.",
        "Write that summary into an existing unprotected record body, with exact values.",
        "In the same atomic edit, clear or delete what the summary supersedes (whole groups only).",
        "Keep removals removed and the order of updates; never bring back stale facts.",
        "Protected records, roles, IDs and tool links stay as they are; do not create records.",
        f"If no legal summary helps, call {KEEP_TOOL}. Do not answer in this phase.",
    ]
)

# The system text of every call of an append-only or incremental-editable step: the answer
# and the decision questions share it (and the history after it) token for token, so a
# question or the answer prefills only its trailing message.
COMPLETION_INSTRUCTIONS = (
    "Answer the latest user request from the caller using the working history. "
    "Obey the protected instructions and the initial task."
)

COMPLETION_GUIDANCE = "\n".join(
    [
        "Context decisions are done. Answer the latest caller user request in the working "
        "history now.",
        "Use exactly the output format it asks for. Do not repeat record headers or tool receipts.",
        "Context tools are off. Reply with the answer only.",
    ]
)


def system_instructions(phase: Phase, style: EditStyle) -> str:
    """The default system text of an input in ``phase``. Nothing in it depends on the
    revision (the revision trails after the history, in the guidance), so an edit re-prefills
    from its first changed record, not from the system message."""
    if phase is Phase.EDIT:
        return tool_call_instructions(style)
    return COMPLETION_INSTRUCTIONS


def tool_call_instructions(style: EditStyle) -> str:
    """The system text of every call of a tool-call decision step (decision and answer)."""
    parts = [DECISION_INSTRUCTIONS]
    if style is EditStyle.SUMMARIZE:
        parts.append(SUMMARIZE_INSTRUCTIONS)
    return "\n".join(parts)


def destination_id(snapshot: Snapshot) -> str:
    """The record a model should prefer to rewrite: last unprotected record with a body and no
    calls, else the last unprotected record, else ``none``."""
    unprotected = [r for r in snapshot.records if not r.protected]
    for record in reversed(unprotected):
        if record.body and not record.tool_calls:
            return record.id
    return unprotected[-1].id if unprotected else "none"


def decision_guidance(snapshot: Snapshot, style: EditStyle) -> str:
    """Trailing user message of the decision phase on ``snapshot``."""
    # ids are written as in record headers, so an id cannot print a header of its own
    editable = ", ".join(header_field(i) for i in snapshot.unprotected_ids) or "none"
    destination = header_field(destination_id(snapshot)) if snapshot.unprotected_ids else "none"
    lines = [
        "This turn is only for the context decision: call exactly one tool, then stop.",
    ]
    if style is EditStyle.SUMMARIZE:
        lines += [
            "Fold all task-relevant unprotected history into the complete current state.",
            f"Suggested existing destination: {destination}.",
            "Carry exact current values over from earlier records; clear or delete what is "
            "superseded in the same edit; keep removals effective.",
        ]
    else:
        lines += [
            "Shorten the newest verbose body into factual notes.",
            f"Prefer record {destination} if it contains verbose noise.",
            "Leave earlier concise notes alone; one replacement is usually enough; copy "
            "operation lines exactly.",
        ]
    lines += [
        f"Editable record IDs: {editable}. Never target protected instructions or task.",
        "A replacement uses action, recordID and body, and never repeats the same text.",
        "Delete assistant/tool groups only as a whole; never create records or change metadata.",
        f"If no useful legal change exists, call {KEEP_TOOL} with only baseRevision.",
        f"Use baseRevision {snapshot.revision}.",
        "Put the call between <tool_call> and </tool_call> as JSON with name and arguments.",
    ]
    return "\n".join(lines)


def accepted_detail(revision: int) -> str:
    return f"Accepted revision {revision}. Answer the latest user request now."


def kept_detail(revision: int) -> str:
    return f"Kept revision {revision}. Answer the latest user request now."


def retry_feedback(revision: int) -> str:
    return (
        f"Rejected: choose one valid {EDIT_TOOL} or {KEEP_TOOL} call. Edits need existing "
        "unprotected IDs and complete tool groups. "
        f"Retry against revision {revision}."
    )


def edit_tool_schema(snapshot: Snapshot | None) -> dict[str, Any]:
    """OpenAI-style function schema; recordID is an enum of the current unprotected ids, or
    (``snapshot`` None) a plain string: the spec a session renders before the history, which
    must not change when the history does (the constrained grammar still enforces the ids)."""
    record_id: dict[str, Any] = {"type": "string"}
    if snapshot is not None:
        record_id["enum"] = snapshot.unprotected_ids
    replace = {
        "type": "object",
        "additionalProperties": False,
        "required": ["action", "recordID", "body"],
        "properties": {
            "action": {"type": "string", "enum": ["replace"]},
            "recordID": record_id,
            "body": {"type": "string"},
        },
    }
    delete = {
        "type": "object",
        "additionalProperties": False,
        "required": ["action", "recordID"],
        "properties": {
            "action": {"type": "string", "enum": ["delete"]},
            "recordID": record_id,
        },
    }
    return {
        "type": "function",
        "function": {
            "name": EDIT_TOOL,
            "description": "Atomically shorten unprotected working history by stable record "
            "IDs, keeping every required fact.",
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "required": ["baseRevision", "operations"],
                "properties": {
                    "baseRevision": {
                        "type": "integer",
                        "description": "Current working-context revision.",
                    },
                    "operations": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": MAX_EDIT_OPERATIONS,
                        "items": {"oneOf": [replace, delete]},
                    },
                },
            },
        },
    }


def keep_tool_schema() -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": KEEP_TOOL,
            "description": "Keep the working context unchanged; answer on the next call.",
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "required": ["baseRevision"],
                "properties": {"baseRevision": {"type": "integer"}},
            },
        },
    }


def decision_tools(snapshot: Snapshot | None) -> list[dict[str, Any]]:
    """The edit and keep tools; ``snapshot`` None gives the history-independent specs."""
    return [edit_tool_schema(snapshot), keep_tool_schema()]


# -- the incremental decision -----------------------------------------------------------------
CHOICE_NONE = "none"
# A choice input without its question (the session always writes one).
CHOICE_GUIDANCE = "Reply with exactly one of the offered options."


def choice_question(new_ids: list[str], options: list[tuple[str, str]]) -> str:
    """The trailing user message of one incremental choice: which earlier record the new
    record replaces. ``options`` pairs each answer handle with its record id (equal unless the
    ids are long). Measured on 0.5–1.5B models: one choice among few enumerated options is the
    act they do best; every extra instruction line cost accuracy (docs/policies.md)."""
    new = " and ".join(header_field(i) for i in new_ids)
    if all(handle == record_id for handle, record_id in options):
        listed = ", ".join(header_field(h) for h, _ in options)
    else:
        listed = ", ".join(f"{h} (record {header_field(i)})" for h, i in options)
    return "\n".join(
        [
            "Context check before the answer.",
            f"Which earlier record does the new record {new} replace?",
            "It replaces an earlier record when it gives a new value for the same thing, "
            "so the earlier one is out of date.",
            f"Reply with one of: {listed}, or {CHOICE_NONE} if it replaces nothing.",
        ]
    )


# The question-and-answer judgement of the incremental decision (``judge: "question"``): a
# small model cannot say whether a note is out of date, but it can write the question a note
# answers and answer it from two notes (docs/policies.md). Both are trailing messages after
# the shared prefix; the runtime compares the answer's words with the two notes.
QUESTION_OUTPUT_TOKENS = 24
ANSWER_OUTPUT_TOKENS = 24
# A quoted note longer than this is cut (a telemetry table would cost its whole length again
# in every question about it).
QUOTE_CHARS = 200


def quoted_whole(text: str) -> bool:
    """Whether a question quotes ``text`` whole (:data:`QUOTE_CHARS` once its whitespace is
    flattened), rather than cut."""
    return len(" ".join(text.split())) <= QUOTE_CHARS


def _quote(text: str) -> str:
    flat = " ".join(text.split())
    return flat if quoted_whole(flat) else flat[: QUOTE_CHARS - 1] + "…"


def restate_question(record_id: str, text: str) -> str:
    """The trailing message that asks for the one question record ``record_id`` answers."""
    return "\n".join(
        [
            f"Record {header_field(record_id)}: {_quote(text)}",
            "Write the one question that this record answers. Reply with the question only.",
        ]
    )


def answer_question(
    question: str,
    earlier: tuple[str, str],
    later: tuple[str, str],
    newer_first: bool = False,
) -> str:
    """The trailing message that asks the question over two records (``(id, text)`` pairs),
    the older first unless ``newer_first``, for what is true now."""
    pair = [later, earlier] if newer_first else [earlier, later]
    order = "newest first" if newer_first else "in the order they were written"
    return "\n".join(
        [
            f"Records, {order}:",
            f"1. {_quote(pair[0][1])}",
            f"2. {_quote(pair[1][1])}",
            "",
            f"Question: {question}",
            "Answer in a few words with what is true now.",
        ]
    )


# What the recheck asks a record that does not answer the question to reply.
NOT_SAID = "not said"


def recheck_question(question: str, later: tuple[str, str]) -> str:
    """The trailing message that asks ``question`` again over the newer record alone (an
    ``(id, text)`` pair), allowing the reply :data:`NOT_SAID`."""
    return "\n".join(
        [
            f"Record {header_field(later[0])}: {_quote(later[1])}",
            "",
            f"Question: {question}",
            f'Answer in a few words from this record alone, or reply "{NOT_SAID}" if it does '
            "not answer the question.",
        ]
    )


# Shortening (``shorten_over``): one trailing question per long record, listing the kinds
# its lines fall into (lines alike but for their values are one kind) and asking which a
# later request could need; the reply is letters or "all". Measured first (docs/policies.md,
# "Sixth round"): asked to copy the lines worth keeping, the 1.5B model copied the record's
# first lines, telemetry, and left its one fact out.
SHORTEN_OUTPUT_TOKENS = 16
# A kind's example line is cut to this many characters.
KIND_EXAMPLE_CHARS = 120


def shorten_question(record_id: str, kinds: list[tuple[str, int, str]]) -> str:
    """The trailing message that asks which kinds of line of record ``record_id`` to keep;
    ``kinds`` are (letter, line count, example line)."""
    total = sum(count for _, count, _ in kinds)
    listed = []
    for letter, count, example in kinds:
        flat = " ".join(example.split())
        if len(flat) > KIND_EXAMPLE_CHARS:
            flat = flat[: KIND_EXAMPLE_CHARS - 1] + "…"
        listed.append(
            f"{letter}. {count} lines like: {flat}" if count > 1 else f"{letter}. 1 line: {flat}"
        )
    return "\n".join(
        [
            f"Record {header_field(record_id)} has {total} lines of {len(kinds)} kinds:",
            *listed,
            "Which kinds of line could a later request need? Reply with their letters, or all.",
        ]
    )
