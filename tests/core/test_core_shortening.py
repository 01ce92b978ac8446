"""Shortening (``shorten_over``): a long record is asked once which of its lines to keep, and
replaced by them in one validated edit; a reply that is not the record's own lines is never
applied, and the request being answered is never offered."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kettle import NOISE, SCOPE, TEST_BUDGET, kettle_snapshot
from picocontext import (
    AppendTransaction,
    ContextSession,
    EditStyle,
    ModelResponse,
    ModelToolCall,
    Outcome,
    Phase,
    PreparedPrompt,
    Record,
    Role,
    RunMode,
    RunReport,
    Snapshot,
)
from picocontext.choices import (
    BARE_LINES_KEY,
    MAX_SHORTEN_PER_STEP,
    SHORTEN_ALL,
    ChoiceRules,
    Unit,
    read_lines,
    record_lines,
    replacement_edit,
    shorten_candidates,
)
from picocontext.models import ByteCounter, ScriptedBackend
from picocontext.policies import policy_registry
from picocontext.policies.registry import PolicyError

# Only shortening is asked: the staleness choice is the runtime's overlap pick, which never
# fires without a threshold.
SHORTEN = ChoiceRules(ask=False, shorten_over=200)
KEPT_LINE = "TODAY: Corvid kettle SKU CK-88, price EUR 54.90, stock 9."

Reply = Callable[[PreparedPrompt], ModelResponse]


def shortener(reply: Reply | str) -> ScriptedBackend:
    """Shortening prompts get ``reply``; completion prompts a fixed answer."""

    def respond(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        if prompt.input.phase is Phase.COMPLETION:
            return ModelResponse(text="answered", generated_tokens=1)
        assert prompt.input.phase is Phase.CHOICE
        if callable(reply):
            return reply(prompt)
        return ModelResponse(text=reply, generated_tokens=4)

    return ScriptedBackend(respond)


def keep_first_line(prompt: PreparedPrompt) -> ModelResponse:
    """Keep the first offered line of whichever record is asked about."""
    schema = prompt.input.answer_schema
    assert schema is not None and schema[BARE_LINES_KEY] is True
    lines = schema["anyOf"][1]["items"]["enum"]
    return ModelResponse(text=lines[0], generated_tokens=6)


def run(
    session: ContextSession, backend: ScriptedBackend, rules: ChoiceRules = SHORTEN
) -> RunReport:
    return session.run(RunMode.EDITABLE, TEST_BUDGET, EditStyle.INCREMENTAL, choice_rules=rules)


def asked_about(backend: ScriptedBackend) -> list[str]:
    """The record each shortening question named, in order."""
    return [
        p.input.guidance.split()[1]
        for p in backend.prompts
        if p.input.phase is Phase.CHOICE and p.input.guidance
    ]


def test_a_long_result_is_replaced_by_the_lines_kept_in_one_validated_edit() -> None:
    backend = shortener(
        lambda p: ModelResponse(
            text=KEPT_LINE if "new-result" in (p.input.guidance or "") else SHORTEN_ALL,
            generated_tokens=6,
        )
    )
    session = ContextSession(kettle_snapshot(), ByteCounter(), backend)
    report = run(session, backend)
    assert report.failure is None, report.failure
    # Newest first; the protected task is never offered.
    assert asked_about(backend) == ["warranty-result", "new-result", "old-result"]
    shortened = {c.records[0]: c for c in report.choices}
    assert all(c.shorten and c.valid for c in shortened.values())
    assert "keeps 1 of 25 lines" in shortened["new-result"].detail
    assert shortened["old-result"].detail == "keeps every line"
    assert [a.outcome for a in report.attempts] == [Outcome.EDITED]
    assert json.loads(report.attempts[0].arguments)["operations"] == [
        {"action": "replace", "recordID": "new-result", "body": KEPT_LINE}
    ]
    # The working history holds the kept line; the transcript keeps every line; role and
    # tool link are the record's own.
    record = session.context.record("new-result")
    assert record is not None and record.body == KEPT_LINE
    assert record.role is Role.TOOL and record.tool_call_id == "s-new"
    original = session.original_context.record("new-result")
    assert original is not None and NOISE in original.body
    # Each question trails the shared prefix: the history as it was, unedited.
    choice_calls = [p for p in backend.prompts if p.input.phase is Phase.CHOICE]
    assert {p.input.context for p in choice_calls} == {session.original_context}
    assert report.edit_window_saved_tokens > 0


def test_the_schema_offers_the_records_distinct_lines_and_all() -> None:
    backend = shortener(SHORTEN_ALL)
    run(ContextSession(kettle_snapshot(), ByteCounter(), backend), backend)
    schema = next(p.input.answer_schema for p in backend.prompts if p.input.answer_schema)
    assert schema is not None
    assert schema["anyOf"][0]["enum"] == [SHORTEN_ALL]
    record = kettle_snapshot().record("warranty-result")
    assert record is not None
    assert schema["anyOf"][1]["items"]["enum"] == record_lines(record.body)


@pytest.mark.parametrize(
    ("response", "detail"),
    [
        (ModelResponse(text="price EUR 54.90", generated_tokens=5), "not a line of the record"),
        (
            ModelResponse(text=KEPT_LINE, generated_tokens=96, reached_token_limit=True),
            "output limit",
        ),
        (
            ModelResponse(
                text="", tool_calls=(ModelToolCall(name="keep_context", arguments="{}"),)
            ),
            "not a tool call",
        ),
    ],
)
def test_a_reply_that_is_not_the_records_own_lines_is_never_applied(
    response: ModelResponse, detail: str
) -> None:
    backend = shortener(lambda p: response)
    session = ContextSession(kettle_snapshot(), ByteCounter(), backend)
    report = run(session, backend)
    assert report.choices and all(not c.valid and detail in c.detail for c in report.choices)
    assert [a.outcome for a in report.attempts] == [Outcome.KEPT]
    assert session.context == session.original_context


def test_all_or_too_little_left_out_keeps_the_record() -> None:
    record = kettle_snapshot().record("new-result")
    assert record is not None
    most = "\n".join(record_lines(record.body)[:-1])
    for reply in (SHORTEN_ALL, most):
        backend = shortener(reply)
        session = ContextSession(kettle_snapshot(), ByteCounter(), backend)
        report = run(session, backend)
        assert [a.outcome for a in report.attempts] == [Outcome.KEPT]
        assert session.context == session.original_context
    choice = next(c for c in report.choices if c.records == ("new-result",))
    assert choice.valid and "too little left out" in choice.detail


def test_each_record_is_asked_once_across_steps_and_the_request_never() -> None:
    request = Record(id="request", role=Role.USER, body="Which kettle?\n" + NOISE)
    snapshot = Snapshot(scope=SCOPE, records=(*kettle_snapshot().records, request))
    backend = shortener(keep_first_line)
    session = ContextSession(snapshot, ByteCounter(), backend)
    run(session, backend)
    assert "request" not in asked_about(backend)
    first = len(asked_about(backend))
    assert first == 3
    later = Record(id="later", role=Role.USER, body="And the colour?")
    session.append(
        AppendTransaction(scope=SCOPE, base_revision=session.context.revision, records=(later,))
    )
    run(session, backend)
    # The long request is no longer the one being answered, so it is offered now; the
    # records asked before are not asked again.
    assert asked_about(backend)[first:] == ["request"]


def test_a_step_asks_about_the_newest_few_records_only() -> None:
    long = "\n".join(f"line {n}: reading {n * 7}" for n in range(12))
    records = [Record(id="task", role=Role.USER, protected=True, body="Track the readings.")]
    records += [Record(id=f"r{i}", role=Role.USER, body=long) for i in range(6)]
    records.append(Record(id="ask", role=Role.USER, body="Report."))
    snapshot = Snapshot(scope=SCOPE, records=tuple(records))
    found = shorten_candidates(snapshot, (), 50)
    assert len(found) == MAX_SHORTEN_PER_STEP
    assert [r.id for r in found] == ["r5", "r4", "r3", "r2"]
    assert [r.id for r in shorten_candidates(snapshot, {"r5", "r3"}, 50)] == [
        "r4",
        "r2",
        "r1",
        "r0",
    ]
    # Short records and records of fewer than three distinct lines are not offered.
    assert shorten_candidates(snapshot, (), len(long)) == []
    twice = Record(id="twice", role=Role.USER, body="same line\nsame line\nsame line\n" * 20)
    alone = Snapshot(scope=SCOPE, records=(twice, Record(id="q", role=Role.USER, body="?")))
    assert shorten_candidates(alone, (), 10) == []


def test_a_deleted_record_is_only_deleted_even_when_shortened() -> None:
    snapshot = kettle_snapshot()
    group = Unit(ids=("old-call", "old-result"), editable=True)
    edit = replacement_edit(snapshot, [group], {"old-result": "x", "new-result": "y"})
    assert edit is not None
    assert [(o.action, o.record_id) for o in edit.operations] == [
        ("delete", "old-call"),
        ("delete", "old-result"),
        ("replace", "new-result"),
    ]
    assert replacement_edit(snapshot, [], {}) is None


LINES = [f"FACT k{n}=v{n}" if n % 4 == 0 else f"Sweep {n}: idle" for n in range(12)]


@given(st.lists(st.sampled_from(range(len(LINES))), min_size=1, max_size=20), st.booleans())
def test_any_kept_lines_read_back_in_record_order(picked: list[int], as_json: bool) -> None:
    written = [LINES[i] for i in picked]
    text = json.dumps(written) if as_json else "\n".join(f"  {w} " for w in written)
    reading = read_lines(text, LINES)
    assert reading.valid and reading.kept == tuple(sorted(set(picked)))


@given(
    st.lists(st.sampled_from(LINES), max_size=5),
    st.text(min_size=1, max_size=20).filter(lambda t: t.strip() and "\n" not in t),
)
def test_a_reply_with_any_line_the_record_does_not_hold_is_invalid(
    good: list[str], extra: str
) -> None:
    if (
        extra.strip() in {line.strip() for line in LINES}
        or extra.strip().strip("\"'`*.,;:!()[]{}<> \t\r").casefold() == SHORTEN_ALL
    ):
        return
    reading = read_lines("\n".join([*good, extra]), LINES)
    assert not reading.valid and reading.kept is None


def test_the_policy_config_carries_shorten_over() -> None:
    spec = policy_registry().get("editable")
    assert spec.parse_config({}).choice_rules().shorten_over is None
    assert spec.parse_config({"shorten_over": 400}).choice_rules().shorten_over == 400
    with pytest.raises(PolicyError):
        spec.parse_config({"shorten_over": 0})
