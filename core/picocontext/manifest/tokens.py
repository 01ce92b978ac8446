"""Pluggable token counting for manifests and the runtime.

Offline builds use a 4-characters-per-token heuristic; a runtime next to a real model should
count with that model's tokenizer (:class:`ChatModelCounter`). Every counter has a ``name``
that a manifest records in ``source.tokenizer``, so a reader knows what its costs mean.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

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


@runtime_checkable
class Tokenizes(Protocol):
    """Anything that counts a text's tokens with a real tokenizer (a chat model, a counter)."""

    def count_tokens(self, text: str) -> int: ...


class ChatModelCounter:
    """Counts with the tokenizer of the model in use (its ``count_tokens``), memoized because
    the runtime re-counts the same descriptor strings often. Non-empty text costs at least 1.

    The one tokenizer-backed text counter: anything with ``count_tokens`` will do; ``name``
    defaults to ``model:<model_id>`` (the object's ``model_id`` when it has one)."""

    def __init__(self, model: Tokenizes, cache_size: int = 65536, name: str | None = None) -> None:
        self._model = model
        self._cache: dict[str, int] = {}
        self._cache_size = cache_size
        ident = getattr(model, "model_id", None)
        self._name = name or f"model:{ident if isinstance(ident, str) else type(model).__name__}"

    @property
    def name(self) -> str:
        return self._name

    def count(self, text: str) -> int:
        if not text:
            return 0
        hit = self._cache.get(text)
        if hit is not None:
            return hit
        n = max(1, int(self._model.count_tokens(text)))
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        self._cache[text] = n
        return n
