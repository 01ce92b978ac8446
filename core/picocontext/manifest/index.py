"""The descriptor index: BM25 over every node's descriptor, scored by subtree.

A manifest already carries a descriptor (title, what, when, keywords) for every node, leaves
included, and the runtime holds the whole manifest locally. :class:`DescriptorIndex` is a
BM25 index over those descriptors -- never over leaf payloads, which the model has not
opened -- and gives every node a *subtree score*: the best leaf score below it plus a share of
the node's own line. A branch whose own line says little ("coreutils") but which holds the
page that answers the query then ranks where it belongs.

It serves two readers: the subtree navigators (:mod:`picocontext.manifest.subtree`) and the
runtime's built-in ``search`` (:class:`DescriptorSearch`), so a search ranks a leaf by its
own line *and* the branch lines above it, the way the tree routes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from picocontext.manifest.model import Manifest, Node
from picocontext.manifest.text import FIELD_WEIGHTS, terms
from picocontext.recent import RecentByIdentity

K1 = 1.2
B = 0.75
OWN_SHARE = 0.3
EXPANSION_WEIGHT = 0.5  # an expansion word counts half a word the user typed

_Key = tuple[tuple[tuple[str, float], ...], frozenset[str]]


def query_weights(query: str, expansion: str = "") -> dict[str, float]:
    """The query's terms at weight 1 and the expansion's other terms at
    :data:`EXPANSION_WEIGHT`: the user's own words stay the strongest evidence."""
    q = dict.fromkeys(terms(query), 1.0)
    for t in terms(expansion):
        q.setdefault(t, EXPANSION_WEIGHT)
    return q


def _weighted_bag(node: Node) -> dict[str, float]:
    """term -> field-weighted frequency over the descriptor fields of one node."""
    fields: dict[str, str | Iterable[str]] = {
        "title": node.title or "",
        "what": node.what,
        "when": node.when,
        "keywords": node.keywords or (),
    }
    bag: dict[str, float] = {}
    for name, value in fields.items():
        text = value if isinstance(value, str) else " ".join(value)
        w = FIELD_WEIGHTS[name]
        for t in terms(text):
            bag[t] = bag.get(t, 0.0) + w
    return bag


# The indexes of the last few manifests, by identity (see DescriptorIndex.of).
RECENT_INDEXES = 4
_RECENT: RecentByIdentity[Manifest, DescriptorIndex] = RecentByIdentity(RECENT_INDEXES)


