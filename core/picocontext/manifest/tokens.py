"""Pluggable token counting for manifests and the runtime.

Offline builds use a 4-characters-per-token heuristic; a runtime next to a real model should
count with that model's tokenizer (:class:`ChatModelCounter`). Every counter has a ``name``
that a manifest records in ``source.tokenizer``, so a reader knows what its costs mean.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from picocontext.backend import ChatModel

HEURISTIC_NAME = "heuristic:4chars"


@runtime_checkable
class TextCounter(Protocol):
    """Counts the tokens of one piece of text."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...


class HeuristicCounter:
    """ceil(len/4), at least 1 for non-empty text: the peer's estimate, made explicit."""

    @property
    def name(self) -> str:
        return HEURISTIC_NAME

    def count(self, text: str) -> int:
        if not text:
            return 0
        return max(1, -(-len(text) // 4))


class ChatModelCounter:
    """Counts with the tokenizer of the model in use (its ``count_tokens``), memoized because
    the runtime re-counts the same descriptor strings often."""

    def __init__(self, model: ChatModel, cache_size: int = 65536) -> None:
        self._model = model
        self._cache: dict[str, int] = {}
        self._cache_size = cache_size

    @property
    def name(self) -> str:
        return f"model:{self._model.model_id}"

    def count(self, text: str) -> int:
        if not text:
            return 0
        hit = self._cache.get(text)
        if hit is not None:
            return hit
        n = self._model.count_tokens(text)
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        self._cache[text] = n
        return n
