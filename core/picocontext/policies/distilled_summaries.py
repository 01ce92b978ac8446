"""The summarizer a scope's distiller is opened with, wrapped for the distilled policy's turns:
cancellation checked before every call, summaries counted by level, leaf summaries extracted
when asked to, and an extract in place of a summary the model could not give.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from picocontext.backend import (
    ChatMessage,
    ChatModel,
    ModelResponse,
    ToolSpec,
)
from picocontext.cancel import CancelToken, check
from picocontext.distill.data import SummaryInput
from picocontext.distill.errors import SummarizerError
from picocontext.distill.ids import LEVEL_ENTITY
from picocontext.distill.summarizer import Summarizer
from picocontext.policies.distilled_history import first_words


class TurnSummarizer:
    """The summarizer a scope's distiller is opened with, for its whole life (so the distiller
    is never rewired). During a turn's sweep (:meth:`begin` .. :meth:`end`, under the scope's
    sweep lock) it checks that turn's cancellation before every call, counts summaries by
    level, extracts leaf summaries when asked to, and (if allowed) falls back to an extract when
    the model returns nothing usable, so a flaky small model never loses a leaf. Outside a
    turn (pending views written by a digest call) it is the policy's summarizer unchanged."""

    def __init__(self, inner: Summarizer, fallback: bool, extract_leaves: bool) -> None:
        self.inner = inner
        self.fallback = fallback
        self.extract_leaves = extract_leaves
        self.begin(None)
        self.end()

    def begin(self, cancel: CancelToken | None) -> None:
        """Start a turn's sweep: its cancel token, counts from zero."""
        self.cancel = cancel
        self.active = True
        self.leaf_summaries = 0
        self.digest_summaries = 0
        self.calls = 0
        self.extracted = 0
        self.fallbacks = 0

    def end(self) -> None:
        self.active = False
        self.cancel = None

    @property
    def summarizer_id(self) -> str:
        return self.inner.summarizer_id

    @property
    def prompt_digest(self) -> str:
        return self.inner.prompt_digest

    def summarize(self, request: SummaryInput) -> str:
        if not self.active:
            return self.inner.summarize(request)
        check(self.cancel)
        if request.level == LEVEL_ENTITY:
            self.leaf_summaries += 1
            if self.extract_leaves:
                self.extracted += 1
                return first_words(request.raw, request.budget) or "(empty)"
        else:
            self.digest_summaries += 1
        self.calls += 1
        try:
            return self.inner.summarize(request)
        except SummarizerError:
            if not self.fallback:
                raise
            self.fallbacks += 1
            source = request.raw or " ".join(c.summary for c in request.children)
            return first_words(source, request.budget) or "(empty)"


@dataclass(frozen=True)
class SummaryCounts:
    """What one turn's sweep asked of the summarizer (read under the sweep lock)."""

    calls: int
    leaf_summaries: int
    digest_summaries: int
    extracted: int
    fallbacks: int

    @classmethod
    def of(cls, wrapper: TurnSummarizer) -> SummaryCounts:
        return cls(
            wrapper.calls,
            wrapper.leaf_summaries,
            wrapper.digest_summaries,
            wrapper.extracted,
            wrapper.fallbacks,
        )


class TurnCancelChat:
    """A ChatModel that hands the current turn's cancel token to the wrapped model, so a
    cancelled turn stops a summary that is being generated."""

    def __init__(self, model: ChatModel, local: threading.local) -> None:
        self._model = model
        self._local = local

    @property
    def model_id(self) -> str:
        return self._model.model_id

    def count_tokens(self, text: str) -> int:
        return self._model.count_tokens(text)

    def chat(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        cancel: CancelToken | None = None,
    ) -> ModelResponse:
        token: CancelToken | None = cancel or getattr(self._local, "cancel", None)
        return self._model.chat(messages, max_tokens, tools, token)
