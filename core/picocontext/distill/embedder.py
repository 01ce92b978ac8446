"""The Embedder seam and two real embedders.

* :class:`LexicalEmbedder` — feature hashing of words and word bigrams into a signed,
  log-scaled, L2-normalised vector. No model, fast, deterministic; summaries that share
  vocabulary land on nearby SemHashes, which is all clustering and ``resolve`` need.
* :class:`ModelEmbedder` — mean-pooled hidden states of a local language model, through the
  small :class:`HiddenStateModel` protocol (the MLX model adapter provides it).
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from picocontext.distill.errors import EmbedderError

_WORD = re.compile(r"\w+", re.UNICODE)


@runtime_checkable
class Embedder(Protocol):
    @property
    def embedder_id(self) -> str: ...

    @property
    def dims(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One float32 row per text, shape (len(texts), dims)."""
        ...


def check_embeddings(
    embedder: Embedder, texts: Sequence[str], out: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """Reject embedders that return the wrong number or width of vectors."""
    arr = np.asarray(out, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != len(texts) or arr.shape[1] != embedder.dims:
        raise EmbedderError(
            f"Embedder {embedder.embedder_id} returned shape {arr.shape} for {len(texts)} "
            f"texts; expected ({len(texts)}, {embedder.dims})."
        )
    return arr


class LexicalEmbedder:
    """Hashing-trick bag of words + bigrams (crc32 buckets, sign from a second hash)."""

    def __init__(self, dims: int = 256, bigram_weight: float = 0.5) -> None:
        if dims < 8:
            raise EmbedderError(f"LexicalEmbedder needs dims >= 8, got {dims}.")
        self._dims = dims
        self._bigram_weight = bigram_weight

    @property
    def embedder_id(self) -> str:
        return f"lexical-crc32-v1:{self._dims}:{self._bigram_weight}"

    @property
    def dims(self) -> int:
        return self._dims

    def _features(self, text: str) -> dict[int, float]:
        words = [w.lower() for w in _WORD.findall(text)]
        feats: dict[int, float] = {}
        grams = [(w, 1.0) for w in words]
        grams += [(a + " " + b, self._bigram_weight) for a, b in itertools.pairwise(words)]
        for gram, weight in grams:
            code = zlib.crc32(gram.encode("utf-8"))
            index = code % self._dims
            sign = 1.0 if (code >> 31) & 1 == 0 else -1.0
            feats[index] = feats.get(index, 0.0) + sign * weight
        return feats

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(texts), self._dims), dtype=np.float32)
        for row, text in enumerate(texts):
            for index, value in self._features(text).items():
                out[row, index] = np.sign(value) * np.log1p(abs(value))
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
        return out


@runtime_checkable
class HiddenStateModel(Protocol):
    """A local model that can return its last hidden states for a text."""

    @property
    def model_id(self) -> str: ...

    @property
    def hidden_size(self) -> int: ...

    def hidden_states(self, text: str) -> npt.NDArray[np.floating]:
        """Shape (tokens, hidden_size)."""
        ...


class ModelEmbedder:
    """Mean-pooled, L2-normalised hidden states of a local model."""

    def __init__(self, model: HiddenStateModel) -> None:
        self._model = model

    @property
    def embedder_id(self) -> str:
        return f"mean-pool:{self._model.model_id}"

    @property
    def dims(self) -> int:
        return int(self._model.hidden_size)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for row, text in enumerate(texts):
            states = np.asarray(self._model.hidden_states(text), dtype=np.float64)
            if states.ndim != 2 or states.shape[1] != self.dims:
                raise EmbedderError(
                    f"{self._model.model_id} returned hidden states of shape {states.shape}; "
                    f"expected (tokens, {self.dims})."
                )
            if states.shape[0] == 0:
                continue
            pooled = states.mean(axis=0)
            norm = float(np.linalg.norm(pooled))
            out[row] = (pooled / norm if norm > 0 else pooled).astype(np.float32)
        return out
