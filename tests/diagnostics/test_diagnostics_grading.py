"""The strict graders: notebook fold, exact-value framing and the facts-answer parser."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext import Record, Role, Scope, Snapshot
from picocontext_diagnostics.episodes.grading import (
    ContextCheck,
    answer_matches,
    exact_values,
    explain_answer,
    notebook_state,
    parse_facts_answer,
    retained_facts,
    value_is_framed,
)
from picocontext_diagnostics.errors import AnswerFormatError

SCOPE = Scope(user_id="u", conversation_id="c", branch_id="b")


def records(*bodies: str) -> list[Record]:
    return [
        Record(id=f"r{i}", role=Role.USER, body=b, protected=True) for i, b in enumerate(bodies)
    ]


# -- the notebook fold (checklist 68) --------------------------------------------------------


def test_fold_applies_facts_and_removals_in_live_order_across_records() -> None:
    state = notebook_state(
        records("FACT shelf=B2\nFACT crates=9", "FACT crates=14\nREMOVE shelf", "FACT keeper=Ines")
    )
    assert state == {"crates": "14", "keeper": "Ines"}


def test_fold_splits_key_at_first_equals_and_keeps_value_verbatim() -> None:
    state = notebook_state(records("FACT a=x=y", "FACT b= spaced ", "FACT c=", "FACT d=1;2"))
    assert state == {"a": "x=y", "b": " spaced ", "c": "", "d": "1;2"}


def test_fold_takes_semicolon_joined_operations_as_one_value() -> None:
    # A model that joins operations on one line changes the notebook: strictly graded.
    assert notebook_state(records("FACT shelf=B2; FACT crates=9")) == {"shelf": "B2; FACT crates=9"}


def test_fold_ignores_lines_that_are_not_exact_operations() -> None:
    body = "\n".join(
        [
            "FACT =empty-key",
            "FACT no-equals",
            " FACT indented=1",
            "fact lower=1",
            "FACTS x=1",
            "Notes: FACT inline=1",
            "REMOVE",
        ]
    )
    assert notebook_state(records(body)) == {}


def test_fold_splits_on_line_feed_only() -> None:
    # A carriage return stays part of the value, so a CRLF body does not match exactly.
    assert notebook_state(records("FACT a=1\r\nFACT b=2")) == {"a": "1\r", "b": "2"}


def test_fold_removal_of_unknown_key_is_harmless_and_later_fact_resurrects() -> None:
    assert notebook_state(records("REMOVE ghost", "FACT k=1", "REMOVE k", "FACT k=2")) == {"k": "2"}


def test_fold_reads_every_role_including_snapshots() -> None:
    snap = Snapshot(
        scope=SCOPE,
        records=(
            Record(id="s", role=Role.SYSTEM, body="FACT sys=1"),
            Record(id="t", role=Role.USER, body="x", protected=True),
            Record(id="a", role=Role.ASSISTANT, body="FACT asst=2"),
        ),
    )
    assert notebook_state(snap) == {"sys": "1", "asst": "2"}


# -- exact-value framing (checklist 69) -------------------------------------------------------

VALUE = "receipt-4410"


@pytest.mark.parametrize(
    "body",
    [
        "receipt-4410.old",
        "receipt-4410@archive",
        "receipt-4410+1",
        "receipt-4410#copy",
        "receipt-4410=old",
        "receipt-4410\\old",
        "receipt-4410\u0301",
        "old.receipt-4410",
        "xreceipt-4410",
        "receipt-44100",
    ],
)
def test_framing_rejects_extended_identifiers(body: str) -> None:
    assert not value_is_framed(body, VALUE)
    assert exact_values(records(body), {"plover": VALUE}) == {}


@pytest.mark.parametrize(
    "body",
    [
        "receipt-4410",
        "FACT plover=receipt-4410",
        "Notes: FACT heron=KX-7302-B; FACT plover=receipt-4410",
        '{"facts":{"plover":"receipt-4410"}}',
        "(receipt-4410)",
        "[receipt-4410]",
        "{receipt-4410}",
        "'receipt-4410'",
        "`receipt-4410`",
        "a,receipt-4410,b",
        "x;receipt-4410;y",
        "tab\treceipt-4410\nnext",
    ],
)
def test_framing_accepts_whole_tokens_in_any_note_style(body: str) -> None:
    assert value_is_framed(body, VALUE)


def test_framing_finds_a_later_framed_occurrence_after_an_unframed_one() -> None:
    assert value_is_framed("receipt-4410x and receipt-4410", VALUE)


def test_framing_rejects_longer_values_sharing_a_prefix() -> None:
    assert not value_is_framed("KX-7302-BB", "KX-7302-B")
    assert not value_is_framed("R5:green/170", "R5:green/17")


def test_empty_expected_values_never_match() -> None:
    assert not value_is_framed("anything", "")
    assert exact_values(records("FACT k="), {"k": ""}) == {}


def test_retained_facts_uses_the_episode_check() -> None:
    context = records("FACT a=1", "value 2 here")
    expected = {"a": "1", "b": "2"}
    assert retained_facts(context, expected, ContextCheck.EXACT_VALUES) == expected
    assert retained_facts(context, expected, ContextCheck.NOTEBOOK_STATE) == {"a": "1"}


# -- the strict answer parser (checklist 71) --------------------------------------------------

EXPECTED = {"crates": "5", "keeper": "Tomas"}


def test_only_the_exact_state_passes() -> None:
    answers = [
        '{"facts":{"crates":"5","keeper":"Tomas"}}',
        '{"facts":{"crates":"5"}}',
        '{"facts":{"crates":"5","keeper":"Tomas","shelf":"B2"}}',
        '{"facts":{"crates":"14","keeper":"Tomas"}}',
        '{"facts":{"crates":5,"keeper":"Tomas"}}',
        '{"facts":"crates=5, keeper=Tomas"}',
        'Here you go: {"facts":{"crates":"5","keeper":"Tomas"}}',
    ]
    assert [answer_matches(a, EXPECTED) for a in answers] == [True] + [False] * 6


@pytest.mark.parametrize(
    "answer",
    [
        '{"facts":{"crates":"5","crates":"5","keeper":"Tomas"}}',
        '{"facts":{"crates":"5","\\u0063rates":"5","keeper":"Tomas"}}',
        '{"facts":{"crates":"5","keeper":"Tomas","k\\u0065eper":"Tomas"}}',
        '{"facts":{"crates":"5","keeper":"Tomas"},"extra":true}',
        '{"facts":{"crates":"5","keeper":"Tomas"},"facts":{"crates":"5","keeper":"Tomas"}}',
        '{"facts":{"crates":"5","keeper":"Tomas"},"\\u0066acts":{}}',
        '{"\\u0066acts":{"crates":"5","keeper":"Tomas"},"facts":{}}',
        '{"extra":true,"facts":{"crates":"5","keeper":"Tomas"}}',
    ],
)
def test_duplicate_decoded_fact_keys_and_extra_outer_members_are_rejected(answer: str) -> None:
    assert not answer_matches(answer, EXPECTED)


@pytest.mark.parametrize(
    "answer",
    [
        '{"facts":{"keeper":"Tomas","crates":"5"}}',
        ' \t\r\n{ "facts" : { "crates" : "5" ,\n "keeper" : "Tomas" } }\n ',
        '{"\\u0066acts":{"\\u0063rates":"\\u0035","keeper":"Tom\\u0061s"}}',
        '{"facts":{"crates":"5","keeper":"Tomas"}}\r\n',
    ],
)
def test_unique_decoded_keys_escapes_and_json_whitespace_are_accepted(answer: str) -> None:
    assert answer_matches(answer, EXPECTED)


@pytest.mark.parametrize(
    "answer",
    [
        '{"facts":{"crates":"5\\q","keeper":"Tomas"}}',
        '{"facts":{"crates":"5","keeper":"Tomas}}',
        '{"facts":{"crates":"5",,"keeper":"Tomas"}}',
        '{"facts":{"crates":"5","keeper":"Tomas",}}',
        '{"facts":{"crates":{"n":"5"},"keeper":"Tomas"}}',
        '{"facts":{"crates":"5";"keeper":"Tomas"}}',
        '{"facts":{"crates":"5","keeper":"Tomas"}} true',
        '```json\n{"facts":{"crates":"5","keeper":"Tomas"}}\n```',
        '{"facts":{"crates":"5","keeper":"Tomas"}',
        "{}",
        "",
        '\u00a0{"facts":{"crates":"5","keeper":"Tomas"}}',
        '{"facts":{"crates":"5","keeper":"To\nmas"}}',
        '{"facts":{"crates":"5","keeper":["Tomas"]}}',
        '{"facts":{"crates":null,"keeper":"Tomas"}}',
        "{'facts':{'crates':'5','keeper':'Tomas'}}",
    ],
)
def test_malformed_strings_separators_nesting_and_prose_are_rejected(answer: str) -> None:
    assert not answer_matches(answer, EXPECTED)


def test_empty_state_and_arbitrary_decoded_string_values() -> None:
    assert answer_matches('{"facts":{}}', {})
    assert answer_matches('{ "facts" : { } }', {})
    assert not answer_matches('{"facts":{}}', EXPECTED)
    values = {
        "path": "folder/file",
        "quote": 'say "hi" \\ done',
        "lines": "one\ntwo",
        "emoji": "\U0001f50d",
        "empty": "",
    }
    encoded = json.dumps({"facts": values})
    assert answer_matches(encoded, values)
    assert answer_matches('{"facts":{"path":"folder\\/file"}}', {"path": "folder/file"})


def test_lone_surrogate_escapes_are_rejected() -> None:
    with pytest.raises(AnswerFormatError):
        parse_facts_answer('{"facts":{"k":"\\ud800"}}')
    assert parse_facts_answer('{"facts":{"k":"\\ud83d\\udd0d"}}') == {"k": "\U0001f50d"}


def test_parse_errors_say_what_and_where() -> None:
    with pytest.raises(AnswerFormatError) as info:
        parse_facts_answer('{"facts":{"a":"1"}} trailing')
    assert info.value.offset == 20
    assert "after the answer object" in info.value.message
    assert explain_answer('{"facts":{"crates":"5"}}', EXPECTED) == "missing keeper"
    assert "instead of" in (
        explain_answer('{"facts":{"crates":"4","keeper":"Tomas"}}', EXPECTED) or ""
    )
    assert explain_answer('{"facts":{"crates":"5","keeper":"Tomas"}}', EXPECTED) is None


# -- properties -------------------------------------------------------------------------------

_json_text = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
).map(json.dumps)

_near_miss = st.builds(
    lambda facts, junk, cut: (json.dumps({"facts": facts}) + junk)[: cut or None],
    st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3),
    st.sampled_from(["", " ", "}", ",", '"', "\\", "\n", "x", '{"a":1}']),
    st.integers(min_value=0, max_value=40),
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=60), _json_text, _near_miss))
def test_parser_never_crashes_and_never_accepts_what_json_rejects(text: str) -> None:
    try:
        facts = parse_facts_answer(text)
    except AnswerFormatError:
        return
    decoded = json.loads(text)  # must not raise
    assert decoded == {"facts": facts}
    assert all(isinstance(v, str) for v in facts.values())


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=5), st.booleans())
def test_parser_accepts_every_serialised_facts_object(
    facts: dict[str, str], ascii_only: bool
) -> None:
    try:
        json.dumps(facts).encode("utf-8")
        "".join(facts).encode("utf-8")
        "".join(facts.values()).encode("utf-8")
    except UnicodeEncodeError:
        return  # lone surrogates are not valid Unicode text and are rejected by design
    text = json.dumps({"facts": facts}, ensure_ascii=ascii_only, indent=1)
    assert parse_facts_answer(text) == facts
    assert answer_matches(text, facts)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="FACTREMOVE =abc\n;x", max_size=20), max_size=6))
def test_fold_matches_a_line_by_line_reference(bodies: list[str]) -> None:
    expected: dict[str, str] = {}
    for body in bodies:
        for line in body.split("\n"):
            if line[:5] == "FACT " and "=" in line:
                key, value = line[5:].split("=", 1)
                if key:
                    expected[key] = value
            elif line[:7] == "REMOVE ":
                expected.pop(line[7:], None)
    assert notebook_state(records(*bodies)) == expected
