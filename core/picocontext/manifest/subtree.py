"""The subtree navigator: it scores a branch by everything below it.

It ranks the frontier with :class:`~picocontext.manifest.index.DescriptorIndex` (BM25 over
every descriptor the manifest holds, never a payload): a branch whose own line says little
("coreutils") but which holds the page that answers the query ranks where it belongs. Its
switches (``backout``, ``lateral``, ``scan``, an ``expander``) are the ideas the named
navigators of :mod:`picocontext.manifest.routing` turn on one by one. It is its own module so
the navigators built on it (:mod:`picocontext.manifest.embedrank`) and the table of navigators
by name can both import it.

Everything it shows the model goes through the session verbs and is charged there; the index
itself is the runtime's local data, like the built-in search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from picocontext.manifest.index import DescriptorIndex, query_weights
from picocontext.manifest.model import Manifest
from picocontext.manifest.navigator import NavAction
from picocontext.manifest.runtime import FrontierEntry

SCAN_K = 8  # search hits a scanning navigator discloses (about 35 tokens each)


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
            self._new_query(query)
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
        scores = self._scores(frozenset(self._read))
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

    def _new_query(self, query: str) -> None:
        self._done, self._query = set(), query  # lateral steps: once per query
        self._read = set()
        self._expansion = self.expander(query) if self.expander is not None else ""
        self._weights = query_weights(query, self._expansion)

    def _scores(self, skip: frozenset[str]) -> dict[str, float]:
        """node id -> score of the best leaf below (a subclass may rank leaves its own way)."""
        return self.index.scores(self._weights, skip)

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
        scores = self._scores(frozenset(self._read))
        leaves = [i for i in self.index.manifest.leaf_ids if scores.get(i, 0.0) > 0]
        target = min(leaves, key=lambda i: (-scores[i], i), default=None)
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
