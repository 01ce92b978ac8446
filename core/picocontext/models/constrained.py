"""Grammar-constrained generation for every protocol action of a small model.

With constrained decoding on, each protocol action can only produce a well-formed reply:

* the editable decision: one ``<tool_call>`` wrapping ``edit_context`` (recordIDs from the
  current unprotected ids, 1…32 operations, replace/delete shapes) or ``keep_context``, both
  with the *current* ``baseRevision``;
* a tool-loop step of a tool-using policy: one ``<tool_call>`` naming an offered tool with
  arguments valid under that tool's own JSON schema (built generically from the offered
  specs, so an ``enum`` a policy puts into a schema is enforced exactly as the model read it),
  *or* the answer: the task's answer JSON when the input carries ``answer_schema_json``, else
  free text that does not start a tag;
* an answer whose task defines a JSON shape (``answer_schema_json`` on a completion input);
* any chat reply a caller gives a Lark grammar for (``MLXModel.chat(grammar=...)``, e.g. the
  constrained LLM navigator's verb and node id).

JSON is written compactly (``": "`` and ``", "`` separators) with object members in the order
the schema lists them (tool specs are key-sorted JSON, so the order the prompt shows).
Every grammar ends the output: once the structure is complete only end-of-sequence is
allowed, so a constrained generation stops at the end of the structure, never at the output
cap (unless the cap is smaller than the structure). Whether a call makes semantic sense is
still the core validator's job (it judges every call, constrained or not).

Library choice (measured, see docs/models.md): llguidance. It compiles these grammars in
milliseconds, computes a mask in tens of microseconds, handles special-token tags and has no
heavy dependencies. xgrammar imports torch at import time; outlines-core builds a full token
index per grammar (the recordID enum changes every turn), which costs far more per decision.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from picocontext.backend import ModelInput, Phase
from picocontext.choices import BARE_LIST_KEY, BARE_WORDS_KEY, SHORTEN_ALL
from picocontext.edits import EDIT_TOOL, KEEP_TOOL, MAX_EDIT_OPERATIONS
from picocontext.errors import ModelError
from picocontext.records import Snapshot

# A logits processor as mlx_lm calls it: (tokens so far, logits) -> logits.
LogitsProcessor = Callable[[Any, Any], Any]
_JSON_STYLE = {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "}
MAX_CONSTRAINED_BODY_CHARS = 8_000


def decision_schema(snapshot: Snapshot) -> dict[str, Any]:
    """JSON schema of the ``{"name": …, "arguments": …}`` object inside the tool-call tags."""
    revision = {"type": "integer", "const": snapshot.revision}
    keep = {
        "type": "object",
        "properties": {
            "name": {"const": KEEP_TOOL},
            "arguments": {
                "type": "object",
                "properties": {"baseRevision": revision},
                "required": ["baseRevision"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }
    ids = snapshot.unprotected_ids
    if not ids:
        return {**keep, "x-guidance": _JSON_STYLE}
    record_id = {"type": "string", "enum": ids}
    replace = {
        "type": "object",
        "properties": {
            "action": {"const": "replace"},
            "recordID": record_id,
            "body": {"type": "string", "maxLength": MAX_CONSTRAINED_BODY_CHARS},
        },
        "required": ["action", "recordID", "body"],
        "additionalProperties": False,
    }
    delete = {
        "type": "object",
        "properties": {"action": {"const": "delete"}, "recordID": record_id},
        "required": ["action", "recordID"],
        "additionalProperties": False,
    }
    edit = {
        "type": "object",
        "properties": {
            "name": {"const": EDIT_TOOL},
            "arguments": {
                "type": "object",
                "properties": {
                    "baseRevision": revision,
                    "operations": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": MAX_EDIT_OPERATIONS,
                        "items": {"anyOf": [replace, delete]},
                    },
                },
                "required": ["baseRevision", "operations"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }
    return {"anyOf": [edit, keep], "x-guidance": _JSON_STYLE}


def _tags(special_tags: bool) -> tuple[str, str]:
    """The call tags as lark terminals: special tokens (Qwen) or text (SmolLM2)."""
    if special_tags:
        return "<tool_call>", "</tool_call>"
    return '"<tool_call>"', '"</tool_call>"'


def _json_rule(name: str, schema: dict[str, Any]) -> str:
    styled = {**schema, "x-guidance": _JSON_STYLE}
    return f"{name}: %json {json.dumps(styled, ensure_ascii=False)}\n"


def _call_block(special_tags: bool, *, bare: bool = True) -> str:
    """A call in one of the forms the parser reads: tagged (what the template asks for), in a
    Markdown JSON fence, or (``bare``) a plain JSON object. Small models that reach for a fence
    are kept on a well-formed call instead of being pushed into prose; ``bare`` is off where a
    JSON answer is the other branch, so the two never share an opening."""
    open_tag, close_tag = _tags(special_tags)
    forms = [f'{open_tag} "\\n" call "\\n" {close_tag}', '"```json\\n" call "\\n```"']
    if bare:
        forms.append("call")
    return "call_block: " + " | ".join(forms) + "\n"


def decision_lark(snapshot: Snapshot, special_tags: bool) -> str:
    """The whole decision output: tag, newline, JSON call, newline, closing tag."""
    schema = {k: v for k, v in decision_schema(snapshot).items() if k != "x-guidance"}
    return "start: call_block\n" + _call_block(special_tags) + _json_rule("call", schema)


def tool_call_schema(tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``{"name": …, "arguments": …}`` for any offered tool (OpenAI-style function specs),
    each tool's arguments under its own parameters schema, exactly as the prompt shows it."""
    variants = []
    for tool in tools:
        function = tool["function"]
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        variants.append(
            {
                "type": "object",
                "properties": {"name": {"const": function["name"]}, "arguments": parameters},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    if not variants:
        raise ModelError("a tool-call grammar needs at least one offered tool")
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


# Free text that does not start like a call: a reply that opens with a tag, a Markdown fence
# or a JSON object (the ways small models begin a call) must be the constrained call branch.
# Special-token tags cannot appear in text at all.
_FREE_TEXT = "answer: /[^<`{\\s](?s:.*)/\n"


def action_lark(
    tools: Sequence[dict[str, Any]], answer_schema: dict[str, Any] | None, special_tags: bool
) -> str:
    """One tool-loop step: a single call to an offered tool, or the answer."""
    answer = _json_rule("answer", answer_schema) if answer_schema is not None else _FREE_TEXT
    return (
        "start: call_block | answer\n"
        + _call_block(special_tags, bare=answer_schema is None)
        + _json_rule("call", tool_call_schema(tools))
        + answer
    )


def bare_words(answer_schema: dict[str, Any]) -> list[str] | None:
    """The words of a string enum marked with ``BARE_WORDS_KEY``, else ``None``: the reply is
    one of them as plain text, not a JSON string. A one-word reply (an incremental choice) is
    what a small model writes by itself; a forced opening quote is not (measured on
    Qwen2.5-Coder-1.5B it costs 4-11 nats and changes the word that follows)."""
    if answer_schema.get(BARE_WORDS_KEY) is not True or answer_schema.get("type") != "string":
        return None
    words = answer_schema.get("enum")
    if not isinstance(words, list) or not words or not all(isinstance(w, str) and w for w in words):
        raise ModelError(f"{BARE_WORDS_KEY} needs a string enum of non-empty words")
    return words


def bare_list(answer_schema: dict[str, Any]) -> tuple[list[str], str] | None:
    """The items a list reply chooses among and their separator, from a schema marked with
    ``BARE_LIST_KEY`` (:func:`picocontext.choices.kinds_schema`), else ``None``."""
    separator = answer_schema.get(BARE_LIST_KEY)
    if separator is None:
        return None
    variants = answer_schema.get("anyOf")
    arrays = [v for v in variants or () if isinstance(v, dict) and v.get("type") == "array"]
    items = arrays[0].get("items", {}).get("enum") if len(arrays) == 1 else None
    if (
        not isinstance(separator, str)
        or not separator
        or not isinstance(items, list)
        or not items
        or not all(isinstance(w, str) and w for w in items)
    ):
        raise ModelError(f"{BARE_LIST_KEY} needs a separator and an array of a string enum")
    return items, separator


def _literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def answer_lark(answer_schema: dict[str, Any]) -> str:
    """An answer that is exactly one JSON value of the task's answer schema, exactly one of
    the words of a string enum marked ``BARE_WORDS_KEY`` (:func:`bare_words`), or, marked
    ``BARE_LIST_KEY``, ``all`` or items of a list joined by its separator (:func:`bare_list`)."""
    words = bare_words(answer_schema)
    if words is not None:
        return "start: " + " | ".join(_literal(w) for w in words) + "\n"
    listed = bare_list(answer_schema)
    if listed is not None:
        items, separator = listed
        return (
            f"start: {_literal(SHORTEN_ALL)} | item ({_literal(separator)} item)*\n"
            + "item: "
            + " | ".join(_literal(w) for w in items)
            + "\n"
        )
    return "start: answer\n" + _json_rule("answer", answer_schema)


def input_lark(model_input: ModelInput, special_tags: bool) -> str | None:
    """The grammar of the reply to ``model_input``, or ``None`` when nothing constrains it
    (a free-text completion, or a tool step without tools and without an answer shape)."""
    answer = model_input.answer_schema
    if model_input.phase is Phase.EDIT:
        return decision_lark(model_input.context, special_tags)
    if model_input.phase is Phase.TOOLS and model_input.tools:
        return action_lark(model_input.tools, answer, special_tags)
    return answer_lark(answer) if answer is not None else None


class DecisionGrammar:
    """llguidance state shared by every constrained generation of one model (the tokenizer
    is built once; each generation gets its own matcher)."""

    def __init__(self, hf_tokenizer: Any, vocab_size: int, eos_token_id: int) -> None:
        try:
            import llguidance
            import llguidance.hf
        except ImportError as exc:
            raise ModelError(
                "Constrained decoding needs the llguidance package (pip install llguidance); "
                "or use free decoding (--decoding free)."
            ) from exc
        self._llg = llguidance
        self.vocab_size = vocab_size
        self.tokenizer = llguidance.hf.from_tokenizer(
            hf_tokenizer, n_vocab=vocab_size, eos_token=eos_token_id
        )
        added = hf_tokenizer.get_added_vocab()
        self.special_tags = "<tool_call>" in added and "</tool_call>" in added
        # Set to a list to collect the seconds spent computing each token mask (benchmarks).
        self.timings: list[float] | None = None

    def matcher(self, snapshot: Snapshot) -> Any:
        """A fresh matcher for the decision on ``snapshot``."""
        return self.matcher_for(decision_lark(snapshot, self.special_tags))

    def matcher_for(self, lark: str) -> Any:
        """A fresh matcher for any grammar of this module (one generation each)."""
        grammar = self._llg.LLMatcher.grammar_from_lark(lark)
        matcher = self._llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ModelError(
                f"The constraint grammar was rejected ({matcher.get_error()}); a tool or "
                "answer schema uses JSON-schema features llguidance cannot enforce, or a "
                "caller's Lark grammar is malformed. Simplify it or use free decoding."
            )
        return matcher


def mask_processor(
    matcher: Any, vocab_size: int, timings: list[float] | None = None
) -> LogitsProcessor:
    """A logits processor enforcing ``matcher`` (MLX; runs on the model's worker thread).

    ``timings`` collects the CPU seconds of each step (consume + mask + array build)."""
    import mlx.core as mx
    import numpy as np

    state = {"first": True}

    def processor(tokens: Any, logits: Any) -> Any:
        if not state["first"]:
            matcher.consume_token(int(tokens[-1].item()))
        started = time.perf_counter()
        state["first"] = False
        words = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
        allowed = np.unpackbits(words, bitorder="little")[: logits.shape[-1]].astype(bool)
        if allowed.shape[0] < logits.shape[-1]:
            allowed = np.pad(allowed, (0, logits.shape[-1] - allowed.shape[0]))
        mask = mx.array(allowed)
        if timings is not None:
            timings.append(time.perf_counter() - started)
        return mx.where(mask, logits, mx.array(-float("inf"), dtype=logits.dtype))

    return processor


def input_processor(grammar: DecisionGrammar, model_input: ModelInput) -> LogitsProcessor | None:
    """The constraint for one generation answering ``model_input`` under a model's
    ``grammar`` state (None: free). The state is passed, not the model, so this module needs
    no model class."""
    lark = input_lark(model_input, grammar.special_tags)
    if lark is None:
        return None
    return mask_processor(grammar.matcher_for(lark), grammar.vocab_size, grammar.timings)


def check_lark(grammar: DecisionGrammar, lark: str) -> None:
    """Refuse a caller's grammar before any generation starts (a clear ModelError), rather
    than on the worker thread in the middle of a call."""
    grammar.matcher_for(lark)


def lark_processor(grammar: DecisionGrammar, lark: str) -> LogitsProcessor:
    """The constraint for one chat generation under a caller's grammar (``chat(grammar=)``)."""
    return mask_processor(grammar.matcher_for(lark), grammar.vocab_size, grammar.timings)


def decision_processor(grammar: DecisionGrammar, model_input: ModelInput) -> LogitsProcessor:
    """The constraint for one decision generation under a model's ``grammar`` state."""
    return mask_processor(grammar.matcher(model_input.context), grammar.vocab_size, grammar.timings)
