"""Embedding-ranked routing: a navigator that also ranks leaves by meaning, not only words.

BM25 over descriptors (:class:`~picocontext.manifest.index.DescriptorIndex`) can only match the
words a user typed with the words a descriptor uses. A small code model's hidden states place
"make a picture smaller" near "resize an image" without sharing a word. The ``subtree-embed``
navigator ranks every leaf twice -- by its BM25 path score and by the cosine between the
query's embedding and the embedding of the leaf's *descriptor* (title, what, when, keywords;
never a payload the model has not opened) -- and fuses the two rankings with reciprocal-rank
fusion (RRF, Cormack et al. 2009): ``1 / (RRF_K + rank)`` summed over both lists, with the
published constant ``RRF_K = 60``. RRF is chosen because the two scores live on unrelated
scales that move with every query (BM25 grows with query length, cosines of mean-pooled
hidden states sit in a narrow band), so a weighted sum would need a normalisation and a weight
tuned on some corpus; ranks need neither. A leaf BM25 does not score at all gets only its
cosine share.

Cosines are taken after subtracting the mean leaf vector of the manifest: mean-pooled hidden
states of a causal model share one dominant direction, which otherwise makes every pair look
alike. That rule is fixed, not tuned per corpus.

A branch scores the best fused score below it, so the walk is the one ``subtree-scan`` makes:
one ``search`` per query (the runtime's search, charged), then it opens the best visible entry,
walking down through branches when the best leaf is not visible, and closes a leaf it read that
was not it. Every line shown goes through the session verbs and is charged there; the
embeddings are local data, like the descriptor index.

Embeddings are computed once per text and kept by :class:`CachedEmbedder` in the user cache
(key: model id and a hash of the text), so a rerun asks the model nothing.

Measured with ``scripts/bench.sh navigation --corpus NAME --embed-model qwen2.5-coder-0.5b``
(first run, 2026-12-01): it does *not* beat ``subtree-scan``. Success @4k: pytest-docs 40 %
(scan 68 %), stdlib 80 % (scan 94 %); its first hop is more often right on pytest-docs (90 %
against 79 %), but the cosine ranks of mean-pooled hidden states reorder BM25's good top hits
more often than they rescue a query BM25 misses. It stays a named navigator so the eval shows
that.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from picocontext.manifest.errors import NavigatorError
from picocontext.manifest.model import Manifest, Node
from picocontext.manifest.subtree import SubtreeNavigator

RRF_K = 60
Vectors = npt.NDArray[np.float32]
EmbedFn = Callable[[Sequence[str]], npt.NDArray[np.floating]]


class EmbeddingError(NavigatorError):
    """An embedder returned something that is not one vector per text."""


def descriptor_text(node: Node) -> str:
    """What a leaf says about itself, and only that: title, what, when, keywords."""
    parts = [node.title or "", node.what, node.when]
    if node.keywords:
        parts.append("keywords: " + ", ".join(node.keywords))
    return ". ".join(p.strip() for p in parts if p and p.strip())


def checked(texts: Sequence[str], out: object) -> Vectors:
    """``out`` as float32 rows, one per text, every row finite; else :class:`EmbeddingError`."""
    arr = np.asarray(out, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != len(texts) or arr.shape[1] == 0:
        raise EmbeddingError(
            f"the embedder returned shape {arr.shape} for {len(texts)} texts; it must return "
            f"one row per text, shape ({len(texts)}, dims)"
        )
    if not np.isfinite(arr).all():
        raise EmbeddingError("the embedder returned NaN or infinite values; check the model")
    return arr


def mean_pool(states: Sequence[npt.NDArray[np.floating]], dims: int) -> Vectors:
    """One L2-normalised mean over the token rows of each text (an empty text is a zero row)."""
    out = np.zeros((len(states), dims), dtype=np.float32)
    for row, s in enumerate(states):
        arr = np.asarray(s, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] != dims:
            raise EmbeddingError(f"hidden states of shape {arr.shape}; expected (tokens, {dims})")
        if arr.shape[0]:
            pooled = arr.mean(axis=0)
            norm = float(np.linalg.norm(pooled))
            out[row] = (pooled / norm if norm > 0 else pooled).astype(np.float32)
    return out


def embeddings_path(model_id: str) -> Path:
    """The user-cache file that holds ``model_id``'s descriptor embeddings."""
    from platformdirs import user_cache_dir

    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in model_id)
    return Path(user_cache_dir("picocontext", appauthor=False)) / "embeddings" / f"{safe}.npz"


