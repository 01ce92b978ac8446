"""The frontier as text: the view levels, the one line format every visible node is rendered
and charged by (:func:`render_line`), the entries a navigator reads (:class:`FrontierEntry`)
and the ledger rows (:class:`LedgerEntry`) of the runtime, leaf resolvers, and keyword search
over each node's own descriptor line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from picocontext.manifest.errors import ResolveError
from picocontext.manifest.model import Manifest, Node
from picocontext.manifest.text import IdfTable, field_terms, score, terms

ViewLevel = Literal["title", "brief", "full"]
VIEW_LEVELS: tuple[ViewLevel, ...] = ("title", "brief", "full")
VIEW_RANK = {"title": 0, "brief": 1, "full": 2}

LeafResolver = Callable[[str], str]


class SearchBackend(Protocol):
    def search(self, query: str, k: int) -> list[str]: ...


def dict_resolver(leaves: Mapping[str, str]) -> LeafResolver:
    """Resolve leaves from a resident mapping: an O(1) local splice."""

    def resolve(node_id: str) -> str:
        try:
            return leaves[node_id]
        except KeyError:
            raise ResolveError(
                f"No resident content for leaf {node_id!r}; ship it in the local store."
            ) from None

    return resolve


def render_line(node_id: str, node: Node, level: str) -> str:
    """One frontier line. The id is part of the line because the model needs it to act."""
    kind = "leaf" if node.is_leaf else f"branch:{len(node.children or ())}"
    head = f"{node_id} [{kind}] {node.title or node.what[:40]}"
    if level == "title":
        return head
    if level == "brief":
        return f"{head}: {node.what}"
    line = f"{head}: {node.what} | when: {node.when}"
    if node.keywords:
        line += " | keys: " + ", ".join(node.keywords)
    if node.links:
        line += " | see-also: " + ", ".join(link.to for link in node.links)
    return line


class FrontierEntry(BaseModel):
    """A visible node as a navigator sees it; ``text`` is the exact charged line."""

    model_config = ConfigDict(frozen=True)

    node_id: str
    title: str | None
    what: str
    when: str
    keywords: tuple[str, ...]
    depth: int
    is_leaf: bool
    level: ViewLevel
    text: str
    expand_cost: int
    expanded: bool
    links: tuple[str, ...]
    via: str


class LedgerEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str
    text: str
    tokens: int


class KeywordSearch:
    """Field-weighted IDF over every node's own descriptor line (branches included). The
    default before :class:`~picocontext.manifest.index.DescriptorSearch`; kept for callers
    that want single-line matching."""

    def __init__(self, manifest: Manifest) -> None:
        self._ids: list[str] = []
        self._fields: list[dict[str, float]] = []
        for nid, node in manifest.nodes.items():
            self._ids.append(nid)
            self._fields.append(node_terms(node))
        self._idf = IdfTable(f.keys() for f in self._fields)

    def search(self, query: str, k: int) -> list[str]:
        q = terms(query)
        scored = [(score(q, f, self._idf), i) for i, f in enumerate(self._fields)]
        scored = [s for s in scored if s[0] > 0]
        scored.sort(key=lambda s: (-s[0], s[1]))
        return [self._ids[i] for _, i in scored[:k]]


def node_terms(node: Node, level: str = "full") -> dict[str, float]:
    fields: dict[str, str | Iterable[str]] = {"title": node.title or ""}
    if VIEW_RANK[level] >= 1:
        fields["what"] = node.what
    if VIEW_RANK[level] >= 2:
        fields["when"] = node.when
        fields["keywords"] = node.keywords or ()
    return field_terms(fields)
