"""Strict, mechanical graders for notebook episodes.

Three rules, each deliberately unforgiving so a model cannot pass by luck or by formatting:

* :func:`notebook_state` folds ``FACT key=value`` / ``REMOVE key`` lines over live records in
  order. Values are verbatim: ``FACT a=1; FACT b=2`` assigns ``a`` the value ``1; FACT b=2``.
* :func:`value_is_framed` accepts an exact value only where it stands as a whole token, so
  ``KX-7302-BB`` or ``receipt-4410.old`` never count as ``KX-7302-B`` / ``receipt-4410``.
* :func:`parse_facts_answer` accepts only ``{"facts": {"key": "value", ...}}`` with string
  values, JSON whitespace, one outer member and no duplicate decoded keys.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from picocontext import Record, Snapshot
from picocontext_diagnostics.errors import AnswerFormatError

FACT_PREFIX = "FACT "
REMOVE_PREFIX = "REMOVE "

# Characters that may stand right before / right after an exact value. ``=`` may precede a
# value (``FACT key=value``) but not follow it (``value=old`` is a different token).
_BEFORE = frozenset("\"'`=,;()[]{}")
_AFTER = frozenset("\"'`,;()[]{}")
_JSON_WHITESPACE = frozenset(" \t\n\r")


class ContextCheck(StrEnum):
    """How an episode grades the live context after each step."""

    EXACT_VALUES = "exact_values"
    NOTEBOOK_STATE = "notebook_state"
    # The order lookup: each value present as a substring of some live body; the answer must
    # name every value (any case) and no superseded one.
    ORDER_FACTS = "order_facts"


def _bodies(context: Snapshot | Iterable[Record]) -> Iterable[str]:
    records = context.records if isinstance(context, Snapshot) else context
    return (record.body for record in records)


def fold_lines(lines: Iterable[str], state: dict[str, str] | None = None) -> dict[str, str]:
    """Apply FACT/REMOVE lines in order to ``state`` (a new dict if ``None``) and return it."""
    out: dict[str, str] = {} if state is None else state
    for line in lines:
        if line.startswith(FACT_PREFIX):
            rest = line[len(FACT_PREFIX) :]
            key, sep, value = rest.partition("=")
            if sep and key:
                out[key] = value
        elif line.startswith(REMOVE_PREFIX):
            out.pop(line[len(REMOVE_PREFIX) :], None)
    return out


def notebook_state(context: Snapshot | Iterable[Record]) -> dict[str, str]:
    """The notebook a reader of ``context`` would reconstruct: every record body (any role,
    live order) split on ``\\n`` only, later lines overriding earlier ones."""
    state: dict[str, str] = {}
    for body in _bodies(context):
        fold_lines(body.split("\n"), state)
    return state


def _framed_at(text: str, start: int, end: int) -> bool:
    before_ok = start == 0 or text[start - 1].isspace() or text[start - 1] in _BEFORE
    after_ok = end == len(text) or text[end].isspace() or text[end] in _AFTER
    return before_ok and after_ok


def value_is_framed(text: str, value: str) -> bool:
    """True if ``value`` (non-empty) occurs in ``text`` as a whole token (see module doc)."""
    if not value:
        return False
    index = text.find(value)
    while index >= 0:
        if _framed_at(text, index, index + len(value)):
            return True
        index = text.find(value, index + 1)
    return False


def exact_values(
    context: Snapshot | Iterable[Record], expected: Mapping[str, str]
) -> dict[str, str]:
    """The expected entries whose exact value stands framed in some live record body."""
    bodies = list(_bodies(context))
    return {
        key: value
        for key, value in expected.items()
        if any(value_is_framed(body, value) for body in bodies)
    }


def retained_facts(
    context: Snapshot | Iterable[Record], expected: Mapping[str, str], check: ContextCheck
) -> dict[str, str]:
    """What the live context still holds, by the episode's check; compare with ``expected``."""
    if check is ContextCheck.NOTEBOOK_STATE:
        return notebook_state(context)
    if check is ContextCheck.ORDER_FACTS:
        live = "\n".join(_bodies(context))
        return {k: v for k, v in expected.items() if v in live}
    return exact_values(context, expected)


def context_problem(
    check: ContextCheck, retained: Mapping[str, str], expected: Mapping[str, str]
) -> str | None:
    """What the live context lost, for humans reading reports; ``None`` when nothing."""
    if check is ContextCheck.ORDER_FACTS:
        lost = [v for k, v in expected.items() if k not in retained]
        return ("lost " + ", ".join(lost)) if lost else None
    return explain_state(retained, expected)


def answer_correct(
    check: ContextCheck, answer: str, expected: Mapping[str, str], forbidden: Iterable[str] = ()
) -> bool:
    """The strict facts answer for notebooks; for the order lookup a mechanical substring
    check (every value present, any case, and no forbidden term), not a semantic judge."""
    if check is not ContextCheck.ORDER_FACTS:
        return answer_matches(answer, expected)
    text = answer.lower()
    return all(v.lower() in text for v in expected.values()) and not any(
        t in text for t in forbidden
    )