class CachedEmbedder:
    """``embed(texts)`` through ``fn`` for the texts not embedded before (by ``model_id`` and
    a hash of the text); ``save()`` writes the cache to ``path`` (default
    :func:`embeddings_path`). ``calls``, ``embedded``, ``cached`` and ``seconds`` count this
    object's work: model calls, texts sent, texts served from the cache, model wall time."""

    def __init__(self, fn: EmbedFn, *, model_id: str, path: Path | None = None) -> None:
        self.fn = fn
        self.model_id = model_id
        self.path = path if path is not None else embeddings_path(model_id)
        self.vectors: dict[str, Vectors] = self.load(self.path)
        self.calls = self.embedded = self.cached = 0
        self.seconds = 0.0

    def key(self, text: str) -> str:
        blob = f"{self.model_id}\x1f{text}".encode()
        return hashlib.sha256(blob).hexdigest()[:32]

    def __call__(self, texts: Sequence[str]) -> Vectors:
        keys = [self.key(t) for t in texts]
        todo = list(
            dict.fromkeys(t for t, k in zip(texts, keys, strict=True) if k not in self.vectors)
        )
        self.cached += len(texts) - len(todo)
        if todo:
            started = time.perf_counter()
            fresh = checked(todo, self.fn(todo))
            self.seconds += time.perf_counter() - started
            self.calls += 1
            self.embedded += len(todo)
            self.vectors.update((self.key(t), fresh[i]) for i, t in enumerate(todo))
        rows = [self.vectors[k] for k in keys]
        if len({r.shape for r in rows}) > 1:
            raise EmbeddingError(
                f"cached embeddings for {self.model_id} have mixed widths; delete {self.path}"
            )
        return np.stack(rows) if rows else np.zeros((0, 0), dtype=np.float32)

    def save(self) -> None:
        """Write the cache atomically (a reader never sees half a file): the keys and one
        matrix of their vectors, merged with what the file holds now (another run of the
        same model may have saved meanwhile)."""
        self.vectors = {**self.load(self.path), **self.vectors}
        keys = list(self.vectors)
        if len({self.vectors[k].shape for k in keys}) > 1:
            raise EmbeddingError(f"embeddings of mixed widths for {self.model_id}; not saved")
        dims = self.vectors[keys[0]].shape[0] if keys else 0
        matrix = np.stack([self.vectors[k] for k in keys]) if keys else np.zeros((0, dims))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".npz")
        os.close(fd)
        np.savez(tmp, keys=np.array(keys, dtype=str), vectors=matrix.astype(np.float32))
        os.replace(tmp, self.path)

    @staticmethod
    def load(path: Path) -> dict[str, Vectors]:
        """A saved cache, or an empty one when the file is missing or unreadable."""
        try:
            with np.load(path, allow_pickle=False) as data:
                keys, matrix = data["keys"], np.asarray(data["vectors"], dtype=np.float32)
        except (OSError, ValueError, KeyError):
            return {}
        if matrix.ndim != 2 or len(keys) != matrix.shape[0]:
            return {}
        return {str(k): matrix[i] for i, k in enumerate(keys)}


def rrf(*rankings: Sequence[str]) -> dict[str, float]:
    """Reciprocal-rank fusion: each id scores the sum of ``1 / (RRF_K + rank)``, rank from 1."""
    out: dict[str, float] = {}
    for ranking in rankings:
        for rank, nid in enumerate(ranking, start=1):
            out[nid] = out.get(nid, 0.0) + 1.0 / (RRF_K + rank)
    return out


class EmbedNavigator(SubtreeNavigator):
    """``subtree-scan`` whose leaf scores are the RRF of the BM25 path ranking and the
    descriptor-embedding cosine ranking; a branch scores the best fused leaf below it."""

    def __init__(self, embedder: EmbedFn) -> None:
        super().__init__(scan=True)
        self.name = "subtree-embed"
        self.embedder = embedder
        self._leaves: tuple[str, ...] = ()
        self._matrix: Vectors = np.zeros((0, 0), dtype=np.float32)
        self._mean: Vectors = np.zeros(0, dtype=np.float32)
        self._cosine: dict[str, float] = {}
        self._fused: tuple[tuple[str, frozenset[str]], dict[str, float]] | None = None

    def prepare(self, manifest: Manifest) -> None:
        super().prepare(manifest)
        self._leaves = tuple(manifest.leaf_ids)
        texts = [descriptor_text(manifest.get(i)) for i in self._leaves]
        raw = checked(texts, self.embedder(texts))
        self._mean = raw.mean(axis=0)
        self._matrix = _unit(raw - self._mean)
        self._cosine, self._fused = {}, None

    def _scores(self, skip: frozenset[str]) -> dict[str, float]:
        if self._fused is not None and self._fused[0] == (self._query, skip):
            return self._fused[1]
        if not self._cosine:
            self._cosine = self._cosines(self._query)
        bm25 = self.index.scores(self._weights, skip)
        live = [i for i in self._leaves if i not in skip]
        by_words = sorted((i for i in live if bm25.get(i, 0.0) > 0), key=lambda i: -bm25[i])
        by_meaning = sorted(live, key=lambda i: -self._cosine[i])
        leaf = rrf(by_words, by_meaning)
        out = dict.fromkeys(self.index.manifest.nodes, 0.0)
        for nid, s in leaf.items():
            out[nid] = s
            for a in self.index.manifest.ancestors(nid):
                out[a] = max(out.get(a, 0.0), s)
        self._fused = ((self._query, skip), out)
        return out

    def _new_query(self, query: str) -> None:
        super()._new_query(query)
        self._cosine, self._fused = {}, None

    def _cosines(self, query: str) -> dict[str, float]:
        q = checked([query], self.embedder([query]))
        if q.shape[1] != self._matrix.shape[1]:
            raise EmbeddingError(
                f"the query embedding has {q.shape[1]} dims, the descriptors "
                f"{self._matrix.shape[1]}; use one embedder for both"
            )
        sims = self._matrix @ _unit(q - self._mean)[0]
        return {nid: float(s) for nid, s in zip(self._leaves, sims, strict=True)}


def _unit(matrix: Vectors) -> Vectors:
    """Every row scaled to length 1 (a zero row stays zero)."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms > 0, norms, 1.0)).astype(np.float32)
