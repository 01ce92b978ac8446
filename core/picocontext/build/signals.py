"""Model-free term statistics over a corpus: TF-IDF vectors per node, surface forms for
stems, and an IDF snapshot that incremental builds can reuse.

Terms come from :func:`picocontext.manifest.text.terms` (the navigator's own stemmer and
filler list), so what the offline engine calls salient is exactly what a keyword reader can
match on.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import weakref
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import lru_cache

from picocontext.build.ir import SourceNode
from picocontext.manifest.text import STOPWORDS, stem

Vector = dict[str, float]

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*|[0-9]+")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
TOP_TERMS = 48
# A few words that are common in technical prose but say nothing about what a node is.
EXTRA_FILLER = frozenset(
    [
        "return",
        "returns",
        "returned",
        "value",
        "values",
        "default",
        "true",
        "false",
        "none",
        "object",
        "objects",
        "argument",
        "arguments",
        "function",
        "functions",
        "method",
        "methods",
        "class",
        "instance",
        "given",
        "specified",
        "optional",
        "also",
        "may",
        "must",
        "will",
        "first",
        "second",
        "new",
        "see",
        "note",
        "following",
        "example",
        "examples",
        "called",
        "call",
        "calls",
        "set",
        "sets",
        "string",
        "strings",
        "number",
        "int",
        "str",
        "bool",
        "type",
        "types",
        "raise",
        "raised",
        "raises",
        "error",
        "errors",
        "otherwise",
        "whether",
        "e.g",
        "i.e",
        "ie",
        "eg",
        "def",
        "self",
        "cls",
        "args",
        "kwargs",
    ]
)


@lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    return stem(word)


def words(text: str) -> list[tuple[str, str]]:
    """(stem, surface) pairs: camelCase and snake_case split, filler dropped."""
    out: list[tuple[str, str]] = []
    for raw in _WORD.findall(text):
        for part in _CAMEL.sub(" ", raw).split():
            low = part.lower()
            if len(low) < 3 or low in STOPWORDS or low in EXTRA_FILLER or low.isdigit():
                continue
            out.append((_stem(low), low))
    return out


# JSON-schema structure words: in a tool schema they say nothing about the tool.
SCHEMA_WORDS = frozenset(
    [
        "type",
        "object",
        "properties",
        "required",
        "parameters",
        "description",
        "name",
        "items",
        "enum",
        "array",
        "string",
        "integer",
        "number",
        "boolean",
        "null",
        "additionalproperties",
        "default",
        "function",
        "minimum",
        "maximum",
        "format",
        "pattern",
        "title",
    ]
)


def node_text(node: SourceNode, content_chars: int = 6000) -> str:
    """What a node is about for term statistics: title and keywords weigh more (repeated).
    In JSON content the schema's structure words are dropped, property names kept."""
    head = " ".join([node.title] * 3 + node.keywords * 2 + [node.hint] * 2)
    body = node.content[:content_chars]
    if node.format == "json":
        body = " ".join(
            w for w in re.split(r"[^A-Za-z0-9_]+", body) if w.lower() not in SCHEMA_WORDS
        )
    return f"{head} {body}"


