"""The Summarizer seam and its implementation over any :class:`picocontext.backend.ChatModel`.

The distiller is model-agnostic: it hands a :class:`SummaryInput` to whatever summarizer it was
given. :class:`ChatSummarizer` renders per-level prompt templates, asks the chat model greedily
(the ChatModel contract), strips reasoning blocks, and splits inputs that would not fit the
model's window (long sections are summarised piecewise, then combined).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from picocontext.backend import ChatMessage, ChatModel
from picocontext.cancel import CancelToken
from picocontext.distill.data import ChildDigest, SummaryInput
from picocontext.distill.errors import SummarizerError
from picocontext.distill.hashing import prompt_digest
from picocontext.distill.ids import KIND_CLUSTER, KIND_SCOPE, KIND_TENANT


@runtime_checkable
class Summarizer(Protocol):
    @property
    def summarizer_id(self) -> str:
        """Model id and quantization; enters the recipe."""
        ...

    @property
    def prompt_digest(self) -> str:
        """Hash of the prompt templates; enters the recipe."""
        ...

    def summarize(self, request: SummaryInput) -> str: ...


SYSTEM_PROMPT = (
    "You condense text for a memory index. Write plain sentences, no preamble, no lists. "
    "Keep names, numbers, dates, decisions and open questions exactly as given."
)
LEAF_TEMPLATE = "Summarize the following {what} in at most {budget} words.\n\n{text}"
ROLLUP_TEMPLATE = (
    "These are summaries of the parts of {what}. Write one summary of the whole in at most "
    "{budget} words, keeping what the parts have in common and the most important specifics."
    "\n\n{children}"
)
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
# Chat-template control markers in the common families (ChatML/Qwen/Llama 3 ``<|...|>`` tokens
# and Qwen's tool tags). Text to summarise is data: a marker in it would be refused by the
# chat format (or, worse, read as structure), so it is shown with look-alike brackets instead.
_MARKER = re.compile(r"<\|[^\s|<>]{1,64}\|>|</?tool_(?:call|response)>")
_LOOKALIKE = str.maketrans({"<": "\u2039", ">": "\u203a", "[": "\u27e6", "]": "\u27e7"})
_LABEL = re.compile(r"^(summary|here is (a|the) summary[^:]*)\s*:\s*", re.IGNORECASE)


def _what(request: SummaryInput) -> str:
    if request.level == 0:
        return "text"
    if request.kind == KIND_SCOPE and request.scope.id:
        return f"the {request.scope.name} '{request.scope.id}'"
    if request.kind == KIND_CLUSTER:
        return "a group of related items"
    if request.kind == KIND_TENANT:
        return "the whole collection"
    return "a collection"


def defang(text: str, markers: Sequence[str] = ()) -> str:
    """``text`` with every chat-template marker made inert: the common ``<|...|>`` tokens and
    tool tags, plus ``markers`` (a model's own reserved strings), get look-alike brackets (or a
    zero-width space after their first character). Text without markers is returned as is."""
    text = _MARKER.sub(lambda m: m.group(0).translate(_LOOKALIKE), text)
    for marker in sorted((m for m in markers if m), key=len, reverse=True):
        if marker not in text:
            continue
        softened = marker.translate(_LOOKALIKE)
        if softened == marker:
            softened = marker[0] + "\u200b" + marker[1:]
        text = text.replace(marker, softened)
    return text


def _model_markers(model: object) -> tuple[str, ...]:
    """Reserved strings a chat model publishes (``chat_format.reserved`` of the MLX model)."""
    reserved = getattr(getattr(model, "chat_format", None), "reserved", ())
    if isinstance(reserved, tuple | list) and all(isinstance(m, str) for m in reserved):
        return tuple(reserved)
    return ()


def clean_output(text: str) -> str:
    """Drop reasoning blocks and a leading "Summary:" label; collapse blank lines."""
    text = _THINK.sub("", text).strip()
    text = _LABEL.sub("", text).strip()
    return re.sub(r"\n{3,}", "\n\n", text)


class ChatSummarizer:
    """Summaries from a chat model, greedy, with per-level templates.

    ``max_input_tokens`` caps a single prompt (default: 4096, about an 8k window minus the
    answer); longer inputs are split and summarised in pieces, never truncated.
    """

    def __init__(
        self,
        model: ChatModel,
        quantization: str = "",
        max_input_tokens: int = 4096,
        cancel: CancelToken | None = None,
    ) -> None:
        if max_input_tokens < 256:
            raise SummarizerError(f"max_input_tokens must be >= 256, got {max_input_tokens}.")
        self._model = model
        self._quantization = quantization
        self._max_input = max_input_tokens
        self._cancel = cancel
        self._markers = _model_markers(model)
        self.calls = 0

    @property
    def summarizer_id(self) -> str:
        q = f"@{self._quantization}" if self._quantization else ""
        return f"chat:{self._model.model_id}{q}"

    @property
    def prompt_digest(self) -> str:
        return prompt_digest(SYSTEM_PROMPT, LEAF_TEMPLATE, ROLLUP_TEMPLATE)

    def count_tokens(self, text: str) -> int:
        return self._model.count_tokens(text)

    def _ask(self, prompt: str, budget: int) -> str:
        """One greedy call. Markers are defanged on the way in (documents may quote them) and
        on the way out (a summary must never carry structure into a later prompt)."""
        messages = [
            ChatMessage(role="system", content=SYSTEM_PROMPT),
            ChatMessage(role="user", content=defang(prompt, self._markers)),
        ]
        self.calls += 1
        response = self._model.chat(
            messages, max_tokens=int(budget * 1.6) + 16, cancel=self._cancel
        )
        text = defang(clean_output(response.text), self._markers)
        if not text:
            raise SummarizerError(
                f"{self._model.model_id} returned an empty summary; the node was not updated."
            )
        return text

    def _leaf_prompt(self, request: SummaryInput, text: str) -> str:
        return LEAF_TEMPLATE.format(what=_what(request), budget=request.budget, text=text)

    def _rollup_prompt(self, request: SummaryInput, children: Sequence[ChildDigest]) -> str:
        body = "\n".join(f"- {c.summary.strip()}" for c in children)
        return ROLLUP_TEMPLATE.format(what=_what(request), budget=request.budget, children=body)

    def _split_text(self, text: str) -> list[str]:
        """Pieces of ``text`` that each fit the window, cut at paragraph, line or word ends."""
        limit = self._max_input - 200
        pieces: list[str] = []
        current: list[str] = []
        for word in re.split(r"(\s+)", text):
            current.append(word)
            if len(current) % 64 == 0 and self.count_tokens("".join(current)) > limit:
                pieces.append("".join(current[:-64]))
                current = current[-64:]
        if current:
            pieces.append("".join(current))
        return [p for p in (x.strip() for x in pieces) if p]

    def summarize(self, request: SummaryInput) -> str:
        if request.level == 0:
            prompt = self._leaf_prompt(request, request.raw)
            if self.count_tokens(prompt) <= self._max_input:
                return self._ask(prompt, request.budget)
            parts = [
                ChildDigest(
                    id=f"part-{i}",
                    kind="part",
                    summary=self._ask(self._leaf_prompt(request, piece), request.budget),
                )
                for i, piece in enumerate(self._split_text(request.raw))
            ]
            return self._combine(request, parts)
        return self._combine(request, list(request.children))

    def _combine(self, request: SummaryInput, children: list[ChildDigest]) -> str:
        prompt = self._rollup_prompt(request, children)
        if self.count_tokens(prompt) <= self._max_input or len(children) <= 1:
            if len(children) == 1 and self.count_tokens(prompt) > self._max_input:
                raise SummarizerError(
                    f"One child summary alone exceeds max_input_tokens={self._max_input}."
                )
            return self._ask(prompt, request.budget)
        half = len(children) // 2
        left = self._combine(request, children[:half])
        right = self._combine(request, children[half:])
        return self._combine(
            request,
            [
                ChildDigest(id="a", kind="part", summary=left),
                ChildDigest(id="b", kind="part", summary=right),
            ],
        )