class DescriptorIndex:
    """BM25 over every node's descriptor, IDF over the leaves; subtree scores by query."""

    @classmethod
    def of(cls, manifest: Manifest) -> DescriptorIndex:
        """The index of ``manifest``, shared with the last few callers that indexed the same
        manifest object: a policy that reuses one compiled archive for every question of a
        conversation would otherwise re-index (and re-stem) every descriptor per question."""
        index = _RECENT.get(manifest)
        if index is None:
            index = cls(manifest)
            _RECENT.put(manifest, index)
        return index

    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self._bags = {nid: _weighted_bag(n) for nid, n in manifest.nodes.items()}
        leaves = manifest.leaf_ids
        df: dict[str, int] = {}
        for nid in leaves:
            for t in self._bags[nid]:
                df[t] = df.get(t, 0) + 1
        n = max(len(leaves), 1)
        self._idf = {t: math.log(1.0 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
        self._avg = sum(sum(self._bags[i].values()) for i in leaves) / n if leaves else 1.0
        self._order = self._post_order()
        self._cache: tuple[_Key, dict[str, float]] | None = None

    def _post_order(self) -> list[str]:
        out: list[str] = []
        stack: list[tuple[str, bool]] = [(self.manifest.root_id, False)]
        while stack:
            nid, done = stack.pop()
            if done:
                out.append(nid)
                continue
            stack.append((nid, True))
            stack.extend((c, False) for c in self.manifest.children_of(nid))
        return out

    def own_score(self, q: Mapping[str, float], node_id: str) -> float:
        """BM25 of one node's descriptor for weighted query terms."""
        bag = self._bags.get(node_id)
        if not bag:
            return 0.0
        norm = K1 * (1 - B + B * sum(bag.values()) / (self._avg or 1.0))
        total = 0.0
        for t, weight in q.items():
            tf = bag.get(t)
            if tf:
                total += weight * self._idf.get(t, 0.0) * tf * (K1 + 1) / (tf + norm)
        return total

    def scores(
        self, query: str | Mapping[str, float], skip: frozenset[str] = frozenset()
    ) -> dict[str, float]:
        """node id -> subtree score. A leaf's *path score* is its own BM25 plus a share of the
        BM25 of every branch line above it; a node scores the best path score below it. So
        the best child of a node scores exactly what the node does, and best-first descends
        without wandering back up. Leaves in ``skip`` (already read) count for nothing.
        ``query`` is text, or weighted terms (:func:`query_weights`). Cached for the last
        (query, skip): a navigator asks once per step."""
        q = dict.fromkeys(terms(query), 1.0) if isinstance(query, str) else dict(query)
        key = (tuple(sorted(q.items())), skip)
        cached = self._cache  # read once: an index is shared between threads (see of())
        if cached is not None and cached[0] == key:
            return cached[1]
        above: dict[str, float] = {self.manifest.root_id: 0.0}
        for nid in reversed(self._order):  # parents before children
            kids = self.manifest.children_of(nid)
            for c in kids:
                share = 0.0 if self.manifest.children_of(c) == () else OWN_SHARE
                above[c] = above[nid] + share * self.own_score(q, c)
        out: dict[str, float] = {}
        for nid in self._order:  # children before parents
            kids = self.manifest.children_of(nid)
            if kids:
                out[nid] = max(out.get(c, 0.0) for c in kids)
            elif nid in skip:
                out[nid] = 0.0
            else:
                own = self.own_score(q, nid)
                out[nid] = above.get(nid, 0.0) + own if own > 0 else 0.0
        self._cache = (key, out)
        return out

    def best_leaf(
        self, query: str | Mapping[str, float], skip: frozenset[str] = frozenset()
    ) -> str | None:
        s = self.scores(query, skip)
        ranked = sorted(self.manifest.leaf_ids, key=lambda i: (-s.get(i, 0.0), i))
        return ranked[0] if ranked and s.get(ranked[0], 0.0) > 0 else None

    def document(self, leaf: str) -> str:
        """The document ``leaf`` is a page of (its parent, for ids ``<doc>~pN``: the build's
        paging), else ``leaf`` itself."""
        chain = self.manifest.ancestors(leaf)
        doc = chain[-1] if chain else ""
        if doc and leaf.startswith(doc.rstrip("/") + "~p"):
            return doc
        return leaf

    def parts(self, leaf: str) -> tuple[str, ...]:
        """Every page of the document ``leaf`` is a page of, or just ``leaf``: a document that
        was read and was not the answer is not the answer on its next page either."""
        doc = self.document(leaf)
        return self.manifest.children_of(doc) if doc != leaf else (leaf,)

    def is_under(self, node_id: str, branch: str) -> bool:
        return branch in self.manifest.ancestors(node_id)


class DescriptorSearch:
    """The runtime's default search backend: leaves ranked by their path score in a
    :class:`DescriptorIndex` (own descriptor plus a share of every branch line above), one
    hit per document (a paged document's best page stands for it).

    Measured against the older field-weighted IDF over single lines (:class:`KeywordSearch
    <picocontext.manifest.frontier.KeywordSearch>`) on the held-out corpora of
    ``scripts/bench.sh navigation`` (docs/build.md): the branch lines carry words a leaf's own
    line lacks ("coreutils" pages, "git" pages), which the single-line ranking ignored."""

    def __init__(self, manifest: Manifest) -> None:
        self.index = DescriptorIndex(manifest)

    def search(self, query: str, k: int) -> list[str]:
        s = self.index.scores(query_weights(query))
        manifest = self.index.manifest
        ranked = sorted(
            (i for i in manifest.leaf_ids if s.get(i, 0.0) > 0), key=lambda i: (-s[i], i)
        )
        hits: list[str] = []
        seen: set[str] = set()
        for leaf in ranked:
            doc = self.index.document(leaf)
            if doc in seen:
                continue
            seen.add(doc)
            hits.append(leaf)
            if len(hits) >= k:
                break
        return hits
