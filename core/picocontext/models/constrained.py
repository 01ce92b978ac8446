"""Grammar-constrained decision calls (optional, off by default).

With constraints on, the decision generation can only produce one syntactically valid
``<tool_call>`` wrapping either ``edit_context`` (recordIDs from the current unprotected ids,
1…32 operations, replace/delete shapes) or ``keep_context``, both with the *current*
``baseRevision``, followed by end-of-sequence. Whether the call makes semantic sense is still
the core validator's job (it judges every call, constrained or not).

Library choice (measured, see docs/models.md): llguidance. It compiles this grammar in
milliseconds, computes a mask in tens of microseconds, handles special-token tags and has no
heavy dependencies. xgrammar imports torch at import time; outlines-core builds a full token
index per grammar (the recordID enum changes every turn), which costs far more per decision.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from picocontext.backend import ModelInput
from picocontext.edits import EDIT_TOOL, KEEP_TOOL, MAX_EDIT_OPERATIONS
from picocontext.errors import ModelError
from picocontext.records import Snapshot

if TYPE_CHECKING:
    from picocontext.models.mlx_backend import LogitsProcessor, MLXModel

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


def decision_lark(snapshot: Snapshot, special_tags: bool) -> str:
    """The whole decision output: tag, newline, JSON call, newline, closing tag.

    ``special_tags`` writes the tags as special tokens (Qwen) rather than text (SmolLM2)."""
    open_tag, close_tag = (
        ("<tool_call>", "</tool_call>") if special_tags else ('"<tool_call>"', '"</tool_call>"')
    )
    schema = json.dumps(decision_schema(snapshot), ensure_ascii=False)
    return f'start: {open_tag} "\\n" call "\\n" {close_tag}\ncall: %json {schema}\n'


class DecisionGrammar:
    """llguidance state shared by every decision of one model (the tokenizer is built once)."""

    def __init__(self, hf_tokenizer: Any, vocab_size: int, eos_token_id: int) -> None:
        try:
            import llguidance
            import llguidance.hf
        except ImportError as exc:
            raise ModelError(
                "Constrained decisions need the llguidance package (pip install llguidance); "
                "or turn constrained decisions off."
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
        grammar = self._llg.LLMatcher.grammar_from_lark(decision_lark(snapshot, self.special_tags))
        matcher = self._llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ModelError(f"decision grammar rejected: {matcher.get_error()}")
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


def decision_processor(model: MLXModel, model_input: ModelInput) -> LogitsProcessor:
    """The constraint for one decision generation of ``model``."""
    grammar = model.decision_grammar()
    return mask_processor(grammar.matcher(model_input.context), grammar.vocab_size, grammar.timings)