def answer_problem(
    check: ContextCheck,
    answer: str,
    expected: Mapping[str, str],
    forbidden: Iterable[str] = (),
    failed: bool = False,
) -> str | None:
    """Why an answer fails (an order lookup whose turn ``failed`` has no answer to judge)."""
    if check is not ContextCheck.ORDER_FACTS:
        return explain_answer(answer, expected)
    if failed:
        return None
    text = answer.lower()
    missing = [v for v in expected.values() if v.lower() not in text]
    stale = [t for t in forbidden if t in text]
    parts = []
    if missing:
        parts.append("missing " + ", ".join(missing))
    if stale:
        parts.append("mentions outdated " + ", ".join(stale))
    return "; ".join(parts) or None


# -- the strict answer parser -----------------------------------------------------------------


class _Cursor:
    __slots__ = ("pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, reason: str) -> AnswerFormatError:
        return AnswerFormatError(reason, self.pos)

    def skip_ws(self) -> None:
        text = self.text
        while self.pos < len(text) and text[self.pos] in _JSON_WHITESPACE:
            self.pos += 1

    def expect(self, char: str, what: str) -> None:
        self.skip_ws()
        if self.pos >= len(self.text) or self.text[self.pos] != char:
            raise self.fail(f"expected {what}")
        self.pos += 1

    def peek(self) -> str:
        self.skip_ws()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def string(self, what: str) -> str:
        """One JSON string token, decoded by the standard JSON decoder."""
        self.skip_ws()
        text = self.text
        start = self.pos
        if start >= len(text) or text[start] != '"':
            raise self.fail(f"expected {what} as a JSON string")
        end = start + 1
        while True:
            if end >= len(text):
                raise self.fail("unterminated string")
            char = text[end]
            if char == '"':
                break
            if char == "\\":
                end += 2
                continue
            if ord(char) < 0x20:
                raise AnswerFormatError("unescaped control character in string", end)
            end += 1
        try:
            decoded = json.loads(text[start : end + 1])
        except (ValueError, RecursionError):
            raise self.fail("invalid string escape") from None
        if not isinstance(decoded, str):  # pragma: no cover - a quoted token decodes to str
            raise self.fail("invalid string")
        try:
            decoded.encode("utf-8")
        except UnicodeEncodeError:
            raise self.fail("string escapes a lone surrogate") from None
        self.pos = end + 1
        return decoded


# Fact values are short identifiers; the bound only keeps a constrained answer finite.
MAX_FACT_VALUE_CHARS = 200


def facts_answer_schema(keys: Iterable[str]) -> dict[str, Any]:
    """The JSON schema of the answer shape a request shows: ``{"facts": {...}}`` with exactly
    ``keys`` (sorted, all required) and string values. Structured decoding enforces it; the
    strict parser below still judges every answer."""
    names = sorted(keys)
    value = {"type": "string", "maxLength": MAX_FACT_VALUE_CHARS}
    facts = {
        "type": "object",
        "properties": {name: value for name in names},
        "required": names,
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"facts": facts},
        "required": ["facts"],
        "additionalProperties": False,
    }


def parse_facts_answer(answer: str) -> dict[str, str]:
    """Parse the strict answer shape or raise :class:`AnswerFormatError` saying where it broke.

    Everything accepted here is also valid JSON (``json.loads`` agrees on the value); numbers,
    nested values, prose, Markdown fences, trailing commas and a second outer member are not.
    """
    cur = _Cursor(answer)
    cur.expect("{", "'{' opening the answer object")
    if cur.string("the outer key") != "facts":
        raise cur.fail("the only outer key must be facts")
    cur.expect(":", "':' after facts")
    cur.expect("{", "'{' opening the facts object")
    facts: dict[str, str] = {}
    if cur.peek() == "}":
        cur.pos += 1
    else:
        while True:
            key_at = cur.pos
            key = cur.string("a fact key")
            if key in facts:
                raise AnswerFormatError(f"duplicate fact key {key!r}", key_at)
            cur.expect(":", "':' after a fact key")
            facts[key] = cur.string("a string fact value")
            nxt = cur.peek()
            if nxt == ",":
                cur.pos += 1
                continue
            if nxt == "}":
                cur.pos += 1
                break
            raise cur.fail("expected ',' or '}' in facts")
    cur.expect("}", "'}' closing the answer (facts must be its only member)")
    cur.skip_ws()
    if cur.pos != len(answer):
        raise cur.fail("unexpected text after the answer object")
    return facts


def answer_matches(answer: str, expected: Mapping[str, str]) -> bool:
    """Strict shape and exact equality with ``expected`` (no missing, extra or stale keys)."""
    try:
        return parse_facts_answer(answer) == dict(expected)
    except AnswerFormatError:
        return False


def explain_answer(answer: str, expected: Mapping[str, str]) -> str | None:
    """Why an answer fails, for humans reading reports; ``None`` when it matches."""
    try:
        facts = parse_facts_answer(answer)
    except AnswerFormatError as exc:
        return f"not the strict facts shape: {exc.message}"
    return explain_state(facts, expected)


def explain_state(actual: Mapping[str, str], expected: Mapping[str, str]) -> str | None:
    """Missing, extra and wrong keys between two notebooks; ``None`` when equal."""
    if dict(actual) == dict(expected):
        return None
    parts: list[str] = []
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    wrong = sorted(k for k in set(actual) & set(expected) if actual[k] != expected[k])
    if missing:
        parts.append("missing " + ", ".join(missing))
    if extra:
        parts.append("unexpected " + ", ".join(extra))
    for key in wrong:
        parts.append(f"{key}={actual[key]!r} instead of {expected[key]!r}")
    return "; ".join(parts)
