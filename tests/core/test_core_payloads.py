"""Model-owned payload decoders: exact key sets, integer revisions, size caps (checklist 17–19)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kettle import SCOPE
from picocontext import (
    Delete,
    InvalidContext,
    Replace,
    StaleRevision,
    decode_edit_payload,
    decode_keep_payload,
    edit_payload,
)


def test_valid_edit_payload_uses_the_callers_scope() -> None:
    text = edit_payload(3, [Replace(record_id="a", body="b"), Delete(record_id="c")])
    out = decode_edit_payload(text, SCOPE)
    assert out.scope == SCOPE and out.base_revision == 3
    assert out.operations == (Replace(record_id="a", body="b"), Delete(record_id="c"))


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ("not json", "expected baseRevision integer and operations array"),
        ("[]", "expected baseRevision integer and operations array"),
        ('{"baseRevision":0}', "expected baseRevision integer and operations array"),
        (
            '{"baseRevision":0,"operations":[],"scope":{"userID":"x"}}',
            "expected baseRevision integer and operations array",
        ),
        (
            '{"baseRevision":0,"operations":{}}',
            "expected baseRevision integer and operations array",
        ),
        (
            '{"baseRevision":0,"operations":[1]}',
            "expected baseRevision integer and operations array",
        ),
        ('{"baseRevision":true,"operations":[]}', "baseRevision must be a JSON integer"),
        ('{"baseRevision":0.5,"operations":[]}', "baseRevision must be a JSON integer"),
        ('{"baseRevision":1.0,"operations":[]}', "baseRevision must be a JSON integer"),
        ('{"baseRevision":"0","operations":[]}', "baseRevision must be a JSON integer"),
        (
            '{"baseRevision":NaN,"operations":[]}',
            "expected baseRevision integer and operations array",
        ),
        (
            '{"baseRevision":0,"baseRevision":1,"operations":[]}',
            "expected baseRevision integer and operations array",
        ),
        (
            '{"baseRevision":0,"operations":[{"action":"delete"}]}',
            "operation needs action and recordID",
        ),
        (
            '{"baseRevision":0,"operations":[{"recordID":"a"}]}',
            "operation needs action and recordID",
        ),
        (
            '{"baseRevision":0,"operations":[{"action":"delete","recordID":"a","role":"user"}]}',
            "delete needs only action and recordID",
        ),
        (
            '{"baseRevision":0,"operations":[{"action":"replace","recordID":"a"}]}',
            "replace needs only action, recordID and body",
        ),
        (
            '{"baseRevision":0,"operations":[{"action":"replace","recordID":"a","body":1}]}',
            "replace needs only action, recordID and body",
        ),
        (
            '{"baseRevision":0,"operations":[{"action":"replace","recordID":"a","body":"b","role":"system"}]}',
            "replace needs only action, recordID and body",
        ),
        ('{"baseRevision":0,"operations":[{"action":"insert","recordID":"a"}]}', "unknown action"),
    ],
)
def test_malformed_or_metadata_writing_edit_payloads(payload: str, reason: str) -> None:
    with pytest.raises(InvalidContext) as err:
        decode_edit_payload(payload, SCOPE)
    assert err.value.reason == reason


def test_empty_operations_decode_but_apply_rejects_them() -> None:
    assert decode_edit_payload('{"baseRevision":0,"operations":[]}', SCOPE).operations == ()


def test_edit_payload_size_cap() -> None:
    frame = len(edit_payload(0, [Replace(record_id="a", body="")]).encode())
    exact = edit_payload(0, [Replace(record_id="a", body="x" * (128_000 - frame))])
    assert len(exact.encode()) == 128_000
    decode_edit_payload(exact, SCOPE)
    over = edit_payload(0, [Replace(record_id="a", body="x" * (128_001 - frame))])
    with pytest.raises(InvalidContext):
        decode_edit_payload(over, SCOPE)


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ("{}", InvalidContext("keep_context needs only baseRevision")),
        ('{"baseRevision":true}', InvalidContext("baseRevision must be a JSON integer")),
        ('{"baseRevision":1}', StaleRevision(expected=0, received=1)),
        (
            '{"baseRevision":0,"operations":[]}',
            InvalidContext("keep_context needs only baseRevision"),
        ),
        ("nope", InvalidContext("keep_context needs only baseRevision")),
        (
            '{"baseRevision":0' + " " * 1100 + "}",
            InvalidContext("keep_context needs only baseRevision"),
        ),
    ],
)
def test_invalid_keep_payloads(payload: str, error: Exception) -> None:
    with pytest.raises(type(error)) as err:
        decode_keep_payload(payload, 0)
    assert err.value == error


def test_valid_keep_payload() -> None:
    assert decode_keep_payload('{"baseRevision": 4}', 4) == 4


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_decoders_never_crash_on_arbitrary_text(text: str) -> None:
    for decode in (lambda t: decode_edit_payload(t, SCOPE), lambda t: decode_keep_payload(t, 0)):
        try:
            decode(text)
        except InvalidContext:
            pass
        except StaleRevision:
            pass


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_decoders_accept_only_the_exact_shape(value: object) -> None:
    text = json.dumps(value)
    try:
        out = decode_edit_payload(text, SCOPE)
    except InvalidContext:
        return
    # Anything accepted has exactly the two keys, an int revision and well-formed operations.
    assert isinstance(value, dict) and set(value) == {"baseRevision", "operations"}
    assert type(value["baseRevision"]) is int
    assert len(out.operations) == len(value["operations"])


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=2**40),
    st.lists(
        st.one_of(
            st.builds(
                Replace, record_id=st.text(min_size=1, max_size=8), body=st.text(max_size=40)
            ),
            st.builds(Delete, record_id=st.text(min_size=1, max_size=8)),
        ),
        max_size=5,
    ),
)
def test_edit_payload_round_trips(revision: int, ops: list[Replace | Delete]) -> None:
    out = decode_edit_payload(edit_payload(revision, ops), SCOPE)
    assert out.base_revision == revision and list(out.operations) == ops
