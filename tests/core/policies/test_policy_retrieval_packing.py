"""Budget-filling retrieval: hits are packed by score until the prompt room is full (``top_k``
only caps them), a hit's neighbours come along where room allows, and the model reads the
packed turns in history order with the dates their bodies carry."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import picocontext.policies.lexical as lexical_module
from picocontext import ContextSession, Record, Role, RunBudget, Scope, Snapshot
from picocontext.models import ByteCounter
from picocontext.policies import RetrievalPolicy, RetrievalSettings
from picocontext.policies.history import split_history
from picocontext.policies.lexical import bm25_scores, feedback_terms
from picocontext.policies.retrieval import BLOCK_ID, GAP, with_neighbours
from picocontext.policies.retrieval_signals import session_scores
from picocontext.policies.sliding_window import completion_tokens, latest_request, prompt_room
from picocontext_diagnostics.conversations.extractive_backend import (
    DeterministicConversationBackend,
)

SCOPE = Scope(user_id="u", conversation_id="c", branch_id="b")
FILLER = "We talked about the weather and the trains for a while."


def history(matches: int = 20, fillers: int = 40) -> Snapshot:
    """``matches`` dated turns about the garden, each followed by a reply sharing no word with
    the question, among filler turns; the question last."""
    records = [Record(id="task", role=Role.USER, body="Chat with me.", protected=True)]
    for i in range(fillers):
        records.append(
            Record(id=f"f{i}", role=Role.USER, body=f"[2026-01-{i % 28 + 1:02d}] {FILLER}")
        )
        if i < matches:
            records.append(
                Record(id=f"m{i}", role=Role.USER, body=f"[2026-02-01] The garden shed {i} is red.")
            )
            records.append(Record(id=f"r{i}", role=Role.ASSISTANT, body=f"Noted, number {i}."))
    records.append(
        Record(id="q", role=Role.USER, body="What colour is the garden shed?", protected=True)
    )
    return Snapshot(scope=SCOPE, records=tuple(records))


WORDS = st.sampled_from(["garden", "shed", "red", "train", "rain", "colour", "4471", "moved"])


@st.composite
def histories(draw: st.DrawFn) -> Snapshot:
    """Random plain turns (some protected) and the question last."""
    records = [Record(id="task", role=Role.USER, body="Chat.", protected=True)]
    for i in range(draw(st.integers(0, 30))):
        body = " ".join(draw(st.lists(WORDS, min_size=1, max_size=30)))
        role = draw(st.sampled_from([Role.USER, Role.ASSISTANT]))
        protected = draw(st.integers(0, 9)) == 0
        records.append(Record(id=f"m{i}", role=role, body=body, protected=protected))
    records.append(
        Record(id="q", role=Role.USER, body="What colour is the garden shed?", protected=True)
    )
    return Snapshot(scope=SCOPE, records=tuple(records))


def run(
    settings: RetrievalSettings, window: int, snapshot: Snapshot | None = None
) -> tuple[RetrievalPolicy, int, Snapshot]:
    budget = RunBudget(context_window=window, completion_output_tokens=200, edit_output_tokens=200)
    policy = RetrievalPolicy(settings)
    backend = DeterministicConversationBackend()
    session = ContextSession(snapshot or history(), ByteCounter(), backend)
    report = policy.turn(session, budget)
    assert report.failure is None, report.failure
    assert report.final_prompt is not None
    return policy, report.final_prompt.token_count, report.final_prompt.input.context


def test_hits_fill_the_window_instead_of_a_fixed_eight() -> None:
    policy, tokens, _ = run(RetrievalSettings(tail_share=0.0, neighbour_weight=0.0), 3_000)
    assert policy.last is not None
    hits = [i for i in policy.last.retrieved_ids if i.startswith("m")]
    assert len(hits) > 8
    # full: no further matching turn (about 50 bytes each) would still have fitted
    assert tokens <= 2_800 and (len(hits) == 20 or tokens > 2_800 - 60)


def test_top_k_caps_the_hits() -> None:
    policy, _, _ = run(RetrievalSettings(tail_share=0.0, neighbour_weight=0.0, top_k=3), 3_000)
    assert policy.last is not None
    assert len([i for i in policy.last.retrieved_ids if i.startswith("m")]) == 3


def test_a_hit_brings_its_neighbours_where_room_allows() -> None:
    policy, _, view = run(RetrievalSettings(tail_share=0.0, top_k=2), 3_000)
    assert policy.last is not None
    hits = [i for i in policy.last.retrieved_ids if i.startswith("m")]
    assert len(hits) == 2
    replies = {f"r{h[1:]}" for h in hits}
    assert replies <= set(policy.last.neighbour_ids) and replies <= set(policy.last.retrieved_ids)
    block = view.record(BLOCK_ID)
    assert block is not None and all(f"Noted, number {h[1:]}." in block.body for h in hits)
    off, _, _ = run(RetrievalSettings(tail_share=0.0, top_k=2, neighbour_weight=0.0), 3_000)
    assert off.last is not None and not off.last.neighbour_ids
    assert not any(i.startswith("r") for i in off.last.retrieved_ids)


def test_packed_turns_are_shown_in_history_order_with_their_dates() -> None:
    policy, _, view = run(RetrievalSettings(tail_share=0.0, shown_as="records"), 1_500)
    assert policy.last is not None
    order = list(history().ids)
    shown = [i for i in view.ids if i in policy.last.retrieved_ids]
    assert shown == sorted(shown, key=order.index)
    assert all(view.record(i).body.startswith("[2026-") for i in shown if i.startswith("m"))  # type: ignore[union-attr]


def test_neighbours_rank_below_their_hit_and_never_above_a_stronger_own_score() -> None:
    ranked = [(5, 4.0), (0, 3.0), (6, 1.0)]
    out = with_neighbours(ranked, 8, 0.5)
    scores = {i: (s, near) for i, s, near in out}
    assert scores[5] == (4.0, False) and scores[4] == (2.0, True)
    assert scores[6] == (2.0, True)  # its own 1.0 is lower than half of its neighbour's 4.0
    assert scores[1] == (1.5, True) and -1 not in scores
    assert [i for i, _, _ in out][:2] == [5, 0]
    assert with_neighbours(ranked, 8, 0.0) == [(5, 4.0, False), (0, 3.0, False), (6, 1.0, False)]


@settings(max_examples=150, deadline=None)
@given(histories(), st.integers(200, 3_000), st.sampled_from([0.0, 0.25]), st.booleans())
def test_packing_fills_the_room(
    snapshot: Snapshot, window: int, tail_share: float, neighbours: bool
) -> None:
    """Budget-filling: the prompt fits, and every ranked unit (or neighbour of one) left out
    would not have fitted beside what was packed."""
    budget = RunBudget(context_window=window, completion_output_tokens=64, edit_output_tokens=64)
    settings_ = RetrievalSettings(
        tail_share=tail_share, neighbour_weight=0.5 * neighbours, shown_as="records"
    )
    policy = RetrievalPolicy(settings_)
    counter = ByteCounter()
    choice = policy.select(snapshot, counter, budget)
    measure = completion_tokens(counter)
    room = prompt_room(budget)
    base = split_history(snapshot, measure, int(tail_share * window))
    if measure(base.view) > room:
        assert not choice.retrieved_ids
        return
    assert measure(choice.view) <= room
    archive = list(base.archive)
    ranked = policy.rank(archive, latest_request(snapshot))
    shown = set(choice.view.ids)
    for index, _, _ in with_neighbours(ranked, len(archive), settings_.neighbour_weight):
        unit = archive[index]
        if unit[0].id in shown:
            continue
        trial = tuple(r for r in snapshot.records if r.id in shown or r in unit)
        assert measure(Snapshot(scope=snapshot.scope, records=trial)) > room


def dated(*sessions: tuple[str, list[str]]) -> Snapshot:
    """One record per text, dated by its session, alternating speakers; the question last."""
    records = [Record(id="task", role=Role.USER, body="Chat with me.", protected=True)]
    for date, texts in sessions:
        for text in texts:
            n = len(records)
            who = "Ann" if n % 2 else "Bo"
            role = Role.USER if n % 2 else Role.ASSISTANT
            records.append(Record(id=f"t{n}", role=role, body=f"[{date}] {who}: {text}"))
    records.append(
        Record(id="q", role=Role.USER, body="What colour is the garden shed?", protected=True)
    )
    return Snapshot(scope=SCOPE, records=tuple(records))


FILL = ["We talked about the trains.", "The weather was fine.", "Lunch was late."]


def test_the_block_writes_a_session_date_once_and_marks_gaps() -> None:
    snapshot = dated(
        ("2026-01-05", ["The garden shed is red.", *FILL, "The garden shed door is green."]),
        ("2026-02-07", [*FILL, "I painted the garden shed blue.", "Bye.", "See you."]),
    )
    hits_only = RetrievalSettings(
        tail_share=0.0, neighbour_weight=0.0, session_weight=0.0, expand=0
    )
    policy, _, view = run(hits_only, 3_000, snapshot)
    assert policy.last is not None and policy.last.block is not None
    body = policy.last.block.body
    lines = body.split("\n")
    assert lines.count("[2026-01-05]") == 1 and lines.count("[2026-02-07]") == 1
    assert "Ann: The garden shed is red." in lines and "2026-01-05] Ann" not in body
    # the two hits of the first session were not next to each other, the third is elsewhere
    assert lines.count(GAP) == 2
    assert body.index("shed is red") < body.index("door is green") < body.index("blue")
    # where the archive ends: after the protected task, before the pinned latest request
    ids = [r.id for r in view.records]
    assert ids[:2] == ["task", BLOCK_ID] and ids[-1] == "q" and len(ids) > 3


def test_the_block_fits_more_turns_than_one_record_per_turn() -> None:
    block, _, _ = run(RetrievalSettings(tail_share=0.0), 1_500)
    records, _, _ = run(RetrievalSettings(tail_share=0.0, shown_as="records"), 1_500)
    assert block.last is not None and records.last is not None
    assert len(block.last.retrieved_ids) > len(records.last.retrieved_ids)


def test_the_block_never_takes_an_id_of_the_history() -> None:
    base = history()
    taken = Record(id=BLOCK_ID, role=Role.USER, body="[2026-01-01] An old turn.")
    snapshot = base.model_copy(update={"records": (base.records[0], taken, *base.records[1:])})
    policy, _, view = run(RetrievalSettings(tail_share=0.0), 1_500, snapshot)
    assert policy.last is not None and policy.last.block is not None
    assert policy.last.block.id == f"{BLOCK_ID}-1" and view.record(BLOCK_ID) is None


def test_a_turn_of_the_session_the_question_is_about_ranks_first() -> None:
    """Same own score; its session shares more of the question's words."""
    snapshot = dated(
        ("2026-01-05", ["The shed.", "We talked about the trains."]),
        ("2026-02-07", ["The shed.", "The garden was lovely and the colour too."]),
    )
    archive = [(r,) for r in snapshot.records[1:-1]]
    boost = session_scores(archive, "What colour is the garden shed?", 1.5, 0.75)
    assert boost[2] == boost[3] == 1.0 and boost[0] == boost[1] < 1.0
    policy = RetrievalPolicy(RetrievalSettings(session_weight=0.3))
    ranked = policy.rank(archive, "What colour is the garden shed?")
    assert ranked[0][0] == 3 and [i for i, _ in ranked].index(2) < [i for i, _ in ranked].index(0)
    untagged = [(Record(id=f"u{i}", role=Role.USER, body="The shed."),) for i in range(3)]
    assert session_scores(untagged, "shed", 1.5, 0.75) == [0.0, 0.0, 0.0]


