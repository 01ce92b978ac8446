"""The archive navigator, the navigated policy's default prefetch: which records it opens for
a repeated question, in which order, what it never does, and that every open is charged."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from picocontext import (
    ContextSession,
    ModelResponse,
    Record,
    Role,
    RunBudget,
    Scope,
    Snapshot,
    ToolCall,
)
from picocontext.manifest.text import terms
from picocontext.models import ByteCounter, ScriptedBackend
from picocontext.policies import NavigatedPolicy
from picocontext.policies.archive_nav import (
    MATCH_SHARE,
    REPEAT_SIMILARITY,
    ArchiveNavigator,
    same_words,
)
from picocontext.policies.archive_view import asked_before, replies
from picocontext.policies.navigated import ARCHIVE_NAVIGATOR, NavigatedConfig, NavPlan

SCOPE = Scope(user_id="u", conversation_id="keys", branch_id="main")
ASK = "Report every stored key with its current value as one JSON object."
BUDGET = RunBudget(
    context_window=16_384,
    total_tokens=200_000,
    edit_output_tokens=256,
    completion_output_tokens=256,
)
# Tails so short that the earlier replies are archived.
NARROW = {"tail_share": 0.05, "nav_share": 0.6}


def index_text(plan: NavPlan) -> str:
    """The archive index record's text (the plan must have an archive)."""
    assert plan.index is not None
    return plan.index.body


def value(t: int) -> str:
    return f"value-{t * 7919 % 1000:03d}"


def keys_conversation(turns: int = 6, question: str = ASK) -> Snapshot:
    """Each turn stores a key (with log noise), asks for every key and gets them all back."""
    records = [
        Record(id="rules", role=Role.SYSTEM, body="Keep keys exact."),
        Record(id="task", role=Role.USER, protected=True, body="Store keys; report on request."),
    ]
    state: dict[str, str] = {}
    for t in range(1, turns + 1):
        state[f"key{t}"] = value(t)
        noise = "\n".join(f"log {t}.{i}: heartbeat ok" for i in range(20))
        records += [
            Record(id=f"note-{t}", role=Role.USER, body=f"Store key{t} = {value(t)}.\n{noise}"),
            Record(id=f"ask-{t}", role=Role.USER, body=ASK),
            Record(id=f"reply-{t}", role=Role.ASSISTANT, body=json.dumps(state)),
        ]
    records.append(Record(id="question", role=Role.USER, body=question))
    return Snapshot(scope=SCOPE, records=tuple(records))


def plan_for(snapshot: Snapshot, **config: object) -> NavPlan:
    backend = ScriptedBackend(lambda prompt, cap: ModelResponse(text="{}", generated_tokens=1))
    session = ContextSession(snapshot, ByteCounter(), backend)
    policy = NavigatedPolicy(NavigatedConfig.model_validate({**NARROW, **config}))
    return policy.plan(session.counter, session.state, BUDGET)


def opened(plan: NavPlan) -> list[str]:
    return [json.loads(s.arguments)["id"] for s in plan.loop.prefetched if s.name == "open"]


# -- pieces ------------------------------------------------------------------------------------


WORDS = st.lists(st.sampled_from(["key", "value", "note", "cell0", "report", "store"]))


@given(WORDS, WORDS)
def test_same_words_is_bounded_and_one_for_the_same_words(a: list[str], b: list[str]) -> None:
    assert 0.0 <= same_words(a, b) <= 1.0
    if not a or not b:
        assert same_words(a, b) == 0.0
    if a:
        assert same_words(a, a) == 1.0
        assert same_words(a, [*a, *b]) == 1.0  # a longer question over the record's stretch


