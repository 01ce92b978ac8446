"""Subtree routing: navigators that score a branch by everything below it.

A manifest already carries a descriptor (title, what, when, keywords) for every node, leaves
included, and the runtime holds the whole manifest locally. :class:`DescriptorIndex` is a
BM25 index over those descriptors -- never over leaf payloads, which the model has not
opened -- and gives every node a *subtree score*: the best leaf score below it plus a share of
the node's own line. A branch whose own line says little ("coreutils") but which holds the
page that answers the query then ranks where it belongs.

Navigators built on it, each named so the eval shows the gain of each idea:

* ``subtree`` -- best-first over the frontier by subtree score;
* ``subtree-backout`` -- the same, and it closes an open branch whose subtree cannot beat
  the next choice before opening anything else (``close`` reclaims its budget, so a wrong
  turn costs one hop, not a resident reveal);
* ``subtree-lateral`` -- backs out too, and reaches the best leaf sideways when the format
  lets it: a visible node's see-also link to it (``related``), else one ``search`` that
  discloses the top hits (charged like any line), before walking down the tree.

Everything a navigator shows the model goes through the session verbs and is charged there;
the index itself is the runtime's local data, like the built-in search.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from picocontext.manifest.model import Manifest, Node
from picocontext.manifest.navigator import KeywordNavigator, NavAction, Navigator
from picocontext.manifest.runtime import FrontierEntry
from picocontext.manifest.text import FIELD_WEIGHTS, terms

K1 = 1.2
B = 0.75
OWN_SHARE = 0.3
EXPANSION_WEIGHT = 0.5  # an expansion word counts half a word the user typed
SCAN_K = 8  # search hits a scanning navigator discloses (about 35 tokens each)

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


class DescriptorIndex:
    """BM25 over every node's descriptor, IDF over the leaves; subtree scores by query."""

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
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
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

    def parts(self, leaf: str) -> tuple[str, ...]:
        """Every page of the document ``leaf`` is a page of (ids ``<doc>~pN``, the build's
        paging), or just ``leaf``: a document that was read and was not the answer is not
        the answer on its next page either."""
        chain = self.manifest.ancestors(leaf)
        doc = chain[-1] if chain else ""
        if doc and leaf.startswith(doc.rstrip("/") + "~p"):
            return self.manifest.children_of(doc)
        return (leaf,)

    def is_under(self, node_id: str, branch: str) -> bool:
        return branch in self.manifest.ancestors(node_id)


