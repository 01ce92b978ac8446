"""Conversation episodes: the records a conversation becomes, and how they are appended.

An episode starts from a protected system record and a protected task record that says who
is talking. Sessions then arrive in order, each as one update step of incoming records (turns
become records whose body is ``[date] speaker: text``; role speakers keep their role),
appended in transactions within the core's limits. A question is a protected user record.
"""

from __future__ import annotations

from collections.abc import Sequence

from picocontext import (
    ContextSession,
    Record,
    Role,
    Scope,
    Snapshot,
)
from picocontext_diagnostics.conversations.format import ROLE_SPEAKERS, Conversation, Question
from picocontext_diagnostics.conversations.format import Session as ChatSession

MAX_APPEND = 64
MAX_APPEND_BYTES = 100_000
MAX_BODY_CHARS = 60_000
SYSTEM_ID = "conversation-system"
TASK_ID = "conversation-task"
SYSTEM_TEXT = "You answer questions about a conversation from what you are shown. Be brief."


def conversation_scope(conversation: Conversation) -> Scope:
    return Scope(user_id="conversation", conversation_id=conversation.id, branch_id="main")


def speaker_role(conversation: Conversation, speaker: str) -> Role:
    """Role speakers keep their role; otherwise the first speaker is the user, the rest
    assistants (what a chat template can show)."""
    if speaker in ROLE_SPEAKERS:
        return Role(speaker)
    return Role.USER if speaker == conversation.speakers[0] else Role.ASSISTANT


def turn_body(session: ChatSession, speaker: str, text: str) -> str:
    date = f"[{session.date}] " if session.date else ""
    who = "" if speaker in ROLE_SPEAKERS else f"{speaker}: "
    return f"{date}{who}{text}"[:MAX_BODY_CHARS]


def session_records(conversation: Conversation, session: ChatSession) -> tuple[Record, ...]:
    return tuple(
        Record(
            id=turn.id,
            role=speaker_role(conversation, turn.speaker),
            body=turn_body(session, turn.speaker, turn.text),
        )
        for turn in session.turns
    )


def initial_snapshot(conversation: Conversation) -> Snapshot:
    names = ", ".join(conversation.speakers)
    task = (
        f"This is a conversation between {names} in {len(conversation.sessions)} sessions. "
        "Later you will be asked questions about it; answer each with a short phrase."
    )
    return Snapshot(
        scope=conversation_scope(conversation),
        records=(
            Record(id=SYSTEM_ID, role=Role.SYSTEM, body=SYSTEM_TEXT),
            Record(id=TASK_ID, role=Role.USER, body=task, protected=True),
        ),
    )


def question_record(question: Question) -> Record:
    return Record(
        id=f"question:{question.id}", role=Role.USER, body=question.question, protected=True
    )


def _wire_bytes(records: Sequence[Record]) -> int:
    """An upper bound of the append payload: every record as its JSON."""
    return sum(len(r.model_dump_json().encode()) + 64 for r in records)


def append_chunked(session: ContextSession, records: Sequence[Record]) -> None:
    """Append in transactions within the core limits (64 records, payload bytes)."""
    chunk: list[Record] = []
    for record in records:
        trial = [*chunk, record]
        if chunk and (len(trial) > MAX_APPEND or _wire_bytes(trial) > MAX_APPEND_BYTES):
            session.append_records(chunk)
            trial = [record]
        chunk = trial
    if chunk:
        session.append_records(chunk)
