"""The archive navigator: subtree routing with a query made for conversations.

A document navigator (``subtree-scan``, :mod:`picocontext.manifest.routing`) looks for the one
page whose descriptor best matches the question. In a conversation archive that page is
usually an earlier *asking* of the same question -- "report the notebook" shares every word
with the last "report the notebook" -- and opening it shows the model nothing it needs. What
answers a repeated question is what came after its earlier asking: the reply to it (which
held the whole answer then) and the records newer than that asking which match the question
(what changed since). Older matches come last, while the budget lasts.

:class:`ArchiveNavigator` ranks with the same :class:`~picocontext.manifest.index.DescriptorIndex`
path scores as ``subtree-scan`` (descriptors only, never a payload), adds those rules, and
walks down the tree to each target in turn (every ``open`` charged by the session). It knows
the history's order and which record replied to which request from the policy that built the
tree -- structure, not any unopened record's text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from picocontext.manifest.index import DescriptorIndex, query_weights
from picocontext.manifest.model import Manifest
from picocontext.manifest.navigator import NavAction
from picocontext.manifest.runtime import FrontierEntry
from picocontext.manifest.text import terms

# An earlier asking of the question is a near-duplicate of it: the Jaccard similarity of its
# words and the question's (see same_words) is at least this. A statement that shares a
# short question's words ("Store key4 = value-676." / "What value did I store for key4?")
# stays below it, because its value is a word the question lacks.
REPEAT_SIMILARITY = 0.8
MIN_REPEAT_TERMS = 3  # a two-word record ("ok thanks") is never taken for a repeat
# A match worth opening scores at least this share of the best match: a record that shares
# only a word every record has ("notebook") would spend the reading budget on nothing.
MATCH_SHARE = 0.5


def same_words(record: Sequence[str], question: Sequence[str]) -> float:
    """Jaccard similarity of a record's terms and the question's first as many terms (0 when
    either is empty). A descriptor keeps only the start of a long record, so a long question
    is compared over the same stretch; the whole question when the record is longer."""
    a, b = set(record), set(question[: max(len(record), 1)])
    union = len(a | b)
    return len(a & b) / union if record and question else 0.0


class ArchiveNavigator:
    """Opens, in order: the reply to the newest earlier asking of the question, then the
    records newer than that asking that match the question (best path score first, newer
    first on a tie; a match scores at least :data:`MATCH_SHARE` of the best), then, while
    the budget lasts, the older matches the same way -- a reply can be wrong, and what it
    was built from lets the model see that. Without an earlier asking it opens matching
    records by path score, like ``subtree-scan`` without the search. It never closes what
    it read: in a conversation each record read may hold part of the answer.

    ``order``: record id -> its position (higher is newer); ``replies``: request id -> the
    record that answered it, over the whole history (a reply the model already sees in its
    recent tail is not opened, but still marks everything older as superseded); ``shown``:
    id -> text of the user records the model is shown besides the question (an earlier
    asking kept in view, e.g. a protected request). Ids are record ids; a paged record is
    read from its first page."""

    name = "archive"

    def __init__(
        self,
        order: Mapping[str, int],
        replies: Mapping[str, str],
        shown: Mapping[str, str] | None = None,
    ) -> None:
        self.order = dict(order)
        self.replies = dict(replies)
        self.shown = dict(shown or {})
        self._index: DescriptorIndex | None = None
        self._query: str | None = None
        self._targets: list[str] = []
        self._reply: str | None = None

    def prepare(self, manifest: Manifest) -> None:
        self._index = DescriptorIndex.of(manifest)
        self._query, self._targets, self._reply = None, [], None

    @property
    def index(self) -> DescriptorIndex:
        if self._index is None:
            raise RuntimeError("prepare(manifest) must be called before decide")
        return self._index

    # -- ranking ----------------------------------------------------------------------------
    def _leaf_of(self, record: str) -> str | None:
        """The leaf that shows ``record`` first: itself, or its first page when paged."""
        manifest = self.index.manifest
        if record not in manifest.nodes:
            return None
        pages = manifest.children_of(record)
        return pages[0] if pages else record

    def _record_of(self, leaf: str) -> str:
        return self.index.document(leaf)

    def repeats(self, query: str) -> list[str]:
        """User records that ask what ``query`` asks, newest first: their words (an archived
        record's descriptor without its title, a shown record's text) are mostly the
        question's words."""
        wanted = terms(query)
        manifest = self.index.manifest
        words: dict[str, list[str]] = {rid: terms(text) for rid, text in self.shown.items()}
        for leaf in manifest.leaf_ids:
            node = manifest.get(leaf)
            if (node.facets or {}).get("role") == "user" and self._record_of(leaf) == leaf:
                title = set(terms(node.title or ""))
                words[leaf] = [t for t in terms(node.what) if t not in title]
        found = [
            rid
            for rid, own in words.items()
            if len(set(own)) >= MIN_REPEAT_TERMS and same_words(own, wanted) >= REPEAT_SIMILARITY
        ]
        return sorted(found, key=lambda r: -self.order.get(r, 0))

    def targets(self, query: str) -> tuple[str | None, list[str]]:
        """The leaf of the reply to the newest earlier asking that was answered (None when
        that reply is not archived, or there is none), then every leaf to open for ``query``
        in order, that reply first (see the class docs)."""
        repeats = self.repeats(query)
        answered = next((r for r in repeats if r in self.replies), None)
        since = self.order.get(answered, 0) if answered is not None else 0
        reply = self._leaf_of(self.replies[answered]) if answered is not None else None
        first = [reply] if reply is not None else []
        skip = {*repeats, *(self.replies[r] for r in repeats if r in self.replies)}
        scores = self.index.scores(query_weights(query))
        best: dict[str, tuple[float, str]] = {}  # record -> (score, its best leaf)
        for leaf in self.index.manifest.leaf_ids:
            record = self._record_of(leaf)
            score = scores.get(leaf, 0.0)
            if record in skip or score <= 0:
                continue
            if record not in best or score > best[record][0]:
                best[record] = (score, leaf)

        top = max((score for score, _ in best.values()), default=0.0)
        kept = [r for r in best if best[r][0] >= MATCH_SHARE * top]

        def rank(r: str) -> tuple[bool, float, int]:
            return (self.order.get(r, 0) <= since, -best[r][0], -self.order.get(r, 0))

        return reply, [*first, *(best[r][1] for r in sorted(kept, key=rank))]

    # -- walking ----------------------------------------------------------------------------
    def decide(
        self, query: str, frontier: Sequence[FrontierEntry], budget_remaining: int
    ) -> NavAction:
        if query != self._query:
            self._query = query
            self._reply, self._targets = self.targets(query)
        entries = {e.node_id: e for e in frontier}
        manifest = self.index.manifest
        for target in self._targets:
            known = entries.get(target)
            if known is not None and known.expanded:
                continue  # read already
            path = [*manifest.ancestors(target), target]
            step = next(
                (n for n in path if n in entries and not entries[n].expanded),
                None,
            )
            if step is None:
                continue  # out of sight
            # Do not start a walk that cannot finish: the target's own declared size must fit
            # after this step (a paged record's page list alone would spend the budget).
            rest = 0 if step == target else manifest.get(target).tokens or 0
            if entries[step].expand_cost + rest > budget_remaining:
                continue  # too dear: the next target may still fit
            why = "the reply to an earlier asking" if target == self._reply else "a match"
            return NavAction(verb="open", ids=(step,), reason=f"towards {why}: {target}")
        return NavAction.stop("every target is read, out of sight or too dear")