class SubtreeNavigator:
    """Best-first by subtree score. ``backout`` closes a leaf it read that did not end the
    walk (never reopening it) and open branches that cannot beat the next choice;
    ``lateral`` also tries see-also links and one search before walking down."""

    def __init__(
        self,
        *,
        backout: bool = False,
        lateral: bool = False,
        scan: bool = False,
        search_k: int | None = None,
        expander: Callable[[str], str] | None = None,
    ) -> None:
        self.scan = scan or expander is not None
        self.lateral = lateral or self.scan
        self.backout = backout or self.lateral
        self.search_k = search_k or (SCAN_K if self.scan else 5)
        self.expander = expander
        self.name = (
            "subtree-expand"
            if expander is not None
            else "subtree-scan"
            if self.scan
            else "subtree-lateral"
            if lateral
            else "subtree-backout"
            if backout
            else "subtree"
        )
        self._index: DescriptorIndex | None = None
        self._done: set[tuple[str, str]] = set()
        self._read: set[str] = set()
        self._query = ""
        self._expansion = ""
        self._weights: dict[str, float] = {}

    def prepare(self, manifest: Manifest) -> None:
        self._index = DescriptorIndex(manifest)
        self._done, self._read, self._query = set(), set(), ""

    @property
    def index(self) -> DescriptorIndex:
        if self._index is None:
            raise RuntimeError("prepare(manifest) must be called before decide")
        return self._index

    def decide(
        self, query: str, frontier: Sequence[FrontierEntry], budget_remaining: int
    ) -> NavAction:
        fresh = not any(e.expanded or e.via == "@lateral" for e in frontier)
        if query != self._query:
            self._done, self._query = set(), query  # lateral steps: once per query
            self._read = set()
            self._expansion = self.expander(query) if self.expander is not None else ""
            self._weights = query_weights(query, self._expansion)
        elif fresh:
            self._read = set()  # a new walk over the same query
        if self.backout:
            read = next((e for e in frontier if e.expanded and e.is_leaf), None)
            if read is not None:
                # A leaf that was read and did not end the walk is not the answer: free its
                # budget and never open it again.
                self._read.update(self.index.parts(read.node_id) if self.scan else ())
                self._read.add(read.node_id)
                return NavAction(verb="close", ids=(read.node_id,), reason="read; not it")
        scores = self.index.scores(self._weights, frozenset(self._read))
        if self.lateral:
            lateral = self._lateral(query, frontier)
            if lateral is not None:
                return lateral
        ranked = sorted(
            (
                e
                for e in frontier
                if not e.expanded and e.node_id not in self._read and scores.get(e.node_id, 0.0) > 0
            ),
            key=lambda e: (-scores.get(e.node_id, 0.0), not e.is_leaf, e.expand_cost),
        )
        if not ranked:
            return NavAction.stop("nothing below the frontier shares a content word")
        best = ranked[0]
        if self.backout:
            wrong = self._wrong_branch(best.node_id, scores, frontier)
            if wrong is not None:
                return NavAction(verb="close", ids=(wrong,), reason="cannot beat the next choice")
        for e in ranked:
            if e.expand_cost <= budget_remaining:
                return NavAction(
                    verb="open", ids=(e.node_id,), reason=f"subtree {scores[e.node_id]:.2f}"
                )
        return NavAction.stop("the best entries do not fit the budget")

    def _wrong_branch(
        self, best: str, scores: dict[str, float], frontier: Sequence[FrontierEntry]
    ) -> str | None:
        """The shallowest open branch that is not on the way to ``best`` and holds nothing
        scoring as high: closing it loses nothing and frees its budget."""
        for e in sorted(frontier, key=lambda x: x.depth):
            if not e.expanded or e.is_leaf or self.index.is_under(best, e.node_id):
                continue
            if scores.get(e.node_id, 0.0) < scores.get(best, 0.0):
                return e.node_id
        return None

    def _lateral(self, query: str, frontier: Sequence[FrontierEntry]) -> NavAction | None:
        """A see-also link from a visible node to the best leaf, else one search per query."""
        target = self.index.best_leaf(self._weights, frozenset(self._read))
        if target is None:
            return None
        visible = {e.node_id for e in frontier}
        if target in visible:
            return None
        for e in frontier:
            if target in e.links and ("related", e.node_id) not in self._done:
                self._done.add(("related", e.node_id))
                return NavAction(verb="related", ids=(e.node_id,), reason=f"links to {target}")
        if ("search", "") not in self._done:
            self._done.add(("search", ""))
            words = f"{query} {self._expansion}".strip()
            return NavAction(verb="search", query=words, k=self.search_k)
        return None


NAVIGATORS: dict[str, Callable[[], Navigator]] = {
    "keyword": KeywordNavigator,
    "subtree": SubtreeNavigator,
    "subtree-backout": lambda: SubtreeNavigator(backout=True),
    "subtree-lateral": lambda: SubtreeNavigator(lateral=True),
    "subtree-scan": lambda: SubtreeNavigator(scan=True),
}


MODEL_NAVIGATORS = ("subtree-expand",)


def make_navigator(name: str, *, expander: Callable[[str], str] | None = None) -> Navigator:
    """A navigator by name: the model-free ones (``keyword``, ``subtree``,
    ``subtree-backout``, ``subtree-lateral``) or ``subtree-expand``, which needs an
    ``expander`` (a :class:`picocontext.manifest.expand.QueryExpander` over a local model)."""
    if name == "subtree-expand":
        if expander is None:
            raise ValueError("the subtree-expand navigator needs an expander (a local model)")
        return SubtreeNavigator(expander=expander)
    try:
        return NAVIGATORS[name]()
    except KeyError:
        known = ", ".join(sorted([*NAVIGATORS, *MODEL_NAVIGATORS]))
        raise ValueError(f"unknown navigator {name!r}; use one of {known}") from None
