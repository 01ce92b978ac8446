"""The compiler's intermediate representation: a tree of :class:`SourceNode`.

Adapters build it, clustering and shaping reshape it, the descriptor pipeline reads it. It is
mutable on purpose (the passes rewrite children lists); data that leaves the compiler is
converted to frozen models in :mod:`picocontext.build.emit`.

Ids are allocated through one :class:`IdRegistry` per tree, so two sources of the same slug
(``a/index.md`` and ``b/index.md``, a folder ``a/`` next to ``a.md``, tools ``x.y`` and
``x_y``) always get distinct ids -- the peer silently overwrote one of them (B1).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

_SLUG_BAD = re.compile(r"[^a-z0-9._-]+")
_DASHES = re.compile(r"-{2,}")


def slug(text: str) -> str:
    """Lowercase; characters outside ``[a-z0-9._-]`` become ``-``; edges trimmed."""
    s = _DASHES.sub("-", _SLUG_BAD.sub("-", text.strip().lower())).strip("-.")
    return s or "node"


def path_id(parts: list[str]) -> str:
    """A namespaced id from path segments: ``["Guide", "Install.md"]`` -> ``guide/install.md``."""
    return "/".join(slug(p) for p in parts if p) or "node"


class IdRegistry:
    """Hands out unique ids: a taken candidate gets ``~2``, ``~3``... in claim order, so the
    result is deterministic for a deterministic walk."""

    def __init__(self, reserved: tuple[str, ...] = ()) -> None:
        self._taken: set[str] = set(reserved)

    def claim(self, candidate: str) -> str:
        if candidate not in self._taken:
            self._taken.add(candidate)
            return candidate
        n = 2
        while f"{candidate}~{n}" in self._taken:
            n += 1
        out = f"{candidate}~{n}"
        self._taken.add(out)
        return out

    def __contains__(self, item: str) -> bool:
        return item in self._taken


@dataclass(eq=False)
class SourceNode:
    """A branch when ``children`` is non-empty, else a leaf.

    ``hint`` is author text (a tool's description, frontmatter ``description``) an engine may
    use but never ships verbatim; ``meta`` holds every other input a descriptor may depend on
    (frontmatter fields) so the incremental key covers it (B3). ``synthetic`` marks branches
    the build invented (clusters, pages).
    """

    id: str
    title: str
    content: str = ""
    format: str = "md"
    hint: str = ""
    keywords: list[str] = field(default_factory=list)
    facets: dict[str, str] = field(default_factory=dict)
    meta: dict[str, str] = field(default_factory=dict)
    children: list[SourceNode] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)
    synthetic: bool = False
    origin: str = ""

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def walk(self) -> Iterator[SourceNode]:
        """Pre-order, iterative."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def post_order(self) -> Iterator[SourceNode]:
        """Children before parents, iterative (deep trees cannot overflow the stack)."""
        out: list[SourceNode] = []
        stack = [self]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children)
        return reversed(out)

    def leaves(self) -> Iterator[SourceNode]:
        return (n for n in self.walk() if n.is_leaf)

    def copy_tree(self) -> SourceNode:
        """A structural copy (children lists are new; texts are shared, they are immutable)."""
        clone = SourceNode(
            id=self.id,
            title=self.title,
            content=self.content,
            format=self.format,
            hint=self.hint,
            keywords=list(self.keywords),
            facets=dict(self.facets),
            meta=dict(self.meta),
            links=list(self.links),
            synthetic=self.synthetic,
            origin=self.origin,
        )
        clone.children = [c.copy_tree() for c in self.children]
        return clone


@dataclass
class SourceTree:
    source_id: str
    kind: str
    root: SourceNode
    warnings: list[str] = field(default_factory=list)
    # entries of the source folder the walk refused (``path: reason``), e.g. a symlink that
    # leads outside it
    skipped: list[str] = field(default_factory=list)

    def nodes(self) -> list[SourceNode]:
        return list(self.root.walk())

    def ids(self) -> set[str]:
        return {n.id for n in self.root.walk()}


def humanize(stem: str) -> str:
    """``getting_started-guide`` -> ``Getting started guide``."""
    words = re.sub(r"[_\-]+", " ", stem).strip()
    return words[:1].upper() + words[1:] if words else stem


def flatten_single_child(root: SourceNode) -> int:
    """Below the root, replace a branch that has exactly one child by that child. Returns the
    number of hops removed."""
    removed = 0
    stack = [root]
    while stack:
        node = stack.pop()
        new_children = []
        for child in node.children:
            while len(child.children) == 1:
                child = child.children[0]
                removed += 1
            new_children.append(child)
        node.children = new_children
        stack.extend(node.children)
    return removed
