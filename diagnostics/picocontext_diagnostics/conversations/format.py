"""The conversation file format ``picocontext.conversation/1``, its importers and exporter.

A conversation is what a person brings to compare context strategies on: sessions of turns
between speakers, and (optionally) questions whose answers and evidence turns are known, so a
report can say whether the evidence was in front of the model. The models here are the
format: the JSON Schema in ``resources/schemas/conversation-1.schema.json`` is generated from
them (:func:`generate_schema`) and a test keeps the shipped file equal to it.

Reading is bounded and strict: only regular files, at most :data:`MAX_BYTES` (never read
whole when larger), UTF-8 (a bad byte is named by offset), JSON without duplicate keys, then
the invariants the schema cannot say: turn ids unique across the file, every turn's speaker
listed, evidence naming existing turns, unique session and question ids, no empty session,
session dates that parse as ISO 8601 (so temporal questions can be asked of them). Every
problem is a :class:`ConversationError` whose one-line message names the file and the item,
then says what to do after a dash.

Importers turn an OpenAI-style chat transcript (``{"messages": [{"role", "content"}]}`` as
JSON, or JSONL with one message or one ``{"messages": ...}`` transcript per line) into a
conversation without questions; :func:`export_messages` writes any record list or
:class:`picocontext.Snapshot` back to that message form.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from picocontext import InputFileError, Record, Role, Snapshot, read_text_bounded, strict_loads
from picocontext_diagnostics.errors import DiagnosticsError

FORMAT: Literal["picocontext.conversation/1"] = "picocontext.conversation/1"
SCHEMA_FILENAME = "conversation-1.schema.json"
MAX_BYTES = 8_000_000
MAX_TURNS = 20_000
MAX_QUESTIONS = 2_000
ROLE_SPEAKERS = frozenset({"system", "user", "assistant"})
DATE_HINT = "— write an ISO 8601 date such as 2026-03-02 or 2026-03-02T14:30"
FORMAT_HINT = f'— a conversation is a JSON object with "format": "{FORMAT}" (docs/conversations.md)'

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_Id = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")


class ConversationError(DiagnosticsError):
    """A conversation or transcript file is unreadable or breaks the format (says where);
    bad input, so a command refusing it exits 2."""

    exit_code = 2


class Turn(BaseModel):
    """One thing a speaker said; ``id`` is unique across the whole file."""

    model_config = _FROZEN
    id: str = _Id
    speaker: str = Field(min_length=1, max_length=128)
    text: str = Field(min_length=1, max_length=64_000)


class Session(BaseModel):
    """Turns that arrive together; ``date`` (ISO 8601: a date, or a date and time) is shown
    with each turn."""

    model_config = _FROZEN
    id: str = _Id
    date: str | None = Field(default=None, min_length=1, max_length=64)
    turns: tuple[Turn, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _date_parses(self) -> Session:
        if self.date is not None and parse_date(self.date) is None:
            raise ValueError(
                f"session {self.id!r} has date {self.date!r}, which does not parse {DATE_HINT}"
            )
        return self


class Question(BaseModel):
    """A question about the conversation, its reference answer and the turns it rests on;
    ``category`` is its kind (single-hop, multi-hop, temporal, open-domain, ...), by which
    reports break the scores down."""

    model_config = _FROZEN
    id: str = _Id
    question: str = Field(min_length=1, max_length=4_000)
    answer: str = Field(min_length=1, max_length=4_000)
    evidence: tuple[str, ...] = Field(min_length=1, max_length=64)
    category: str | None = Field(default=None, min_length=1, max_length=64)


class Conversation(BaseModel):
    """A ``picocontext.conversation/1`` document."""

    model_config = _FROZEN
    format: Literal["picocontext.conversation/1"]
    id: str = _Id
    speakers: tuple[str, ...] = Field(min_length=1, max_length=64)
    sessions: tuple[Session, ...] = Field(min_length=1)
    questions: tuple[Question, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Conversation:
        _unique("session id", [s.id for s in self.sessions])
        _unique("turn id", [t.id for s in self.sessions for t in s.turns])
        _unique("question id", [q.id for q in self.questions])
        _unique("speaker", list(self.speakers), "list each speaker once")
        if sum(len(s.turns) for s in self.sessions) > MAX_TURNS:
            raise ValueError(f"more than {MAX_TURNS} turns")
        if len(self.questions) > MAX_QUESTIONS:
            raise ValueError(f"more than {MAX_QUESTIONS} questions")
        speakers = set(self.speakers)
        for session in self.sessions:
            for turn in session.turns:
                if turn.speaker not in speakers:
                    raise ValueError(
                        f"turn {turn.id!r} has speaker {turn.speaker!r}, which is not in "
                        f"speakers {list(self.speakers)}"
                    )
        turns = {t.id for s in self.sessions for t in s.turns}
        for question in self.questions:
            _unique(
                f"evidence id of question {question.id!r}",
                list(question.evidence),
                "list each evidence turn once",
            )
            absent = [e for e in question.evidence if e not in turns]
            if absent:
                raise ValueError(
                    f"question {question.id!r} names evidence {absent} that is not a turn id "
                    "— list the ids of turns in this file"
                )
        return self

    def turn(self, turn_id: str) -> Turn:
        for session in self.sessions:
            for turn in session.turns:
                if turn.id == turn_id:
                    return turn
        raise KeyError(turn_id)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", exclude_none=True), indent=2) + "\n"


def parse_date(text: str) -> datetime | None:
    """``text`` as an ISO 8601 date or date and time (``2026-03-02``, ``2026-03-02T14:30``,
    ``2026-03-02 14:30:00+02:00``), or None when it is not one."""
    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:
        return None


def _unique(what: str, values: Sequence[str], hint: str = "give each one its own id") -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"duplicate {what} {value!r} — {hint}")
        seen.add(value)


def generate_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the format, generated from the models."""
    schema = Conversation.model_json_schema(mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://picocontext.invalid/schemas/" + SCHEMA_FILENAME,
        "title": FORMAT,
        "description": (
            "A conversation for picocontext evaluations. Turn ids are unique across the file "
            "and evidence names turn ids (checked by the reader; not expressible here)."
        ),
        **{k: v for k, v in schema.items() if k != "title"},
    }


