"""Tool calls out of generated tokens: native (token-level tags) and the text fallback.

Native parsing finds the model's tool-call start/end *tokens* in the generated ids and hands
the text between them to the tokenizer's own parser (``mlx_lm``'s per-family parsers). The
fallback reads ``<tool_call>`` … ``</tool_call>`` from plain text (models whose tags are not
special tokens, or whose tokenizer has no parser). Small models often write the same call
without the tags: a reply that is *wholly* one Markdown JSON fence or one JSON object with
``name`` and ``arguments`` is read as that call too (the constrained grammars allow exactly
these three openings, so free and constrained replies are read alike). Only a complete JSON
object counts: no repair of malformed JSON. Every call still goes through the core's strict
validators.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from picocontext.backend import ModelToolCall

START_TAG = "<tool_call>"
END_TAG = "</tool_call>"


def _call_from_object(value: Any) -> ModelToolCall | None:
    if not isinstance(value, dict):
        return None
    name = value.get("name")
    arguments = value.get("arguments")
    if not isinstance(name, str) or not name:
        return None
    if isinstance(arguments, dict):
        return ModelToolCall(name=name, arguments=json.dumps(arguments, ensure_ascii=False))
    if isinstance(arguments, str):
        # Some models send the arguments as an encoded string; the validator judges it.
        return ModelToolCall(name=name, arguments=arguments)
    return None


FENCE_OPEN = "```json\n"
FENCE_CLOSE = "\n```"


def _untagged_call(text: str) -> ModelToolCall | None:
    """The call a whole reply spells as one fenced or bare JSON object, if it is one."""
    body = text.strip()
    if body.startswith("```"):
        first, _, rest = body.partition("\n")
        if first.strip() not in ("```", "```json") or not rest.rstrip().endswith("```"):
            return None
        body = rest.rstrip()[:-3].strip()
    if not body.startswith("{"):
        return None
    try:
        return _call_from_object(json.loads(body))
    except ValueError:
        return None


def parse_text_tool_calls(text: str) -> tuple[ModelToolCall, ...]:
    """Every complete ``<tool_call>{json}</tool_call>`` block in ``text``, in order; with no
    block, the one call a wholly fenced or bare JSON reply spells."""
    calls: list[ModelToolCall] = []
    position = 0
    while True:
        start = text.find(START_TAG, position)
        if start < 0:
            break
        end = text.find(END_TAG, start + len(START_TAG))
        if end < 0:
            break
        inner = text[start + len(START_TAG) : end].strip()
        position = end + len(END_TAG)
        try:
            value = json.loads(inner)
        except ValueError:
            continue
        call = _call_from_object(value)
        if call is not None:
            calls.append(call)
    if not calls and START_TAG not in text:
        untagged = _untagged_call(text)
        if untagged is not None:
            calls.append(untagged)
    return tuple(calls)


def _find(haystack: Sequence[int], needle: Sequence[int], start: int) -> int:
    n = len(needle)
    if n == 0:
        return -1
    first = needle[0]
    for i in range(start, len(haystack) - n + 1):
        if haystack[i] == first and tuple(haystack[i : i + n]) == tuple(needle):
            return i
    return -1


def parse_native_tool_calls(
    ids: Sequence[int],
    start_ids: Sequence[int],
    end_ids: Sequence[int],
    decode: Callable[[Sequence[int]], str],
    parser: Callable[[str, Any], Any],
    tools: Any = None,
) -> tuple[ModelToolCall, ...]:
    """Tool calls delimited by the tokenizer's start/end token sequences."""
    calls: list[ModelToolCall] = []
    position = 0
    while True:
        start = _find(ids, start_ids, position)
        if start < 0:
            break
        end = _find(ids, end_ids, start + len(start_ids))
        if end < 0:
            break
        inner = decode(ids[start + len(start_ids) : end])
        position = end + len(end_ids)
        try:
            parsed = parser(inner, tools)
        except Exception:  # upstream parsers raise ValueError, KeyError, JSONDecodeError …
            continue
        for item in parsed if isinstance(parsed, list) else [parsed]:
            call = _call_from_object(item)
            if call is not None:
                calls.append(call)
    return tuple(calls)
