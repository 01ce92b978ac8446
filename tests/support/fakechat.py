"""A deterministic ChatModel for manifest tests: whitespace words as tokens, replies from a
script (``STOP`` once it runs out), every prompt recorded; :class:`GrammarWordChat` also
takes a per-call grammar, like :meth:`picocontext.models.mlx_backend.MLXModel.chat`."""

from __future__ import annotations

from collections.abc import Sequence

from picocontext.backend import ChatMessage, ModelResponse, ToolSpec
from picocontext.cancel import CancelToken


class WordChat:
    def __init__(self, replies: Sequence[str] = (), model_id: str = "fake/words") -> None:
        self.replies = list(replies)
        self.prompts: list[list[ChatMessage]] = []
        self._model_id = model_id

    @property
    def model_id(self) -> str:
        return self._model_id

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def reply(self, messages: Sequence[ChatMessage]) -> ModelResponse:
        self.prompts.append(list(messages))
        return ModelResponse(text=self.replies.pop(0) if self.replies else "STOP")

    def chat(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        cancel: CancelToken | None = None,
    ) -> ModelResponse:
        return self.reply(messages)


class GrammarWordChat(WordChat):
    """Accepts ``grammar=`` and records each one (None for an unconstrained call)."""

    grammar_syntax = "lark"

    def __init__(self, replies: Sequence[str] = (), model_id: str = "fake-grammar") -> None:
        super().__init__(replies, model_id)
        self.grammars: list[str | None] = []

    def chat(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        cancel: CancelToken | None = None,
        *,
        grammar: str | None = None,
    ) -> ModelResponse:
        self.grammars.append(grammar)
        return self.reply(messages)
