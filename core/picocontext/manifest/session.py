"""NavSession: the verbs an agent loop drives (index / look / open / close / related /
filter / search) over a :class:`Runtime`, with local and remote modes.

Two numbers, both honest:

* ``spent`` / ``budget_remaining`` -- what is resident in the window now (drops on close);
* ``shown_tokens`` -- everything the verbs have returned to the model, cumulative, never
  decreasing (the peer's version dropped on close, B10). It is the real "length" of a session.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from picocontext.manifest.errors import ManifestError
from picocontext.manifest.model import Manifest
from picocontext.manifest.runtime import LeafResolver, Runtime, ViewLevel
from picocontext.manifest.tokens import TextCounter

DEFAULT_PROTOCOL = (
    "You are reading a tiered index under a token budget. Each line is `id [kind] title: what "
    "| when: goal`. Narrow with filter(facet=value) when facets exist; follow see-also links "
    "with related(id) when a node is close but not exact; otherwise open(id) the line whose "
    "`when` fits the goal best. look(ids) shows more about lines you cannot decide on without "
    "opening them. Leaves open to verbatim content. close(id) frees budget."
)


class ModeConfig(BaseModel):
    """How much to disclose per step: tokens against round-trips."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    view_level: ViewLevel
    inline_small_leaves: bool
    inline_max_tokens: int = 200
    leaf_context: bool = True


LOCAL = ModeConfig(view_level="brief", inline_small_leaves=False)
REMOTE = ModeConfig(view_level="full", inline_small_leaves=True)
MODES: dict[str, ModeConfig] = {"local": LOCAL, "remote": REMOTE}


class NavSession:
    """Agent-loop API. Every verb returns the text the model is shown and counts it."""

    def __init__(
        self,
        manifest: Manifest,
        mode: str = "local",
        *,
        budget: int | None = None,
        reserve: int = 0,
        resolver: LeafResolver | None = None,
        summary_resolver: LeafResolver | None = None,
        config: ModeConfig | None = None,
        counter: TextCounter | None = None,
        auto_collapse: bool = False,
        protocol: str | None = DEFAULT_PROTOCOL,
    ) -> None:
        if config is None:
            if mode not in MODES:
                raise ManifestError(
                    f"Unknown mode {mode!r}; use one of {sorted(MODES)} or pass config=."
                )
            config = MODES[mode]
        self.mode = mode
        self.config = config
        self.protocol = protocol or ""
        self.runtime = Runtime(
            manifest,
            budget=budget,
            reserve=reserve,
            counter=counter,
            view_level=config.view_level,
            auto_collapse=auto_collapse,
            resolver=resolver,
            summary_resolver=summary_resolver,
            protocol_text=self.protocol,
            leaf_context=config.leaf_context,
        )
        # close is the runtime's collapse itself, bound once: closing shows the model nothing,
        # so a wrapper would only add a call to an O(depth) operation.
        self.close = self.runtime.collapse  # type: ignore[method-assign]
        self._shown = 0
        self.filter_limit = 20
        self._protocol_shown = False

    @property
    def manifest(self) -> Manifest:
        return self.runtime.manifest

    def _show(self, text: str) -> str:
        self._shown += self.runtime.counter.count(text)
        return text

    def index(self) -> str:
        """The current frontier (root line first). The first call also shows the protocol.
        In remote mode small unopened leaves are inlined while they fit the budget."""
        parts: list[str] = []
        if not self._protocol_shown and self.protocol:
            parts.append(self.protocol)
            self._protocol_shown = True
        parts.append(self.runtime.frontier_view())
        if self.config.inline_small_leaves:
            rt = self.runtime
            for nid in rt.visible_ids():
                node = rt.manifest.get(nid)
                if not node.is_leaf or rt.is_spliced(nid):
                    continue
                cost = rt.expand_cost(nid)
                if cost > self.config.inline_max_tokens or cost > rt.budget_remaining:
                    continue  # a deliberate skip, not a swallowed error
                parts.append(rt.expand(nid))
        return self._show("\n".join(parts))

    def look(self, ids: Sequence[str]) -> str:
        return self._show(self.runtime.look(ids, "full"))

    def open(self, node_id: str, level: str = "full") -> str:
        was_spliced = self.runtime.is_spliced(node_id)
        before = self.runtime.spent
        text = self.runtime.expand(node_id, level)
        node = self.runtime.manifest.get(node_id)
        if node.is_leaf and not was_spliced and self.runtime.resolver is None:
            # Ref mode: the host splices the declared content, so the model sees that too.
            self._shown += max(self.runtime.spent - before, 0)
            return text
        return self._show(text)

    def close(self, node_id: str) -> int:
        """Reclaim a leaf, a branch (with everything under it) or a lateral line; returns the
        tokens freed. Bound to :meth:`Runtime.collapse` per instance in ``__init__``."""
        return self.runtime.collapse(node_id)

    def related(self, node_id: str) -> str:
        """Follow see-also links: the targets become visible (charged) with their reasons."""
        self.runtime.require_visible(node_id)
        pairs = self.runtime.related(node_id)
        if not pairs:
            return self._show(f"(no see-also links from {node_id})")
        notes = {t: f"see also from {node_id}: {why or 'related'}" for t, why in pairs}
        return self._show(self.runtime.disclose([t for t, _ in pairs], notes))

    def filter(self, **facets: str) -> str:
        """Nodes whose facets match every pair, disclosed (charged) up to ``limit``."""
        if not facets:
            raise ManifestError("filter needs at least one facet, e.g. filter(kind='template').")
        root = self.runtime.manifest.root_id
        ids = [i for i in self.runtime.find_by_facets(**facets) if i != root]
        if not ids:
            return self._show(
                "(no node matches " + ", ".join(f"{k}={v}" for k, v in facets.items()) + ")"
            )
        limit = self.filter_limit
        shown = ids[:limit]
        text = self.runtime.disclose(shown)
        more = f"\n(+{len(ids) - limit} more; narrow the filter)" if len(ids) > limit else ""
        return self._show(text + more)

    def search(self, query: str, k: int = 5) -> str:
        """The runtime's search over descriptors; the hits are disclosed (charged) as lines."""
        root = self.runtime.manifest.root_id
        ids = [i for i in self.runtime.search(query, k) if i != root]
        if not ids:
            return self._show(f"(nothing matches {query!r})")
        return self._show(self.runtime.disclose(ids, dict.fromkeys(ids, "search hit")))

    @property
    def shown_tokens(self) -> int:
        return self._shown

    @property
    def spent(self) -> int:
        return self.runtime.spent

    @property
    def budget_remaining(self) -> int:
        return self.runtime.budget_remaining
