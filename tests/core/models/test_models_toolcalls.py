"""Tool-call parsing (checklist 58) and the OpenBLAS preload, without a model."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext.models import blas
from picocontext.models.toolcalls import parse_native_tool_calls, parse_text_tool_calls

names = st.text(alphabet=st.characters(categories=["L", "N"], include_characters="_-"), min_size=1)
values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=6,
)
arguments = st.dictionaries(st.text(max_size=10), values, max_size=4)


def wire(name: str, args: dict[str, Any], pretty: bool = False) -> str:
    body = json.dumps({"name": name, "arguments": args}, indent=2 if pretty else None)
    return f"<tool_call>\n{body}\n</tool_call>"


@settings(max_examples=150, deadline=None)
@given(names, arguments, st.text(max_size=30), st.booleans())
def test_complete_calls_round_trip(
    name: str, args: dict[str, Any], prefix: str, pretty: bool
) -> None:
    if "<tool_call>" in prefix:
        return
    calls = parse_text_tool_calls(prefix + wire(name, args, pretty) + " trailing")
    assert len(calls) == 1
    assert calls[0].name == name and json.loads(calls[0].arguments) == args


@settings(max_examples=150, deadline=None)
@given(names, arguments, st.integers(min_value=1, max_value=40))
def test_truncated_calls_are_never_accepted(name: str, args: dict[str, Any], cut: int) -> None:
    text = wire(name, args)
    truncated = text[: max(0, len(text) - cut)]
    assert parse_text_tool_calls(truncated) == ()


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "keep_context", "arguments": {"baseRevision": 0}\n</tool_call>',
        "<tool_call>\n{'name': 'keep_context', 'arguments': {}}\n</tool_call>",
        '<tool_call>\n{"name": "keep_context"}\n</tool_call>',
        '<tool_call>\n{"name": 3, "arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": "", "arguments": {}}\n</tool_call>',
        '<tool_call>\n["keep_context", {}]\n</tool_call>',
        '<tool_call>{"name": "keep_context", "arguments": {"baseRevision": 0}}',
        '{"name": "keep_context", "arguments": {"baseRevision": 0}',
        '```json\n{"name": "keep_context", "arguments": {"baseRevision": 0}}',
        'Call this: {"name": "keep_context", "arguments": {"baseRevision": 0}}',
        '```python\n{"name": "keep_context", "arguments": {"baseRevision": 0}}\n```',
        '{"facts": {"a": "1"}}',
    ],
)
def test_malformed_or_incomplete_calls_are_not_repaired(text: str) -> None:
    assert parse_text_tool_calls(text) == ()


@settings(max_examples=100, deadline=None)
@given(names, arguments, st.sampled_from(["```json\n{}\n```", "```\n{}\n```", "{}", " {}\n"]))
def test_a_reply_that_is_wholly_one_fenced_or_bare_call_is_that_call(
    name: str, args: dict[str, Any], form: str
) -> None:
    body = json.dumps({"name": name, "arguments": args})
    calls = parse_text_tool_calls(form.replace("{}", body))
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [(name, args)]


def test_several_calls_are_all_reported_so_the_session_can_reject_them() -> None:
    text = wire("keep_context", {"baseRevision": 0}) + wire("edit_context", {"a": 1})
    assert [c.name for c in parse_text_tool_calls(text)] == ["keep_context", "edit_context"]


def test_string_arguments_are_passed_through_for_the_validator() -> None:
    text = '<tool_call>{"name": "keep_context", "arguments": "{\\"baseRevision\\": 0}"}</tool_call>'
    (call,) = parse_text_tool_calls(text)
    assert call.arguments == '{"baseRevision": 0}'


def test_native_parsing_uses_token_delimiters_and_the_model_parser() -> None:
    # ids: 7 = start tag, 8 = end tag; decode maps ids to characters of a fixed table.
    table = {1: "x", 2: '{"name": "f", "arguments": {"k": 1}}', 3: "{broken"}
    seen: list[str] = []

    def decode(ids: Any) -> str:
        return "".join(table[i] for i in ids)

    def parser(text: str, tools: Any) -> Any:
        seen.append(text)
        return json.loads(text)

    ids = [1, 7, 2, 8, 1, 7, 3, 8, 7, 2]  # good call, broken call, unterminated call
    calls = parse_native_tool_calls(ids, [7], [8], decode, parser)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("f", {"k": 1})]
    assert seen == [table[2], table[3]]


# -- OpenBLAS preload ------------------------------------------------------------------------
@pytest.fixture()
def fresh_blas(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(blas, "_state", {})
    return blas


def test_missing_openblas_warns_once_with_the_fix(
    fresh_blas: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Any,
) -> None:
    import sys

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delitem(sys.modules, "mlx.core", raising=False)
    monkeypatch.delenv(blas.DISABLE_ENV, raising=False)
    with caplog.at_level(logging.WARNING):
        assert fresh_blas.preload_openblas((str(tmp_path / "nope.so"),)) is None
        assert fresh_blas.preload_openblas((str(tmp_path / "nope.so"),)) is None
    warnings = [r for r in caplog.records if "libopenblas0-pthread" in r.getMessage()]
    assert len(warnings) == 1
    assert "reference BLAS" in fresh_blas.blas_status()


def test_preload_after_mlx_import_reports_that_it_is_too_late(
    fresh_blas: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys
    import types

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv(blas.DISABLE_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "mlx.core", types.ModuleType("mlx.core"))
    assert fresh_blas.preload_openblas() is None
    assert "imported before" in fresh_blas.blas_status()


def test_preload_can_be_disabled(fresh_blas: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv(blas.DISABLE_ENV, "1")
    assert fresh_blas.preload_openblas() is None
    assert blas.DISABLE_ENV in fresh_blas.blas_status()
