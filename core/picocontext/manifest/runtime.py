"""The expansion runtime: the budget authority for one model reading one manifest.

Accounting model: the runtime keeps a ledger of every piece of text that is resident in the
model's window -- the protocol text, the root line, one line per visible node at its current
view level, and each spliced leaf (context envelope included). Every entry is charged with ONE
counter on exactly the string that is rendered, so ``spent`` always equals the sum of the
counts of :meth:`Runtime.ledger` entries.

Rules:

* ``effective_budget = budget - reserve``; a runtime whose baseline does not fit is refused.
* Only nodes on the frontier (visible) can be opened or looked at (:class:`NotOnFrontier`).
  Lateral disclosures (``disclose``: related links, facet filters) put nodes on the frontier
  and are charged like any other line.
* A repeated look or open is free: nothing new becomes resident.
* ``collapse`` reclaims leaves and branch reveals (a reveal takes its descendants with it).
  Every open branch keeps the tokens resident under it current, so closing one is O(depth):
  the budget is credited at once and the hidden lines are cleared on the next call that reads
  the frontier (:meth:`Runtime._flush`), never observed stale.
* With ``auto_collapse`` the least recently *used* leaves and reveals are reclaimed to make
  room; the plan is computed first, so a refusal leaves the state untouched.
* Leaves are verbatim: the resolver's text is spliced unchanged; a summary is served only by a
  summary resolver and charged on its own text.

The line format, the frontier and ledger entry types, leaf resolvers and keyword search are in
:mod:`picocontext.manifest.frontier` (re-exported here). :class:`Runtime` itself stays one
class in one module: every method that changes what is resident (open, look, disclose, close,
the least-recently-used reclaim) moves the same ledger, reveal tree and per-branch token
totals together, and ``spent`` equals the sum of the ledger only because they do; split
across modules, that invariant would have no single place to be read.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from picocontext.manifest.errors import (
    BudgetTooSmall,
    DisclosureRefused,
    LevelUnavailable,
    ManifestError,
    NotOnFrontier,
)
from picocontext.manifest.frontier import VIEW_LEVELS as VIEW_LEVELS
from picocontext.manifest.frontier import VIEW_RANK
from picocontext.manifest.frontier import FrontierEntry as FrontierEntry
from picocontext.manifest.frontier import KeywordSearch as KeywordSearch
from picocontext.manifest.frontier import LeafResolver as LeafResolver
from picocontext.manifest.frontier import LedgerEntry as LedgerEntry
from picocontext.manifest.frontier import SearchBackend as SearchBackend
from picocontext.manifest.frontier import ViewLevel as ViewLevel
from picocontext.manifest.frontier import dict_resolver as dict_resolver
from picocontext.manifest.frontier import node_terms as node_terms
from picocontext.manifest.frontier import render_line as render_line
from picocontext.manifest.index import DescriptorSearch
from picocontext.manifest.model import Manifest, Node
from picocontext.manifest.tokens import HeuristicCounter, TextCounter


class _Splice(BaseModel):
    model_config = ConfigDict(frozen=True)

    level: str
    text: str
    cost: int


class _Reveal:
    """An open branch: the children it put on the frontier, every token resident under it
    (their lines, splices and nested reveals), and the reveal it hangs from. ``tokens`` is
    kept current on every change below it, so a close never walks the subtree to price it."""

    __slots__ = ("branch", "closed", "kids", "tokens", "up")

    def __init__(self, branch: str, kids: list[str], tokens: int, up: _Reveal | None) -> None:
        self.branch = branch
        self.kids = kids
        self.tokens = tokens
        self.up = up
        self.closed = False  # closed, its lines not yet cleared (see Runtime._flush)


class Runtime:
    """Holds the budget for one reader of one manifest. Not thread-safe: one per agent loop."""

    def __init__(
        self,
        manifest: Manifest,
        *,
        budget: int | None = None,
        reserve: int = 0,
        counter: TextCounter | None = None,
        view_level: ViewLevel = "full",
        auto_collapse: bool = False,
        resolver: LeafResolver | None = None,
        summary_resolver: LeafResolver | None = None,
        search_backend: SearchBackend | None = None,
        protocol_text: str | None = None,
        leaf_context: bool = True,
    ) -> None:
        if view_level not in VIEW_LEVELS:
            raise ManifestError(f"Unknown view level {view_level!r}; use one of {VIEW_LEVELS}.")
        if reserve < 0:
            raise ManifestError(f"reserve must be >= 0, got {reserve}.")
        self.manifest = manifest
        self.counter: TextCounter = counter or HeuristicCounter()
        self.view_level: ViewLevel = view_level
        self.auto_collapse = auto_collapse
        self.resolver = resolver
        self.summary_resolver = summary_resolver
        self.leaf_context = leaf_context
        self._search = search_backend
        self.budget = budget if budget is not None else manifest.variant.budget
        self.reserve = reserve
        self.effective_budget = self.budget - reserve
        self.protocol_text = protocol_text or ""
        self._count_cache: dict[str, int] = {}
        self._depth_cache: dict[str, int] = {}
        # visible node -> who disclosed it: a branch id, "@base" or "@lateral"
        self._visible: dict[str, str] = {}
        self._level: dict[str, str] = {}
        self._line_cost: dict[str, int] = {}
        self._revealed: dict[str, _Reveal] = {}
        # Closed reveals whose lines are still in the dicts (already credited to the budget).
        self._pending: list[_Reveal] = []
        self._spliced: dict[str, _Splice] = {}
        self._lru: OrderedDict[str, None] = OrderedDict()
        self._note: dict[str, str] = {}
        self._render_cache: dict[tuple[str, str], str] = {}
        self.root_line = render_line(manifest.root_id, manifest.root, "full")
        self._fixed = self._count(self.protocol_text) + self._count(self.root_line)
        self._spent = self._fixed
        for cid in manifest.root.children or ():
            if cid in self._visible or not manifest.has(cid):
                continue
            self._show(cid, "@base", view_level)
        self.baseline_tokens = self._spent
        if self.effective_budget < self.baseline_tokens or self.effective_budget <= 0:
            raise BudgetTooSmall(self.effective_budget, self.baseline_tokens)

    # ----------------------------------------------------------------- accounting
    def _count(self, text: str) -> int:
        hit = self._count_cache.get(text)
        if hit is None:
            hit = self.counter.count(text)
            if len(self._count_cache) > 200_000:
                self._count_cache.clear()
            self._count_cache[text] = hit
        return hit

    @property
    def spent(self) -> int:
        return self._spent

    @property
    def budget_remaining(self) -> int:
        return self.effective_budget - self._spent

    def ledger(self) -> list[LedgerEntry]:
        """Everything resident, in render order, each with its own count."""
        if self._pending:
            self._flush()
        out = []
        if self.protocol_text:
            out.append(
                LedgerEntry(
                    key="@protocol", text=self.protocol_text, tokens=self._count(self.protocol_text)
                )
            )
        out.append(
            LedgerEntry(key="@root", text=self.root_line, tokens=self._count(self.root_line))
        )
        for nid in self._visible:
            text = self._line(nid)
            out.append(LedgerEntry(key=nid, text=text, tokens=self._count(text)))
        for nid, sp in self._spliced.items():
            out.append(LedgerEntry(key=f"leaf:{nid}", text=sp.text, tokens=self._count(sp.text)))
        return out

    def render(self) -> str:
        """The resident context as one text (what a host would put in the window)."""
        return "\n".join(e.text for e in self.ledger())

    # ----------------------------------------------------------------- visibility
    def _line(self, nid: str, level: str | None = None) -> str:
        lvl = level or self._level.get(nid, self.view_level)
        key = (nid, lvl)
        text = self._render_cache.get(key)
        if text is None:
            text = render_line(nid, self.manifest.get(nid), lvl)
            self._render_cache[key] = text
        note = self._note.get(nid)
        return f"{text}  <- {note}" if note else text

    def _show(self, nid: str, owner: str, level: str) -> None:
        self._visible[nid] = owner
        self._level[nid] = level
        cost = self._count(self._line(nid, level))
        self._line_cost[nid] = cost
        self._spent += cost

    def is_visible(self, node_id: str) -> bool:
        if self._pending:
            self._flush()
        return node_id in self._visible

    def is_spliced(self, node_id: str) -> bool:
        if self._pending:
            self._flush()
        return node_id in self._spliced

    def is_revealed(self, node_id: str) -> bool:
        if self._pending:
            self._flush()
        return node_id in self._revealed

    def visible_ids(self) -> list[str]:
        if self._pending:
            self._flush()
        return list(self._visible)

    def depth(self, node_id: str) -> int:
        d = self._depth_cache.get(node_id)
        if d is None:
            d = len(self.manifest.ancestors(node_id))
            self._depth_cache[node_id] = d
        return d

    def _require_known(self, node_id: str) -> Node:
        if node_id == self.manifest.root_id:
            raise ManifestError(
                f"{node_id!r} is the root; it is always shown and cannot be opened."
            )
        return self.manifest.get(node_id)

    def require_visible(self, node_id: str) -> Node:
        """The node, if it is on the frontier (visible); otherwise :class:`NotOnFrontier`
        with a hint of what to open first (or :class:`ManifestError` for the root)."""
        if self._pending:
            self._flush()
        node = self._require_known(node_id)
        if node_id not in self._visible:
            path = [a for a in self.manifest.ancestors(node_id) if a != self.manifest.root_id]
            nearest = next(
                (a for a in path if a in self._visible and a not in self._revealed), None
            )
            hint = (
                f"open {nearest!r} first"
                if nearest
                else "open its ancestors first, or reach it through related/filter"
            )
            raise NotOnFrontier(node_id, hint)
        return node

    # ----------------------------------------------------------------- costs
    def level_cost(self, node_id: str, level: str) -> int:
        if self._pending:
            self._flush()
        return self._count(self._line(node_id, level))

    def _reveal_cost(self, node: Node) -> int:
        return sum(
            self.level_cost(c, self.view_level)
            for c in node.children or ()
            if c not in self._visible and self.manifest.has(c)
        )

    def _splice_text(
        self, node_id: str, node: Node, level: str, *, path_shown: bool = False
    ) -> str:
        if level not in ("full", "summary"):
            raise LevelUnavailable(node_id, level, "leaves render at 'full' or 'summary'")
        assert node.payload is not None
        if level == "summary":
            if "summary" not in node.payload.levels:
                raise LevelUnavailable(node_id, level, "the payload advertises no summary")
            if self.summary_resolver is None:
                raise LevelUnavailable(
                    node_id, level, "no summary resolver; open it at 'full' instead"
                )
            body = self.summary_resolver(node_id)
        elif self.resolver is not None:
            body = self.resolver(node_id)
        else:
            declared = node.tokens or 0
            body = f"(content at {node.payload.ref}; {declared} tokens, splice it from your store)"
        header = f"--- {node_id} ({level}) ---"
        if not self.leaf_context:
            return f"{header}\n{body}"
        return f"{self._envelope(node_id, path_shown)}\n{header}\n{body}"

    def _envelope(self, node_id: str, path_shown: bool = False) -> str:
        """Where the leaf sits: the path, plus the descriptor of any ancestor the model has not
        been shown (a lateral jump), because the envelope is charged like everything else.
        ``path_shown``: price it as reached by opening the path (every ancestor shown)."""
        chain = self.manifest.ancestors(node_id)
        names = [self.manifest.get(a).label for a in chain] + [self.manifest.get(node_id).label]
        lines = ["[context] " + " › ".join(names)]
        for a in () if path_shown else chain:
            if a != self.manifest.root_id and a not in self._visible:
                lines.append(f"  - {self.manifest.get(a).label}: {self.manifest.get(a).what}")
        return "\n".join(lines)

    def _leaf_cost(self, node_id: str, node: Node, level: str, path_shown: bool = False) -> int:
        text = self._splice_text(node_id, node, level, path_shown=path_shown)
        cost = self._count(text)
        if self.resolver is None and level == "full":
            # Ref mode: the host splices the content itself; charge its declared size.
            cost += node.tokens or 0
        return cost

    def expand_cost(self, node_id: str, level: str = "full") -> int:
        """Tokens opening ``node_id`` would add now (0 when it is already open)."""
        if self._pending:
            self._flush()
        node = self._require_known(node_id)
        if node.is_leaf:
            if node_id in self._spliced:
                return 0
            return self._leaf_cost(node_id, node, level)
        if node_id in self._revealed:
            return 0
        return self._reveal_cost(node)

    def path_cost(self, node_id: str, level: str = "full") -> int | None:
        """``spent`` after opening ``node_id``'s ancestors below the root and then ``node_id``
        (an always-right navigator), or None when a step would not fit; refused unless the
        runtime is fresh (nothing opened, looked at or disclosed yet).

        Nothing is opened: each step is priced as :meth:`expand` prices it (the same line and
        splice costs, the same check against the budget), so a walk down a 100,000-deep chain
        costs O(path + the children on it) instead of an O(depth) open per level. Nothing on
        the path can be evicted to make room (it is the path), so ``auto_collapse`` changes
        nothing; a property test holds this equal to the walk."""
        if self._pending:
            self._flush()
        if self._revealed or self._spliced or self._spent != self.baseline_tokens:
            raise ManifestError("path_cost prices a walk from a fresh runtime only")
        path = [*self.manifest.ancestors(node_id)[1:], node_id]
        shown: set[str] = set()
        spent = self._spent
        for nid in path:
            if nid not in shown:
                self.require_visible(nid)  # NotOnFrontier, as the walk would raise
            node = self.manifest.get(nid)
            if node.is_leaf:
                if nid != node_id:
                    raise ManifestError(f"{nid!r} is a leaf on the path to {node_id!r}")
                cost = self._leaf_cost(nid, node, level, path_shown=True)
                return spent + cost if spent + cost <= self.effective_budget else None
            kids = [c for c in node.children or () if self.manifest.has(c)]
            fresh = [c for c in kids if c not in self._visible and c not in shown]
            estimate = sum(self.level_cost(c, self.view_level) for c in fresh)
            if spent + estimate > self.effective_budget:
                return None
            for c in dict.fromkeys(fresh):
                spent += self.level_cost(c, self.view_level)
                shown.add(c)
        return spent

    # ----------------------------------------------------------------- budget
    def _touch(self, key: str) -> None:
        """Mark ``key`` used. Using a node uses the reveals it hangs from, so they are touched
        first: a leaf is always evicted before the branch that shows it."""
        lru = self._lru
        for anc in self.manifest.ancestors(key):
            if anc in self._revealed:
                lru[anc] = None
                lru.move_to_end(anc)
        if key in self._spliced or key in self._revealed:
            lru[key] = None
            lru.move_to_end(key)

    def _bump(self, node_id: str, delta: int) -> None:
        """``node_id``'s resident tokens changed by ``delta``: every open branch it hangs from
        (its owner's reveal, that one's owner, ...) holds ``delta`` more. O(depth)."""
        rec = self._revealed.get(self._visible.get(node_id, ""))
        while rec is not None:
            rec.tokens += delta
            rec = rec.up

    def _subtree_items(self, branch: str) -> tuple[int, list[str], list[str], list[str]]:
        """Tokens reclaimed by collapsing ``branch``'s reveal, with the hidden nodes, reveals
        and splices it removes, found by walking what is revealed there (iterative, so a deep
        tree cannot overflow the stack). The token total is recomputed here, not read from the
        reveal's running total, so the two can be checked against each other."""
        if self._pending:
            self._flush()
        hidden: list[str] = []
        reveals: list[str] = []
        splices: list[str] = []
        tokens = 0
        stack = [branch]
        while stack:
            b = stack.pop()
            reveals.append(b)
            rec = self._revealed.get(b)
            for c in rec.kids if rec is not None else ():
                if self._visible.get(c) != b:
                    continue
                hidden.append(c)
                tokens += self._line_cost[c]
                if c in self._spliced:
                    splices.append(c)
                    tokens += self._spliced[c].cost
                if c in self._revealed:
                    stack.append(c)
        return tokens, hidden, reveals, splices

    def _flush(self) -> None:
        """Clear what closed reveals hid: their lines, and every reveal and splice under them,
        in one walk over what was revealed there (never the whole subtree). Their tokens were
        credited when they were closed. Only reveals and splices are ever in the LRU (see
        :meth:`_touch`), so hidden lines need no LRU pop."""
        pending = self._pending
        revealed, visible, spliced = self._revealed, self._visible, self._spliced
        line_cost, level, lru = self._line_cost, self._level, self._lru
        while pending:
            top = pending.pop()
            lru.pop(top.branch, None)
            stack = [top]
            while stack:
                rec = stack.pop()
                b = rec.branch
                for c in rec.kids:
                    if visible.get(c) != b:
                        continue
                    del visible[c], level[c], line_cost[c]
                    if spliced and c in spliced:
                        del spliced[c]
                        lru.pop(c, None)
                    sub = revealed.pop(c, None)
                    if sub is not None:
                        lru.pop(c, None)
                        stack.append(sub)

    def _plan_room(self, target: str, cost: int) -> list[str] | None:
        """LRU keys to collapse so ``cost`` fits, or None if even that cannot make room."""
        need = cost - self.budget_remaining
        if need <= 0:
            return []
        if not self.auto_collapse:
            return None
        protected = set(self.manifest.ancestors(target)) | {target}
        gone: set[str] = set()
        plan: list[str] = []
        freed = 0
        for key in self._lru:
            if freed >= need:
                break
            if key in protected or key in gone:
                continue
            if key in self._spliced:
                plan.append(key)
                gone.add(key)
                freed += self._spliced[key].cost
            elif key in self._revealed:
                tokens, hidden, reveals, splices = self._subtree_items(key)
                if protected & set(hidden):
                    continue
                # Items already planned inside this subtree must not be counted twice.
                overlap = sum(self._spliced[s].cost for s in splices if s in gone)
                plan.append(key)
                gone.update(hidden, reveals, splices)
                freed += tokens - overlap
        return plan if freed >= need else None

    def _ensure_room(self, node_id: str, cost: int) -> None:
        plan = self._plan_room(node_id, cost)
        if plan is None:
            remaining = self.budget_remaining
            if self._spliced or self._revealed:
                suggestion = (
                    "collapse an open leaf or branch first (close), or enable auto_collapse"
                )
            else:
                suggestion = "pick a cheaper node or raise the budget"
            node = self.manifest.get(node_id)
            if (
                node.is_leaf
                and node.payload is not None
                and "summary" in node.payload.levels
                and self.summary_resolver is not None
                and node_id not in self._spliced
            ):
                try:
                    if self._leaf_cost(node_id, node, "summary") <= remaining:
                        suggestion = "open it at level 'summary', which fits"
                except ManifestError:
                    pass
            raise DisclosureRefused(node_id, cost, remaining, suggestion)
        for key in plan:
            self.collapse(key)
        if self._pending:
            self._flush()  # the caller goes on to read the frontier

    # ----------------------------------------------------------------- operations
    def peek(self) -> list[FrontierEntry]:
        """Every visible node, in disclosure order. Charges nothing."""
        if self._pending:
            self._flush()
        return [self.entry(nid) for nid in self._visible]

    def entry(self, node_id: str) -> FrontierEntry:
        if self._pending:
            self._flush()
        node = self.manifest.get(node_id)
        level = self._level.get(node_id, self.view_level)
        expanded = node_id in self._spliced or node_id in self._revealed
        try:
            cost = self.expand_cost(node_id)
        except ManifestError:
            cost = 0
        return FrontierEntry(
            node_id=node_id,
            title=node.title,
            what=node.what,
            when=node.when,
            keywords=tuple(node.keywords or ()),
            depth=self.depth(node_id),
            is_leaf=node.is_leaf,
            level=level,  # type: ignore[arg-type]
            text=self._line(node_id),
            expand_cost=cost,
            expanded=expanded,
            links=tuple(link.to for link in node.links or ()),
            via=self._visible.get(node_id, ""),
        )

    def frontier_view(self, include_root: bool = True) -> str:
        if self._pending:
            self._flush()
        lines = [self.root_line] if include_root else []
        lines.extend(self._line(nid) for nid in self._visible)
        return "\n".join(lines)

    def look(self, node_ids: Sequence[str], level: ViewLevel = "full") -> str:
        """Escalate visible nodes to ``level`` (never down). A node already at that level or
        above costs nothing; the whole call is checked against the budget before any change."""
        rank = VIEW_RANK.get(level)
        if rank is None:
            raise ManifestError(f"Unknown view level {level!r}; use one of {VIEW_LEVELS}.")
        if self._pending:
            self._flush()
        visible, levels, line_cost = self._visible, self._level, self._line_cost
        ids = list(dict.fromkeys(node_ids))
        delta = 0
        changes: dict[str, tuple[str, int]] = {}  # node -> its new line and that line's cost
        for nid in ids:
            if nid not in visible:
                self.require_visible(nid)  # raises the precise error (root, unknown, hint)
            if rank <= VIEW_RANK[levels[nid]]:
                continue
            text = self._line(nid, level)
            new_cost = self._count(text)
            changes[nid] = (text, new_cost)
            delta += new_cost - line_cost[nid]
        remaining = self.effective_budget - self._spent
        if delta > remaining:
            raise DisclosureRefused(
                ",".join(ids), delta, remaining, "look at fewer nodes or collapse something first"
            )
        for nid, (_, new_cost) in changes.items():
            step = new_cost - line_cost[nid]
            self._spent += step
            self._bump(nid, step)
            line_cost[nid] = new_cost
            levels[nid] = level
        for nid in ids:
            self._touch(nid)
        return "\n".join([changes[nid][0] if nid in changes else self._line(nid) for nid in ids])

    def expand(self, node_id: str, level: str = "full") -> str:
        """Open a visible node. A branch puts its children on the frontier and returns their
        lines; a leaf is spliced verbatim and its text (envelope included) returned."""
        node = self.require_visible(node_id)  # flushes closed reveals first
        if node.is_leaf:
            held = self._spliced.get(node_id)
            if held is not None and held.level == level:
                self._touch(node_id)
                return held.text
            text = self._splice_text(node_id, node, level)
            cost = self._leaf_cost(node_id, node, level)
            if held is not None:
                # Switching level: the old rendering is released only if the new one fits.
                if cost - held.cost > self.budget_remaining:
                    raise DisclosureRefused(
                        node_id, cost - held.cost, self.budget_remaining, "close something first"
                    )
                self.collapse(node_id)
            self._ensure_room(node_id, cost)
            self._spliced[node_id] = _Splice(level=level, text=text, cost=cost)
            self._spent += cost
            self._bump(node_id, cost)
            self._touch(node_id)
            return text
        if node_id in self._revealed:
            self._touch(node_id)
            return "\n".join(self._line(c) for c in node.children or () if c in self._visible)
        cost = self._reveal_cost(node)
        self._ensure_room(node_id, cost)
        new: list[str] = []
        before = self._spent
        for cid in node.children or ():
            if cid not in self._visible and self.manifest.has(cid):
                self._show(cid, node_id, self.view_level)
                new.append(cid)
        added = self._spent - before
        up = self._revealed.get(self._visible[node_id])
        self._revealed[node_id] = _Reveal(node_id, new, added, up)
        while up is not None:
            up.tokens += added
            up = up.up
        self._touch(node_id)
        return "\n".join(self._line(c) for c in node.children or () if c in self._visible)

    def disclose(self, node_ids: Sequence[str], notes: Mapping[str, str] | None = None) -> str:
        """Put nodes on the frontier laterally (followed links, facet hits), charged at the view
        level with their note (e.g. a link's why) as part of the line; all or nothing."""
        if self._pending:
            self._flush()
        ids = list(dict.fromkeys(node_ids))
        for nid in ids:
            self._require_known(nid)
        new = [i for i in ids if i not in self._visible]
        notes = notes or {}
        old_notes = dict(self._note)
        for nid in new:
            if notes.get(nid):
                self._note[nid] = notes[nid]
        cost = sum(self.level_cost(i, self.view_level) for i in new)
        try:
            if new and cost > self.budget_remaining:
                self._ensure_room(new[0], cost)
        except ManifestError:
            self._note = old_notes
            raise
        for nid in new:
            self._show(nid, "@lateral", self.view_level)
        return "\n".join(self._line(i) for i in ids)

    def _is_hidden(self, node_id: str) -> bool:
        """Whether ``node_id``'s line went with a closed reveal whose clean-up is pending:
        its owner's reveal is gone, or hangs (through ``up``) from a closed one. O(depth)."""
        owner = self._visible.get(node_id)
        if owner is None or owner == "@base" or owner == "@lateral":
            return False
        rec = self._revealed.get(owner)
        if rec is None:
            return True
        while rec is not None:
            if rec.closed:
                return True
            rec = rec.up
        return False

    def collapse(self, node_id: str) -> int:
        """Reclaim a spliced leaf, a branch reveal (with everything under it) or a lateral
        line. Returns the tokens reclaimed; 0 when nothing of it is resident.

        A branch is credited from its running total in O(depth); the lines it hid are cleared
        by the next call that reads the frontier (:meth:`_flush`). Closes in a row stay
        O(depth) each: one under a reveal closed a moment ago is found hidden and frees 0."""
        rec = self._revealed.pop(node_id, None)
        if rec is not None:
            if self._pending and self._is_hidden(node_id):
                self._revealed[node_id] = rec  # already credited; left for the clean-up
                return 0
            rec.closed = True
            freed = rec.tokens
            self._spent -= freed
            up = rec.up
            while up is not None:
                up.tokens -= freed
                up = up.up
            # No allocation (a close never triggers a GC pass); the branch leaves the LRU
            # with its lines, in _flush.
            self._pending.append(rec)
            return freed
        held = self._spliced.get(node_id)
        if held is not None:
            if self._pending and self._is_hidden(node_id):
                return 0
            del self._spliced[node_id]
            self._spent -= held.cost
            self._bump(node_id, -held.cost)
            self._lru.pop(node_id, None)
            return held.cost
        if self._visible.get(node_id) == "@lateral":  # never hidden by a reveal
            cost = self._line_cost.pop(node_id)
            self._spent -= cost
            del self._visible[node_id]
            self._level.pop(node_id, None)
            self._note.pop(node_id, None)
            self._lru.pop(node_id, None)
            return cost
        self._require_known(node_id)  # unknown ids and the root raise; anything else is 0
        return 0

    def ancestors(self, node_id: str) -> list[str]:
        self.manifest.get(node_id)
        return list(self.manifest.ancestors(node_id))

    def related(self, node_id: str) -> list[tuple[str, str]]:
        """(target id, why) for each see-also link that resolves. Charges nothing."""
        node = self.manifest.get(node_id)
        return [
            (link.to, link.why or "")
            for link in node.links or ()
            if self.manifest.has(link.to) and link.to != self.manifest.root_id
        ]

    def find_by_facets(self, **facets: str) -> list[str]:
        """Ids (root included) whose facets match every pair; an empty query matches nothing."""
        if not facets:
            return []
        items: list[tuple[str, Node]] = [(self.manifest.root_id, self.manifest.root)]
        items.extend(self.manifest.nodes.items())
        out = []
        for nid, node in items:
            f = node.facets or {}
            if all(f.get(k) == v for k, v in facets.items()):
                out.append(nid)
        return out

    def search(self, query: str, k: int = 5) -> list[str]:
        """Ranked ids from the search backend (the built-in descriptor index when none is
        given: leaves by subtree path score, one per document)."""
        if self._search is None:
            self._search = DescriptorSearch(self.manifest)
        return self._search.search(query, k)

    def reconcile(
        self, current_identity: str | None = None, live_ids: Iterable[str] | None = None
    ) -> list[str]:
        """Warnings when the manifest may misroute: a changed origin identity, or nodes that no
        longer exist at the origin. Never changes anything."""
        warnings: list[str] = []
        mine = self.manifest.identity
        if current_identity is not None and current_identity != mine:
            warnings.append(
                f"stale manifest: identity {mine!r} but the origin is now {current_identity!r}; "
                "refetch before trusting its routes"
            )
        if live_ids is not None:
            live = set(live_ids)
            gone = sorted(n for n in self.manifest.nodes if n not in live)
            if gone:
                head = ", ".join(gone[:5])
                warnings.append(
                    f"{len(gone)} node(s) no longer exist at the origin (e.g. {head}); "
                    "routes to them dangle"
                )
        return warnings
