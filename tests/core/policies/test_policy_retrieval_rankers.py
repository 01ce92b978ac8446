"""The general rankers retrieval adds to BM25 where a question and its answer share few words:
the adjacent turns, the named speaker and the named date (the session and the feedback are
tested in ``test_policy_retrieval_packing``). Each reads only what a record's body says."""

from __future__ import annotations

import pydantic
import pytest

import picocontext.policies.lexical as lexical_module
from picocontext import Record, Role
from picocontext.policies import RetrievalPolicy, RetrievalSettings
from picocontext.policies.history import Unit
from picocontext.policies.lexical import bm25_scores, lexical_index
from picocontext.policies.retrieval_signals import (
    DateMention,
    date_match,
    date_mentions,
    named_speakers,
    speaker_of,
    with_context,
)

OFF = RetrievalSettings(context_weight=0.0, speaker_weight=0.0, date_weight=0.0, session_weight=0.0)


def units(*bodies: str) -> list[Unit]:
    return [(Record(id=f"t{i}", role=Role.USER, body=body),) for i, body in enumerate(bodies)]


def order(settings: RetrievalSettings, archive: list[Unit], query: str) -> list[int]:
    return [i for i, _ in RetrievalPolicy(settings).rank(archive, query)]


def test_a_turn_by_the_named_speaker_outranks_one_that_only_addresses_them() -> None:
    archive = units(
        "[2026-01-05] Noor: Maya, your garden looks great!",
        "[2026-01-05] Maya: I planted tulips in the garden.",
        "[2026-01-05] Noor: The trains were late again.",
    )
    query = "What did Maya plant in her garden?"
    assert named_speakers(archive, query) == {"Maya"}
    assert speaker_of(archive[0]) == "Noor"
    ranked = order(RetrievalSettings(speaker_weight=0.5), archive, query)
    assert ranked[0] == 1
    # with nothing but her name in common, her turn still comes before one addressing her
    only_name = OFF.model_copy(update={"speaker_weight": 0.5})
    assert order(only_name, archive, "What does Maya grow?")[0] == 1


def test_naming_every_speaker_or_none_prefers_no_one() -> None:
    archive = units("[d1] Noor: Hello Maya.", "[d1] Maya: Hi Noor.", "Untagged text: no one")
    assert named_speakers(archive, "What did Maya and Noor say?") == set()
    assert named_speakers(archive, "What did they say?") == set()
    assert speaker_of(units("a body without a speaker")[0]) == ""
    assert speaker_of(units("[d1] the plan: paint the shed")[0]) == ""
    assert speaker_of(units("[d1] Anne Marie: hello")[0]) == "Anne Marie"


def test_a_reply_gains_from_the_turn_it_answers_within_its_session() -> None:
    archive = units(
        "[2026-01-05] Noor: What got you into running?",
        "[2026-01-05] Maya: It clears my head after work.",
        "[2026-01-06] Maya: Trains again.",
        "[2026-01-05] Maya: Lovely weather.",
    )
    scores = bm25_scores([u[0].body for u in archive], "Why did Maya start running?", 1.5, 0.75)
    tags = ["2026-01-05", "2026-01-05", "2026-01-06", "2026-01-05"]
    smoothed = with_context(scores, tags, 0.2)
    assert smoothed[1] == pytest.approx(scores[1] + 0.2 * scores[0])  # the reply gains
    assert smoothed[2] == scores[2]  # another session: nothing from its neighbours
    assert with_context(scores, tags, 0.0) == scores


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("When did she go camping in June?", [DateMention(6)]),
        ("What did Gina find on 1 February, 2023?", [DateMention(2, 2023, 1)]),
        ("Who came to dinner on May 3, 2023?", [DateMention(5, 2023, 3)]),
        ("What happened in May?", [DateMention(5)]),
        ("The notes of 2023-05-08 and Dec 2023", [DateMention(5, 2023, 8), DateMention(12, 2023)]),
        ("May I ask what you did?", []),
        ("We will march together.", []),
        ("Jan went home.", []),
        ("What happened in 2023?", []),
    ],
)
def test_dates_named_by_month(text: str, expected: list[DateMention]) -> None:
    assert date_mentions(text) == expected


def test_date_match_by_month_year_and_day() -> None:
    june = [DateMention(6)]
    assert date_match("2023-06-27T10:37", june) == 1.0
    assert date_match("2023-07-01T10:37", june) == 0.0
    assert date_match("2023-06-27", [DateMention(6, 2024)]) == 0.0
    assert date_match("2023-05-04T09:00", [DateMention(5, 2023, 3)]) == pytest.approx(1 - 1 / 14)
    assert date_match("2023-05-30", [DateMention(5, 2023, 3)]) == 0.0
    assert date_match("not a date", june) == 0.0
    assert date_match("2023-06-27", []) == 0.0


def test_a_turn_of_the_named_month_outranks_an_equal_turn_of_another() -> None:
    archive = units(
        "[2023-06-27T10:37] Maya: We went camping by the lake.",
        "[2023-08-14T09:00] Maya: We went camping by the lake.",
    )
    query = "Where did Maya go camping in June?"
    assert order(OFF, archive, query)[0] == 1  # a tie: the newer first
    assert order(RetrievalSettings(date_weight=0.2), archive, query)[0] == 0


def test_each_history_is_indexed_once_and_a_cold_index_scores_the_same() -> None:
    documents = ["The garden shed moved.", "Trains and rain.", "Moving the shed again!"]
    assert lexical_index(documents, 1.5, 0.75) is lexical_index(list(documents), 1.5, 0.75)
    assert lexical_index(documents, 1.5, 0.75) is not lexical_index(documents, 1.2, 0.75)
    warm = bm25_scores(documents, "Where did the shed move?", 1.5, 0.75, 10, 0.3)
    lexical_module._INDEX_CACHE.clear()
    lexical_module._TOKEN_CACHE.clear()
    assert bm25_scores(documents, "Where did the shed move?", 1.5, 0.75, 10, 0.3) == warm


def test_the_rankers_are_settings() -> None:
    settings = RetrievalSettings()
    assert settings.context_weight > 0 and settings.speaker_weight > 0 and settings.date_weight > 0
    for field in ("context_weight", "speaker_weight", "date_weight"):
        with pytest.raises(pydantic.ValidationError):
            RetrievalSettings.model_validate({field: -0.1})
