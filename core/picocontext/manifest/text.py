"""Lexical matching for the keyword navigator and the built-in search: tokens, a small
suffix stemmer, filler-word removal, and field-weighted IDF scoring.

It is deliberately model-free (an offline baseline), but unlike the peer it stems ("draft"
matches "Drafting"), ignores filler on both sides ("about", "consult", "use"), reads
``keywords`` and weights fields by how much they say about a node.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping

_WORD = re.compile(r"[a-z0-9]+")

STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "anything",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "consult",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "done",
        "during",
        "each",
        "either",
        "etc",
        "every",
        "everything",
        "few",
        "for",
        "from",
        "further",
        "general",
        "generic",
        "get",
        "gets",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "involves",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "let",
        "like",
        "may",
        "me",
        "misc",
        "miscellaneous",
        "more",
        "most",
        "much",
        "must",
        "my",
        "need",
        "needs",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "one",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "out",
        "over",
        "own",
        "per",
        "related",
        "relevant",
        "same",
        "several",
        "she",
        "should",
        "so",
        "some",
        "stuff",
        "such",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "things",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "upon",
        "us",
        "use",
        "used",
        "uses",
        "using",
        "various",
        "very",
        "via",
        "want",
        "wanted",
        "wants",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "within",
        "without",
        "would",
        "you",
        "your",
        "yours",
        "task",
        "tasks",
        "user",
        "users",
    ]
)

FIELD_WEIGHTS: Mapping[str, float] = {
    "title": 3.0,
    "keywords": 2.5,
    "what": 2.0,
    "when": 1.5,
}


@functools.lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """A light suffix stripper: enough to fold plurals, -ing/-ed/-ion/-ly/-ment and a final
    -e, so inflections of one word meet. Not Porter; predictable and fast. Memoized: an
    index over a conversation stems the same few thousand words hundreds of thousands of
    times."""
    w = word
    if len(w) <= 3 or w.isdigit():
        return w
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    for suffix in ("ingly", "ing", "edly", "ed", "ment", "ly", "er"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)]
            break
    else:
        if w.endswith(("tion", "sion")) and len(w) > 6:
            w = w[:-3]
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz" and not w[-1].isdigit():
        w = w[:-1]
    if w.endswith("e") and len(w) > 3:
        w = w[:-1]
    return w


def terms(text: str) -> list[str]:
    """Stemmed content words of ``text`` in order (filler and 1-char tokens removed)."""
    out = []
    for tok in _WORD.findall(text.lower()):
        if len(tok) < 2 or tok in STOPWORDS:
            continue
        out.append(stem(tok))
    return out


def field_terms(fields: Mapping[str, str | Iterable[str]]) -> dict[str, float]:
    """term -> best field weight in which it occurs."""
    best: dict[str, float] = {}
    for name, value in fields.items():
        weight = FIELD_WEIGHTS.get(name, 1.0)
        text = value if isinstance(value, str) else " ".join(value)
        for t in terms(text):
            if best.get(t, 0.0) < weight:
                best[t] = weight
    return best


class IdfTable:
    """Inverse document frequency over a set of documents (node descriptors)."""

    def __init__(self, documents: Iterable[Iterable[str]]) -> None:
        df: dict[str, int] = {}
        n = 0
        for doc in documents:
            n += 1
            for t in set(doc):
                df[t] = df.get(t, 0) + 1
        self._n = max(n, 1)
        self._df = df

    def idf(self, term: str) -> float:
        d = self._df.get(term, 0)
        return math.log(1.0 + (self._n - d + 0.5) / (d + 0.5))


def score(query_terms: Iterable[str], weighted: Mapping[str, float], idf: IdfTable) -> float:
    """Sum over distinct query terms of IDF x the weight of the best field containing it."""
    return sum(idf.idf(q) * weighted[q] for q in set(query_terms) if q in weighted)
