"""The LoCoMo converter on a small sample in LoCoMo's shape (written here; the benchmark
itself is not shipped): sessions in numeric order with ISO dates, photo captions kept,
adversarial questions left out, evidence read from its text and ghost ids dropped, kinds
mapped, and both published file shapes read."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext_diagnostics.conversations.format import ConversationError, load_conversation
from picocontext_diagnostics.conversations.locomo import (
    LocomoStats,
    convert_file,
    locomo_date,
    main,
)


def sample() -> dict[str, Any]:
    def turn(dia: str, who: str, text: str, **extra: Any) -> dict[str, Any]:
        return {"speaker": who, "dia_id": dia, "text": text, **extra}

    conversation: dict[str, Any] = {"speaker_a": "Ana", "speaker_b": "Ben"}
    for n in (1, 2, 10):
        conversation[f"session_{n}_date_time"] = f"{n}:05 pm on {n} May, 2023"
        conversation[f"session_{n}"] = [
            turn(f"D{n}:1", "Ana", f"Session {n} opens."),
            turn(f"D{n}:2", "Ben", "Look.", blip_caption="a photo of a red kite"),
        ]
    conversation["session_1_summary"] = "not a session"
    qa = [
        {"question": "What did Ben show?", "answer": "a kite", "evidence": ["D1:2"], "category": 4},
        {"question": "When?", "answer": 2023, "evidence": ["D1:1; D10:1"], "category": 2},
        {"question": "Trick?", "evidence": ["D2:1"], "category": 5, "adversarial_answer": "x"},
        {"question": "Ghost?", "answer": "no", "evidence": ["D9:9", "D"], "category": 1},
        {"question": "Half?", "answer": "yes", "evidence": ["D2:1", "D7:7"], "category": 3},
    ]
    return {"sample_id": "conv-1", "conversation": conversation, "qa": qa}


def test_a_locomo_sample_becomes_a_conversation(tmp_path: Path) -> None:
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps([sample()]))
    stats = LocomoStats()
    [conversation] = convert_file(path, stats)
    assert conversation.id == "locomo-conv-1" and conversation.speakers == ("Ana", "Ben")
    assert [s.id for s in conversation.sessions] == ["s1", "s2", "s10"]
    assert conversation.sessions[2].date == "2023-05-10T22:05"
    assert conversation.turn("D1:2").text == "Look. [shares a photo: a photo of a red kite]"
    questions = {q.question: q for q in conversation.questions}
    assert set(questions) == {"What did Ben show?", "When?", "Half?"}
    assert questions["When?"].evidence == ("D1:1", "D10:1")
    assert questions["When?"].answer == "2023" and questions["When?"].category == "temporal"
    assert questions["What did Ben show?"].category == "single-hop"
    assert questions["Half?"].evidence == ("D2:1",) and questions["Half?"].category == "open-domain"
    assert (stats.questions, stats.adversarial, stats.no_evidence) == (3, 1, 1)
    assert sorted(stats.dropped_evidence) == ["D7:7", "D9:9"]


def test_the_per_conversation_shape_and_the_command(tmp_path: Path, capsys: Any) -> None:
    one = sample()
    flat = {**one["conversation"], "qa": one["qa"]}
    path = tmp_path / "26.json"
    path.write_text(json.dumps(flat))
    assert main([str(path), "--out", str(tmp_path / "out")]) == 0
    converted = load_conversation(tmp_path / "out" / "locomo-26.json")
    assert len(converted.questions) == 3
    assert "1 conversations, 6 turns, 3 questions" in capsys.readouterr().out


def test_a_date_out_of_form_names_its_session(tmp_path: Path) -> None:
    bad = sample()
    bad["conversation"]["session_2_date_time"] = "sometime in spring"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([bad]))
    with pytest.raises(ConversationError, match="conv-1: session_2: date 'sometime in spring'"):
        convert_file(path, LocomoStats())
    assert main([str(path), "--out", str(tmp_path / "o")]) == 2


@settings(max_examples=200, deadline=None)
@given(st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2100, 1, 1)))
def test_locomo_dates_round_trip(moment: datetime) -> None:
    hour = moment.strftime("%I").lstrip("0")
    text = (
        f"{hour}:{moment:%M} {moment:%p}".lower() + f" on {moment.day} {moment:%B}, {moment.year}"
    )
    assert locomo_date(text) == moment.replace(second=0, microsecond=0).isoformat(
        timespec="minutes"
    )


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_anything_else_is_refused_by_name(text: str) -> None:
    try:
        parsed = locomo_date(text)
    except ValueError as exc:
        assert "is not in LoCoMo's form" in str(exc)
    else:
        assert datetime.fromisoformat(parsed)
