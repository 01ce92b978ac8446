"""Shortening (``shorten_over``): a long record is asked once which kinds of its lines to keep,
and replaced by those lines in one validated edit; a reply that is not offered kinds is never
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
    BARE_LIST_KEY,
    MAX_SHORTEN_KINDS,
    MAX_SHORTEN_PER_STEP,
    SHORTEN_ALL,
    ChoiceRules,
    Unit,
    body_lines,
    line_kinds,
    line_shape,
    read_kinds,
    replacement_edit,
    shorten_candidates,
    shortened_body,
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


def keep_first_kind(prompt: PreparedPrompt) -> ModelResponse:
    """Keep the first offered kind of whichever record is asked about."""
    schema = prompt.input.answer_schema
    assert schema is not None and schema[BARE_LIST_KEY] == ", "
    return ModelResponse(text=schema["anyOf"][1]["items"]["enum"][0], generated_tokens=1)


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
            text="A" if "new-result" in (p.input.guidance or "") else SHORTEN_ALL,
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
    assert "keeps kinds A: 1 of 25 lines" in shortened["new-result"].detail
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


def test_the_question_lists_the_kinds_of_line_and_the_schema_their_letters() -> None:
    backend = shortener(SHORTEN_ALL)
    run(ContextSession(kettle_snapshot(), ByteCounter(), backend), backend)
    prompt = next(p for p in backend.prompts if p.input.answer_schema)
    schema = prompt.input.answer_schema
    assert schema is not None
    assert schema["anyOf"][0]["enum"] == [SHORTEN_ALL]
    assert schema["anyOf"][1]["items"]["enum"] == ["A", "B"]
    guidance = prompt.input.guidance or ""
    assert guidance.splitlines()[:3] == [
        "Record warranty-result has 25 lines of 2 kinds:",
        "A. 1 line: Corvid kettle warranty: 18 months, heating plate included.",
        "B. 24 lines like: Sweep 0: carton sealed; label reread; nothing changed.",
    ]


@pytest.mark.parametrize(
    ("response", "detail"),
    [
        (ModelResponse(text="A, Q", generated_tokens=3), "'Q' is not an offered kind"),
        (ModelResponse(text="A, B, A", generated_tokens=16, reached_token_limit=True), "limit"),
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
    for reply in (SHORTEN_ALL, "B"):
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
    backend = shortener(keep_first_kind)
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
    long = "FACT a=1\n" + "\n".join(f"line {n}: reading {n * 7}" for n in range(12))
    records = [Record(id="task", role=Role.USER, protected=True, body="Track the readings.")]
    records += [Record(id=f"r{i}", role=Role.USER, body=long) for i in range(6)]
    records.append(Record(id="ask", role=Role.USER, body="Report."))
    snapshot = Snapshot(scope=SCOPE, records=tuple(records))
    found = shorten_candidates(snapshot, (), 50)
    assert len(found) == MAX_SHORTEN_PER_STEP
    assert [c.record.id for c in found] == ["r5", "r4", "r3", "r2"]
    assert found[0].lines == tuple(body_lines(long))
    assert found[0].kinds == tuple(line_kinds(body_lines(long)))
    assert [c.record.id for c in shorten_candidates(snapshot, {"r5", "r3"}, 50)] == [
        "r4",
        "r2",
        "r1",
        "r0",
    ]
    # Short records, records of one kind and records of too many kinds are not offered.
    assert shorten_candidates(snapshot, (), len(long)) == []
    alike = "\n".join(f"line {n}: reading {n * 7}" for n in range(40))
    varied = "\n".join(f"{word} {n}" for n, word in enumerate("abcdefghijklmnopq"))
    for body in (alike, varied):
        record = Record(id="r", role=Role.USER, body=body)
        alone = Snapshot(scope=SCOPE, records=(record, Record(id="q", role=Role.USER, body="?")))
        assert shorten_candidates(alone, (), 10) == []
    assert len({line_shape(line) for line in body_lines(varied)}) > MAX_SHORTEN_KINDS


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
KINDS = line_kinds(LINES)


def test_lines_alike_but_for_their_values_are_one_kind() -> None:
    assert [(k.letter, k.shape, k.lines) for k in KINDS] == [
        ("A", "FACT #", (0, 4, 8)),
        ("B", "Sweep # idle", (1, 2, 3, 5, 6, 7, 9, 10, 11)),
    ]
    assert shortened_body(LINES, KINDS, ("A",)) == "FACT k0=v0\nFACT k4=v4\nFACT k8=v8"


@given(st.lists(st.sampled_from("AB"), min_size=1, max_size=4), st.sampled_from([", ", " ", "\n"]))
def test_any_offered_letters_read_back_in_kind_order(picked: list[str], separator: str) -> None:
    for text in (separator.join(picked), json.dumps(picked), separator.join(picked).lower()):
        reading = read_kinds(text, KINDS)
        assert reading.valid and reading.kept == tuple(sorted(set(picked)))


@given(st.text(min_size=1, max_size=12).filter(lambda t: t.strip(" ,;\t\r\n")))
def test_a_reply_with_any_word_that_is_no_offered_kind_is_invalid(extra: str) -> None:
    edge = "\"'`*.,;:!()[]{}<> \t\r\n"
    # Words of punctuation alone are not read as words (the reader strips quotes and marks).
    words = [w for w in extra.replace(",", " ").replace(";", " ").split() if w.strip(edge)]
    if all(w.strip(edge).upper() in {"A", "B"} for w in words) or (
        extra.strip().strip(edge).casefold() == SHORTEN_ALL
    ):
        return
    reading = read_kinds(f"A, {extra}", KINDS)
    assert not reading.valid and reading.kept is None


def test_the_policy_config_carries_shorten_over() -> None:
    spec = policy_registry().get("editable")
    assert spec.parse_config({}).choice_rules().shorten_over is None
    assert spec.parse_config({"shorten_over": 400}).choice_rules().shorten_over == 400
    with pytest.raises(PolicyError):
        spec.parse_config({"shorten_over": 0})