def test_an_asking_is_a_near_duplicate_and_a_statement_of_the_same_words_is_not() -> None:
    question = terms("What value did I store for key4?")
    assert same_words(terms("What value did I store for key4?"), question) == 1.0
    assert same_words(terms("Store key4 = value-676."), question) < REPEAT_SIMILARITY
    long_ask = terms(
        'Report the full current notebook in exactly this JSON shape: {"cell0": "<value>", '
        '"cell1": "<value>"}. No other text.'
    )
    kept = long_ask[:8]  # a descriptor keeps only the start of a long asking
    assert same_words(kept, long_ask) == 1.0


def test_replies_map_each_request_to_the_first_plain_assistant_answer() -> None:
    call = Record(
        id="fetch",
        role=Role.ASSISTANT,
        body="Looking.",
        tool_calls=(ToolCall(id="c1", name="look", arguments="{}"),),
    )
    history = [
        Record(id="q1", role=Role.USER, body="first"),
        call,
        Record(id="c1-result", role=Role.TOOL, tool_call_id="c1", body="found"),
        Record(id="a1", role=Role.ASSISTANT, body="answer one"),
        Record(id="a1b", role=Role.ASSISTANT, body="a second reply is not the answer"),
        Record(id="q2", role=Role.USER, body="never answered"),
        Record(id="q3", role=Role.USER, body="third"),
        Record(id="blank", role=Role.ASSISTANT, body="  "),
        Record(id="a3", role=Role.ASSISTANT, body="answer three"),
    ]
    assert replies(history) == {"q1": "a1", "q3": "a3"}


def test_the_question_itself_is_not_an_earlier_asking() -> None:
    view = keys_conversation(2)
    asked = asked_before(view)
    assert "question" not in asked and asked["ask-2"] == ASK and "rules" not in asked


def test_the_archive_navigator_is_the_default_prefetch() -> None:
    assert NavigatedConfig().navigator == ARCHIVE_NAVIGATOR == "archive"
    assert NavigatedConfig(navigator="subtree-scan").navigator == "subtree-scan"


# -- what it opens -----------------------------------------------------------------------------


def with_late_note(snapshot: Snapshot) -> Snapshot:
    """A note stored after the last reply, before the question: what changed since."""
    noise = "\n".join(f"log late.{i}: heartbeat ok" for i in range(20))
    late = Record(id="note-late", role=Role.USER, body=f"Store key9 = value-late.\n{noise}")
    return snapshot.model_copy(
        update={"records": (*snapshot.records[:-1], late, snapshot.records[-1])}
    )


def test_a_repeated_question_opens_the_newest_reply_then_what_came_after_never_an_asking() -> None:
    plan = plan_for(with_late_note(keys_conversation()), tail_share=0.01)
    assert {"reply-6", "note-late"} <= set(plan.info.archived_ids)
    leaves = [i for i in opened(plan) if i.startswith(("reply-", "note-", "ask-"))]
    assert leaves[:2] == ["reply-6", "note-late"]
    assert not any(i.startswith("ask-") for i in leaves)  # an asking holds no answer
    # an older reply is superseded by the newer one and never opened
    assert not any(i.startswith("reply-") for i in leaves[1:])
    body = index_text(plan)
    assert "--- reply-6 (full) ---" in body and "--- note-late (full) ---" in body


def test_a_reply_the_model_already_sees_makes_every_newer_record_come_first() -> None:
    """The newest asking was answered in the recent tail: the navigator opens no reply, and
    the notes newer than that asking (none here) would come before older ones."""
    snapshot = keys_conversation()
    navigator = ArchiveNavigator(
        {r.id: i for i, r in enumerate(snapshot.records, start=1)},
        replies(snapshot.records),
        asked_before(snapshot),
    )
    plan = plan_for(snapshot)
    assert plan.info.manifest is not None
    navigator.prepare(plan.info.manifest)
    reply, targets = navigator.targets(ASK)
    assert navigator.repeats(ASK)[0] == "ask-6"  # shown in view, newest
    assert reply is None if "reply-6" not in plan.info.archived_ids else reply == "reply-6"
    notes = [t for t in targets if t.startswith("note-")]
    numbers = [int(t.split("-")[1].split("~")[0]) for t in notes]
    assert numbers  # older matches are still read while the budget lasts...
    assert not any(t.startswith(("ask-", "reply-")) for t in targets if t != reply)


