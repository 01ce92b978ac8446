"""BM25 over a history's texts: the stemmer, the memoized term lists, the index built once
per list of documents, scores for a query, and pseudo-relevance feedback terms.

Questions over one history (a conversation's every question, a run's every turn) score the
same documents again and again, so term lists are memoized per text and an index per
document list; both caches are bounded and shared across threads under a lock.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import numpy as np

TOKEN_CACHE = 50_000
FEEDBACK_DOCS = 5
_SUFFIXES = ("ies", "ing", "ed", "es", "s")


def stem(word: str) -> str:
    """Strip one common English suffix when at least three letters remain."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def _stem_all(words: list[str]) -> list[str]:
    return [stem(w) for w in words]


_TOKEN_CACHE: dict[str, tuple[str, ...]] = {}
_TOKEN_LOCK = threading.Lock()


def stemmed_terms(texts: Sequence[str]) -> list[list[str]]:
    """Each text's stemmed terms. Memoized per text (up to :data:`TOKEN_CACHE` texts): every
    question over the same history indexes the same turns again, and tokenizing them was
    most of a question's cost."""
    import bm25s

    with _TOKEN_LOCK:
        found = {t: _TOKEN_CACHE[t] for t in texts if t in _TOKEN_CACHE}
    missing = [t for t in dict.fromkeys(texts) if t not in found]
    if missing:
        tokenized = bm25s.tokenize(
            missing, stopwords="en", stemmer=_stem_all, show_progress=False, return_ids=False
        )
        new = dict(zip(missing, (tuple(t) for t in tokenized), strict=True))
        found.update(new)
        with _TOKEN_LOCK:
            if len(_TOKEN_CACHE) + len(new) > TOKEN_CACHE:
                _TOKEN_CACHE.clear()
            _TOKEN_CACHE.update(new)
    return [list(found[t]) for t in texts]


class LexicalIndex:
    """BM25 over one list of documents, built once: every question over the same history
    ranks the same older turns, and building the index was most of a question's cost."""

    def __init__(self, documents: Sequence[str], k1: float, b: float) -> None:
        import bm25s

        self.tokens = stemmed_terms(documents)
        self.retriever = bm25s.BM25(k1=k1, b=b)
        self.retriever.index(self.tokens, show_progress=False)
        self.frequency: dict[str, int] = {}
        for doc in self.tokens:
            for term in set(doc):
                self.frequency[term] = self.frequency.get(term, 0) + 1

    def terms(self, query: str) -> list[str]:
        """The query's terms that occur in some document."""
        return [t for t in stemmed_terms([query])[0] if t in self.frequency]

    def scores(self, terms: Sequence[str]) -> np.ndarray:
        """BM25 score of every document for ``terms`` (zeros when there are none)."""
        if not terms:
            return np.zeros(len(self.tokens))
        return np.asarray(self.retriever.get_scores(list(terms)), dtype=float)


INDEX_CACHE = 8
_INDEX_CACHE: dict[tuple[object, ...], LexicalIndex] = {}
_INDEX_LOCK = threading.Lock()


def lexical_index(documents: Sequence[str], k1: float, b: float) -> LexicalIndex:
    """The :class:`LexicalIndex` of ``documents``, reused while the same documents are asked
    again (the last :data:`INDEX_CACHE` lists are kept)."""
    key = (k1, b, tuple(documents))
    with _INDEX_LOCK:
        found = _INDEX_CACHE.pop(key, None)
        if found is not None:
            _INDEX_CACHE[key] = found
            return found
    index = LexicalIndex(documents, k1, b)
    with _INDEX_LOCK:
        _INDEX_CACHE[key] = index
        while len(_INDEX_CACHE) > INDEX_CACHE:
            del _INDEX_CACHE[next(iter(_INDEX_CACHE))]
    return index


def bm25_scores(
    documents: Sequence[str],
    query: str,
    k1: float,
    b: float,
    expand: int = 0,
    expand_weight: float = 0.0,
    feedback_docs: int = FEEDBACK_DOCS,
) -> list[float]:
    """BM25 score of every document for ``query`` (0.0 where no query term occurs).

    ``expand`` > 0 adds pseudo-relevance feedback: the ``expand`` terms that weigh most (term
    frequency times inverse document frequency) in the ``feedback_docs`` best documents
    and are not in the query are scored as a second query, added at ``expand_weight``, so a
    turn that says what the best hits say in other words than the question still ranks."""
    if not documents:
        return []
    index = lexical_index(documents, k1, b)
    terms = index.terms(query)
    if not terms:
        return [0.0] * len(documents)
    scores = index.scores(terms)
    if expand <= 0 or expand_weight <= 0:
        return [float(s) for s in scores]
    extra = feedback_terms(index.tokens, scores, set(terms), expand, feedback_docs, index.frequency)
    if not extra:
        return [float(s) for s in scores]
    return [float(s) for s in scores + expand_weight * index.scores(extra)]


def feedback_terms(
    tokens: Sequence[Sequence[str]],
    scores: Sequence[float] | np.ndarray,
    known: set[str],
    count: int,
    docs: int = FEEDBACK_DOCS,
    frequency: dict[str, int] | None = None,
) -> list[str]:
    """The ``count`` terms of the best-scoring documents that weigh most there (frequency in
    them times log inverse document frequency over all), leaving out ``known`` terms;
    ``frequency`` is each term's document frequency when the caller has it."""
    best = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: -scores[i])
    if frequency is None:
        frequency = {}
        for doc in tokens:
            for term in set(doc):
                frequency[term] = frequency.get(term, 0) + 1
    weight: dict[str, float] = {}
    total = len(tokens)
    for i in best[:docs]:
        for term in tokens[i]:
            if term not in known:
                weight[term] = weight.get(term, 0.0) + math.log(total / frequency[term])
    return sorted(weight, key=lambda t: (-weight[t], t))[:count]