def test_feedback_terms_come_from_the_best_documents_and_skip_the_query() -> None:
    tokens = [["shed", "red", "paint"], ["shed", "paint", "brush"], *[["rain"]] * 6]
    scores = [2.0, 1.0, *[0.0] * 6]
    terms = feedback_terms(tokens, scores, {"shed"}, 2)
    assert "shed" not in terms and set(terms) <= {"red", "paint", "brush"}
    assert terms[0] == "paint"  # in both best documents
    assert feedback_terms(tokens, [0.0] * 8, set(), 3) == []


def test_scores_are_the_same_from_a_cold_and_a_warm_token_cache() -> None:
    """Tokens are memoized per text; a cleared cache must not change a score."""
    documents = ["The garden shed moved.", "Trains and rain.", "", "Moving the shed again!"]
    warm = bm25_scores(documents, "Where did the shed move?", 1.5, 0.75, 10, 0.3)
    lexical_module._TOKEN_CACHE.clear()
    cold = bm25_scores(documents, "Where did the shed move?", 1.5, 0.75, 10, 0.3)
    assert warm == cold and warm[0] > 0 and warm[1] == 0.0


def test_a_record_without_a_speaker_keeps_every_line_whole_in_the_block() -> None:
    """Its role goes on a line of its own, so a reader that looks for whole lines (``FACT
    k=v``) finds them in the block as in the record."""
    records = [Record(id="task", role=Role.USER, body="Track the facts.", protected=True)]
    for i in range(6):
        records.append(
            Record(id=f"n{i}", role=Role.ASSISTANT, body=f"FACT shed{i}=red\nFACT door{i}=green")
        )
        records.append(Record(id=f"f{i}", role=Role.USER, body=FILLER))
    records.append(Record(id="q", role=Role.USER, body="What colour is shed2?", protected=True))
    policy, _, _ = run(
        RetrievalSettings(tail_share=0.0), 1_500, Snapshot(scope=SCOPE, records=tuple(records))
    )
    assert policy.last is not None and policy.last.block is not None
    lines = policy.last.block.body.split("\n")
    assert "FACT shed2=red" in lines and "FACT door2=green" in lines
    assert lines[lines.index("FACT shed2=red") - 1] == "assistant:"