def test_without_an_earlier_asking_it_opens_the_best_matches_like_the_subtree_index() -> None:
    plan = plan_for(keys_conversation(question="What value did I store for key4?"))
    ids = opened(plan)
    assert ids and "note-4" in ids  # the record that stored key4
    assert not any(i.startswith("ask-") for i in ids)


def test_a_record_sharing_only_a_common_word_is_not_opened() -> None:
    snapshot = keys_conversation()
    plan = plan_for(snapshot)
    assert plan.info.manifest is not None
    navigator = ArchiveNavigator({r.id: i for i, r in enumerate(snapshot.records)}, {}, {})
    navigator.prepare(plan.info.manifest)
    _, targets = navigator.targets("heartbeat key4 value")
    scores = navigator.index.scores("heartbeat key4 value")
    best = max(scores[t] for t in targets)
    assert all(scores[t] >= MATCH_SHARE * best for t in targets)
    assert len(targets) < len([i for i in plan.info.manifest.leaf_ids if scores.get(i, 0) > 0])


# -- verbs and charges -------------------------------------------------------------------------


def test_it_only_opens_walks_down_to_each_target_and_every_open_is_charged() -> None:
    plan = plan_for(keys_conversation())
    alone = plan_for(keys_conversation(), navigator=None)
    steps = plan.loop.prefetched
    assert steps and {s.name for s in steps} == {"open"}  # never a close: reads are kept
    manifest = plan.info.manifest
    assert manifest is not None
    seen: set[str] = set(manifest.children_of(manifest.root_id))
    for node in opened(plan):
        assert node in seen  # each open names a node the previous opens made visible
        seen.update(manifest.children_of(node))
    assert plan.nav is not None and alone.nav is not None
    assert plan.info.spent == plan.nav.spent > alone.nav.spent
    assert plan.nav.spent <= plan.info.nav_budget
    body = index_text(plan)
    assert all(s.result in body for s in steps)  # what it showed is what the model reads


def test_it_skips_a_target_that_does_not_fit_and_stops_when_none_does() -> None:
    plan = plan_for(keys_conversation(), navigator=None)  # a fresh runtime to drive by hand
    assert plan.nav is not None and plan.info.manifest is not None
    snapshot = keys_conversation()
    navigator = ArchiveNavigator(
        {r.id: i for i, r in enumerate(snapshot.records, start=1)},
        replies(snapshot.records),
        asked_before(snapshot),
    )
    navigator.prepare(plan.info.manifest)
    frontier = plan.nav.runtime.peek()
    assert navigator.decide(ASK, frontier, 0).verb == "stop"
    roomy = navigator.decide(ASK, frontier, plan.nav.budget_remaining)
    assert roomy.verb == "open"
    first = next(e for e in frontier if e.node_id == roomy.ids[0])
    # just too little for the first walk (its step plus its target's declared size)
    _, targets = navigator.targets(ASK)
    need = first.expand_cost + (plan.info.manifest.get(targets[0]).tokens or 0)
    tight = navigator.decide(ASK, frontier, need - 1)
    assert tight != roomy  # another, cheaper walk, or a stop
    if tight.verb == "open":
        other = next(e for e in frontier if e.node_id == tight.ids[0])
        assert other.expand_cost <= need - 1


def test_the_run_report_keeps_the_prefetch_apart_from_the_models_calls() -> None:
    backend = ScriptedBackend(lambda prompt, cap: ModelResponse(text="{}", generated_tokens=1))
    session = ContextSession(keys_conversation(), ByteCounter(), backend)
    report = NavigatedPolicy(NavigatedConfig.model_validate(NARROW)).turn(session, BUDGET)
    assert report.prefetch_steps and not report.tool_steps
    assert all(s.model_text.startswith("archive: ") for s in report.prefetch_steps)