# -- reading -------------------------------------------------------------------------------


def read_bounded(path: Path | str, max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes`` (read through
    :mod:`picocontext.files`: FIFOs and devices are refused without blocking); clear errors
    otherwise."""
    try:
        text = read_text_bounded(path, max_bytes)
    except InputFileError as exc:
        raise ConversationError(exc.message + _read_hint(exc.message, max_bytes)) from None
    if not text.strip():
        raise ConversationError(f"{path}: the file is empty {FORMAT_HINT}")
    return text


def _read_hint(message: str, max_bytes: int) -> str:
    if "-byte limit" in message:
        return f" — split it into conversations of at most {max_bytes:,} bytes"
    if "cannot open" in message:
        return " — check the path"
    if "not UTF-8" in message:
        return " — save the file as UTF-8"
    return ""


def parse_json(text: str, source: str) -> Any:
    """Strict JSON: no duplicate keys, no NaN/Infinity; errors give line and column."""
    try:
        return strict_loads(text)
    except json.JSONDecodeError as exc:
        raise ConversationError(
            f"{source}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise ConversationError(f"{source}: invalid JSON: {exc}") from None


def _explain(error: ValidationError) -> str:
    parts: list[str] = []
    for item in error.errors()[:5]:
        where = ".".join(str(p) for p in item["loc"])
        message = str(item["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    more = error.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def parse_conversation(text: str, source: str = "conversation") -> Conversation:
    """Validate JSON text as a conversation; the message names ``source`` and the place."""
    if not text.strip():
        raise ConversationError(f"{source}: the text is empty {FORMAT_HINT}")
    data = parse_json(text, source)
    if not isinstance(data, dict):
        raise ConversationError(f"{source}: a conversation is a JSON object")
    if "format" not in data:
        raise ConversationError(f'{source}: no "format" field {FORMAT_HINT}')
    found = data.get("format")
    if found != FORMAT:
        raise ConversationError(
            f"{source}: unknown format {found!r} — this reader understands {FORMAT!r} "
            "(see docs/conversations.md)"
        )
    _check_turns(data, source)
    try:
        return Conversation.model_validate(data)
    except ValidationError as exc:
        raise ConversationError(f"{source}: {_explain(exc)}") from None


def _check_turns(data: dict[str, Any], source: str) -> None:
    """Name an empty conversation or session by its id (the schema would say ``List should
    have at least 1 item``)."""
    sessions = data.get("sessions")
    if not isinstance(sessions, list):
        return
    if not sessions:
        raise ConversationError(
            f"{source}: the conversation has no sessions and so no turns "
            "— add a session with at least one turn"
        )
    for number, session in enumerate(sessions, 1):
        if isinstance(session, dict) and session.get("turns") == []:
            name = session.get("id", f"number {number}")
            raise ConversationError(
                f"{source}: session {name!r} has no turns — add its turns or remove the session"
            )


def load_conversation(path: Path | str, max_bytes: int = MAX_BYTES) -> Conversation:
    """Read a conversation file (``.json`` in the format, or an OpenAI-style ``.json``/
    ``.jsonl`` transcript, which becomes a conversation without questions)."""
    text = read_bounded(path, max_bytes)
    source = str(path)
    if Path(path).suffix == ".jsonl":
        return import_jsonl(text, Path(path).stem, source)
    data = parse_json(text, source)
    if isinstance(data, dict) and "messages" in data and "format" not in data:
        return import_messages(data, Path(path).stem, source)
    return parse_conversation(text, source)


# -- importing chat transcripts --------------------------------------------------------------


def _content_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise ConversationError(
                    f"{where}: content part {i} is not a text part; only text can be imported"
                )
            texts.append(str(part.get("text", "")))
        return "\n".join(texts)
    if content is None:
        return ""
    raise ConversationError(f"{where}: content must be a string or a list of text parts")


def _message_text(message: Any, where: str) -> tuple[str, str]:
    if not isinstance(message, dict):
        raise ConversationError(f"{where}: a message is a JSON object")
    role = message.get("role")
    if role not in ("system", "user", "assistant", "tool"):
        raise ConversationError(
            f"{where}: role must be system, user, assistant or tool, got {role!r}"
        )
    text = _content_text(message.get("content"), where)
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ConversationError(f"{where}: tool_calls must be a list")
    for call in calls:
        function = call.get("function", {}) if isinstance(call, dict) else {}
        line = f"[tool call] {function.get('name', '?')}({function.get('arguments', '')})"
        text = f"{text}\n{line}" if text else line
    if not text.strip():
        raise ConversationError(f"{where}: the message has no text")
    return str(role), text


def _session(messages: Any, number: int, source: str) -> Session:
    if not isinstance(messages, list) or not messages:
        raise ConversationError(f"{source}: 'messages' must be a non-empty list")
    sid = f"s{number}"
    turns = []
    for i, message in enumerate(messages):
        role, text = _message_text(message, f"{source}: session {number}, message {i}")
        turns.append(Turn(id=f"{sid}-t{i + 1}", speaker=role, text=text))
    return Session(id=sid, turns=tuple(turns))


def _conversation(sessions: list[Session], name: str, source: str) -> Conversation:
    speakers = list(dict.fromkeys(t.speaker for s in sessions for t in s.turns))
    cid = "".join(c if c.isalnum() or c in "._-" else "-" for c in name).strip("-._") or "chat"
    try:
        return Conversation(
            format=FORMAT, id=cid[:128], speakers=tuple(speakers), sessions=tuple(sessions)
        )
    except ValidationError as exc:
        raise ConversationError(f"{source}: {_explain(exc)}") from None


def import_messages(data: Any, name: str = "chat", source: str = "transcript") -> Conversation:
    """``{"messages": [...]}`` → a one-session conversation (speakers are the roles)."""
    if not isinstance(data, dict) or "messages" not in data:
        raise ConversationError(f"{source}: expected an object with 'messages'")
    return _conversation([_session(data["messages"], 1, source)], name, source)


def import_jsonl(text: str, name: str = "chat", source: str = "transcript") -> Conversation:
    """JSONL: every line one message (one session), or every line one ``{"messages": ...}``
    transcript (one session per line, in order). Blank lines are ignored."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise ConversationError(f"{source}: no JSON lines")
    items = [(n, parse_json(line, f"{source}: line {n}")) for n, line in lines]
    if all(isinstance(v, dict) and "messages" in v for _, v in items):
        sessions = [
            _session(v["messages"], i, f"{source}: line {n}") for i, (n, v) in enumerate(items, 1)
        ]
        return _conversation(sessions, name, source)
    if any(isinstance(v, dict) and "messages" in v for _, v in items):
        raise ConversationError(f"{source}: mixes message lines and transcript lines")
    return _conversation([_session([v for _, v in items], 1, source)], name, source)


# -- exporting ------------------------------------------------------------------------------


def export_messages(records: Snapshot | Iterable[Record]) -> dict[str, Any]:
    """Records (or a snapshot's records) as ``{"messages": [...]}`` in the OpenAI chat shape:
    tool calls as ``tool_calls`` function entries, results with ``tool_call_id``."""
    items = records.records if isinstance(records, Snapshot) else tuple(records)
    messages: list[dict[str, Any]] = []
    for record in items:
        message: dict[str, Any] = {"role": record.role.value, "content": record.body}
        if record.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in record.tool_calls
            ]
        if record.role is Role.TOOL and record.tool_call_id is not None:
            message["tool_call_id"] = record.tool_call_id
        messages.append(message)
    return {"messages": messages}
