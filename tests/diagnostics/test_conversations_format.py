"""picocontext.conversation/1: the shipped files, the generated schema, hostile files, and
the chat-transcript importers and exporter (round trips)."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext import ContextSession, Record, Role, Scope, Snapshot, ToolCall
from picocontext.models import ByteCounter
from picocontext_diagnostics.conversations.extractive_backend import (
    DeterministicConversationBackend,
)
from picocontext_diagnostics.conversations.feed import (
    initial_snapshot,
    session_records,
)
from picocontext_diagnostics.conversations.format import (
    FORMAT,
    MAX_BYTES,
    SCHEMA_FILENAME,
    ConversationError,
    export_messages,
    generate_schema,
    import_jsonl,
    import_messages,
    load_conversation,
    parse_conversation,
    parse_date,
)

jsonschema: Any = importlib.import_module("jsonschema")
RESOURCES = Path(__file__).resolve().parents[2] / "resources"
SHIPPED = sorted((RESOURCES / "conversations").glob("*.json"))


TURN = {"id": "t1", "speaker": "Ada", "text": "My cat is called Pixel."}


def minimal(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": FORMAT,
        "id": "tiny",
        "speakers": ["Ada", "Bo"],
        "sessions": [
            {
                "id": "s1",
                "date": "2026-01-01",
                "turns": [
                    {"id": "t1", "speaker": "Ada", "text": "My cat is called Pixel."},
                    {"id": "t2", "speaker": "Bo", "text": "Nice name."},
                ],
            }
        ],
        "questions": [
            {
                "id": "q1",
                "question": "What is the cat called?",
                "answer": "Pixel",
                "evidence": ["t1"],
            }
        ],
    }
    doc.update(changes)
    return doc


def test_shipped_conversations_load_and_have_enough_questions() -> None:
    assert len(SHIPPED) >= 3
    conversations = [load_conversation(p) for p in SHIPPED]
    assert sum(len(c.questions) for c in conversations) >= 20
    assert all(len(c.sessions) >= 3 for c in conversations)
    assert any(q.category == "update" for c in conversations for q in c.questions)


def test_shipped_schema_is_generated_from_the_models() -> None:
    shipped = json.loads((RESOURCES / "schemas" / SCHEMA_FILENAME).read_text())
    assert shipped == generate_schema()
    jsonschema.Draft202012Validator.check_schema(shipped)
    for path in SHIPPED:
        jsonschema.validate(json.loads(path.read_text()), shipped)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "picocontext.conversation/2"}, "unknown format"),
        ({"sessions": []}, "has no sessions and so no turns — add a session"),
        ({"sessions": [{"id": "s1", "turns": []}]}, "session 's1' has no turns — add"),
        (
            {"sessions": [{"id": "s1", "date": "next Tuesday", "turns": [TURN]}]},
            "session 's1' has date 'next Tuesday', which does not parse — write an ISO 8601",
        ),
        (
            {
                "sessions": [
                    {
                        "id": "s1",
                        "turns": [
                            {"id": "t1", "speaker": "Ada", "text": "a"},
                            {"id": "t1", "speaker": "Bo", "text": "b"},
                        ],
                    }
                ],
                "questions": [],
            },
            "duplicate turn id 't1' — give each one its own id",
        ),
        (
            {"questions": [{"id": "q1", "question": "?", "answer": "x", "evidence": ["t9"]}]},
            "names evidence \\['t9'\\] that is not a turn id — list the ids",
        ),
        (
            {
                "sessions": [{"id": "s1", "turns": [{"id": "t1", "speaker": "Cy", "text": "a"}]}],
                "questions": [],
            },
            "not in speakers",
        ),
        ({"extra": 1}, "extra"),
    ],
)
def test_bad_documents_are_clear_errors(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConversationError, match=message) as caught:
        parse_conversation(json.dumps(minimal(**change)), "bad.json")
    assert caught.value.message.startswith("bad.json: ") and "\n" not in caught.value.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the file is empty — a conversation is a JSON object"),
        ("  \n", "the file is empty"),
        ("{}", 'no "format" field — a conversation is a JSON object with "format"'),
    ],
)
def test_empty_and_formatless_files_say_so(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(ConversationError, match=message):
        load_conversation(path)


@settings(max_examples=200, deadline=None)
@given(st.datetimes(timezones=st.none() | st.timezones()), st.booleans())
def test_iso_dates_and_datetimes_parse(moment: datetime, date_only: bool) -> None:
    text = moment.date().isoformat() if date_only else moment.isoformat()
    assert parse_date(text) is not None
    doc = minimal(sessions=[{"id": "s1", "date": text, "turns": [TURN]}])
    assert parse_conversation(json.dumps(doc)).sessions[0].date == text


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=64).filter(lambda t: parse_date(t) is None))
def test_a_date_that_does_not_parse_is_named_with_its_session(text: str) -> None:
    doc = minimal(sessions=[{"id": "s7", "date": text, "turns": [TURN]}], questions=[])
    try:
        parse_conversation(json.dumps(doc), "d.json")
    except ConversationError as exc:
        assert exc.message.startswith("d.json: ") and "\n" not in exc.message.strip()
        assert "s7" in exc.message or "date" in exc.message
    else:
        raise AssertionError(f"{text!r} was accepted as a date")


def test_hostile_files(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with big.open("wb") as handle:
        handle.truncate(50_000_000)
    with pytest.raises(ConversationError, match="larger than the"):
        load_conversation(big)
    latin = tmp_path / "latin.json"
    latin.write_bytes(json.dumps(minimal()).encode().replace(b"Pixel", b"Pix\xe9l"))
    with pytest.raises(ConversationError, match=r"not UTF-8 text \(invalid byte at offset \d+\)"):
        load_conversation(latin)
    with pytest.raises(ConversationError, match="not a regular file"):
        load_conversation(tmp_path)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ConversationError, match="not a regular file"):
        load_conversation(fifo)
    with pytest.raises(ConversationError, match="cannot open"):
        load_conversation(tmp_path / "absent.json")
    dup = tmp_path / "dup.json"
    dup.write_text('{"format": "a", "format": "b"}')
    with pytest.raises(ConversationError, match="duplicate key 'format'"):
        load_conversation(dup)
    broken = tmp_path / "broken.json"
    broken.write_text('{"format":\n  ')
    with pytest.raises(ConversationError, match="line 2, column 3"):
        load_conversation(broken)
    assert MAX_BYTES < 50_000_000


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_is_a_conversation_or_a_clear_error(text: str) -> None:
    try:
        parse_conversation(text)
    except ConversationError as exc:
        assert exc.message.startswith("conversation:")


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(["id", "turns", "speaker", "text"]), inner, max_size=3
            )
        ),
        max_leaves=12,
    )
)
def test_mangled_sessions_are_clear_errors(value: Any) -> None:
    doc = minimal(sessions=value)
    with contextlib.suppress(ConversationError):
        parse_conversation(json.dumps(doc))


MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "Be nice."},
    {"role": "user", "content": "I moved to Braga."},
    {"role": "assistant", "content": "Good luck in Braga!"},
    {"role": "user", "content": [{"type": "text", "text": "Thanks."}]},
]


def records_of(conversation: Any) -> list[Record]:
    return [r for s in conversation.sessions for r in session_records(conversation, s)]


def test_messages_round_trip_through_records() -> None:
    conversation = import_messages({"messages": MESSAGES}, "chat")
    assert conversation.speakers == ("system", "user", "assistant")
    exported = export_messages(records_of(conversation))["messages"]
    expected = [
        {**m, "content": "Thanks."}
        if m["role"] == "user" and not isinstance(m["content"], str)
        else m
        for m in MESSAGES
    ]
    assert exported == expected
    again = import_messages({"messages": exported}, "chat")
    assert again == conversation


def test_jsonl_of_messages_and_of_transcripts(tmp_path: Path) -> None:
    lines = "\n".join(json.dumps(m) for m in MESSAGES) + "\n\n"
    one = import_jsonl(lines)
    assert len(one.sessions) == 1 and len(one.sessions[0].turns) == 4
    transcripts = tmp_path / "chats.jsonl"
    transcripts.write_text(
        json.dumps({"messages": MESSAGES[:2]}) + "\n" + json.dumps({"messages": MESSAGES[2:]})
    )
    two = load_conversation(transcripts)
    assert [len(s.turns) for s in two.sessions] == [2, 2]
    assert two.id == "chats" and two.questions == ()
    with pytest.raises(ConversationError, match="line 2"):
        import_jsonl('{"role": "user", "content": "a"}\n{oops', source="x.jsonl")
    with pytest.raises(ConversationError, match="role must be"):
        import_messages({"messages": [{"role": "robot", "content": "a"}]})
    with pytest.raises(ConversationError, match="not a text part"):
        import_messages({"messages": [{"role": "user", "content": [{"type": "image"}]}]})


def test_export_keeps_tool_calls_and_links() -> None:
    scope = Scope(user_id="u", conversation_id="c", branch_id="b")
    snapshot = Snapshot(
        scope=scope,
        records=(
            Record(id="u1", role=Role.USER, body="look it up", protected=True),
            Record(id="a1", role=Role.ASSISTANT, tool_calls=(ToolCall(id="c1", name="find"),)),
            Record(id="r1", role=Role.TOOL, body="found", tool_call_id="c1"),
        ),
    )
    out = export_messages(snapshot)["messages"]
    assert out[1]["tool_calls"][0]["function"] == {"name": "find", "arguments": "{}"}
    assert out[2] == {"role": "tool", "content": "found", "tool_call_id": "c1"}
    imported = import_messages({"messages": out})
    assert "[tool call] find({})" in imported.sessions[0].turns[1].text


def test_a_session_transcript_exports_after_an_episode() -> None:
    conversation = parse_conversation(json.dumps(minimal()))
    session = ContextSession(
        initial_snapshot(conversation), ByteCounter(), DeterministicConversationBackend()
    )
    session.append_records(session_records(conversation, conversation.sessions[0]))
    out = export_messages(session.original_context)["messages"]
    assert out[-2]["content"] == "[2026-01-01] Ada: My cat is called Pixel."
    assert [m["role"] for m in out] == ["system", "user", "user", "assistant"]