def cosine(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    if len(a) > len(b):
        a, b = b, a
    dot = sum(w * b.get(t, 0.0) for t, w in a.items())
    if dot <= 0.0:
        return 0.0
    na = math.sqrt(sum(w * w for w in a.values()))
    nb = math.sqrt(sum(w * w for w in b.values()))
    return dot / (na * nb) if na and nb else 0.0


def dot(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Cosine of two vectors that are already unit length (everything :func:`normalize`
    returns)."""
    if len(a) > len(b):
        a, b = b, a
    return sum(w * b.get(t, 0.0) for t, w in a.items())


def normalize(vec: Mapping[str, float], top: int = TOP_TERMS) -> Vector:
    items = sorted(vec.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    norm = math.sqrt(sum(w * w for _, w in items))
    return {t: w / norm for t, w in items} if norm else {}


class IdfSnapshot:
    """Document frequencies over the leaves of one corpus. Frozen once built: an incremental
    build reuses the prior snapshot, so one changed file does not shift every descriptor."""

    def __init__(self, df: Mapping[str, int], n_docs: int) -> None:
        self.df = dict(df)
        self.n_docs = max(n_docs, 1)
        blob = json.dumps([self.n_docs, sorted(self.df.items())], separators=(",", ":"))
        self.fingerprint = hashlib.sha256(blob.encode()).hexdigest()[:16]

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> IdfSnapshot:
        df: Counter[str] = Counter()
        n = 0
        for text in texts:
            n += 1
            df.update({s for s, _ in words(text)})
        return cls(df, n)

    def idf(self, term: str) -> float:
        d = self.df.get(term, 0)
        return math.log((1.0 + self.n_docs) / (1.0 + d)) + 1.0

    def to_json(self) -> dict[str, object]:
        return {"n_docs": self.n_docs, "df": self.df}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> IdfSnapshot:
        df = data.get("df")
        n = data.get("n_docs")
        if not isinstance(df, dict) or not isinstance(n, int):
            raise ValueError("bad IDF snapshot")
        return cls({str(k): int(v) for k, v in df.items()}, n)


class Signals:
    """TF-IDF vectors for leaves, summed (and renormalized) for branches, plus the surface word
    of each stem as it appears *in that node's own text* (so a descriptor depends only on its
    subtree and the IDF snapshot -- what the incremental key covers)."""

    def __init__(self, idf: IdfSnapshot) -> None:
        self.idf = idf
        self._info: weakref.WeakKeyDictionary[SourceNode, tuple[Vector, dict[str, str]]] = (
            weakref.WeakKeyDictionary()
        )
        self._own_cache: dict[tuple[str, str], tuple[Vector, dict[str, str]]] = {}
        self._text_forms: dict[str, Counter[tuple[str, str]]] = {}
        self._leaf_info: dict[str, tuple[Vector, dict[str, str]]] = {}

    def _counts(self, node: SourceNode) -> Counter[tuple[str, str]]:
        text = node_text(node)
        hit = self._text_forms.get(text)
        if hit is None:
            hit = Counter(words(text))
            self._text_forms[text] = hit
        return hit

    @staticmethod
    def _surfaces(forms: Counter[tuple[str, str]]) -> dict[str, str]:
        best: dict[str, tuple[int, str]] = {}
        for (s, surface), c in forms.items():
            cur = best.get(s)
            if cur is None or (c, -len(surface), surface) > (cur[0], -len(cur[1]), cur[1]):
                best[s] = (c, surface)
        return {s: v[1] for s, v in best.items()}

    def info(self, node: SourceNode) -> tuple[Vector, dict[str, str]]:
        hit = self._info.get(node)
        if hit is not None:
            return hit
        if node.is_leaf:
            cached = self._leaf_info.get(node_text(node))
            if cached is not None:
                self._info[node] = cached
                return cached
            forms = self._counts(node)
            counts: Counter[str] = Counter()
            for (s, _), c in forms.items():
                counts[s] += c
            raw = {t: (1.0 + math.log(c)) * self.idf.idf(t) for t, c in counts.items()}
            out = (normalize(raw), self._surfaces(forms))
            self._leaf_info[node_text(node)] = out
        else:
            acc: dict[str, float] = {}
            surf: dict[str, str] = {}
            for child in node.children:
                vec, child_surf = self.info(child)
                for t, w in vec.items():
                    acc[t] = acc.get(t, 0.0) + w
                    surf.setdefault(t, child_surf.get(t, t))
            own_vec, own_surf = self._own(node.title, node.hint)
            for t, w in own_vec.items():
                acc[t] = acc.get(t, 0.0) + 0.5 * w
                surf[t] = own_surf.get(t, t)
            vec = normalize(acc, TOP_TERMS * 2)
            out = (vec, {t: surf.get(t, t) for t in vec})
        self._info[node] = out
        return out

    def _own(self, title: str, hint: str) -> tuple[Vector, dict[str, str]]:
        """A branch's own words (title and hint), cached by text: shaping copies branches."""
        key = (title, hint)
        hit = self._own_cache.get(key)
        if hit is None:
            holder = SourceNode(id="", title=title, hint=hint)
            hit = self.info(holder)
            self._own_cache[key] = hit
        return hit

    def vector(self, node: SourceNode) -> Vector:
        return self.info(node)[0]

    def surface(self, term: str, node: SourceNode | None = None) -> str:
        if node is not None:
            return self.info(node)[1].get(term, term)
        return term
