"""The pcx 0.2 manifest format as frozen pydantic models.

The models are the single source of truth: the JSON Schema in ``resources/schemas`` is generated
from them (:func:`picocontext.manifest.schema.generate_schema`). Field names, optionality and
limits follow the peer's published format, so a manifest written by either side reads in the
other. Unlike the peer, nodes carry no free-form ``meta``: the runtime accepts exactly what the
schema accepts (extension data belongs in ``source``, which is open).
"""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

from picocontext.manifest.errors import UnknownNode

PCX_VERSION = "0.2"
DEFAULT_ROOT_ID = "r"
DESCRIPTOR_MAX_CHARS = 160

_NODE_CONFIG = ConfigDict(frozen=True, extra="forbid")

NonNegInt = Annotated[StrictInt, Field(ge=0)]
PositiveInt = Annotated[StrictInt, Field(ge=1)]
DescriptorLine = Annotated[StrictStr, Field(min_length=1, max_length=DESCRIPTOR_MAX_CHARS)]
TEXT_MAX_CHARS = 4096
# Every other free-text field is bounded too, so a hostile file cannot smuggle megabytes into
# a title, keyword or ref; checked while parsing, before any Python sees the string.
Text = Annotated[StrictStr, Field(max_length=TEXT_MAX_CHARS)]

RenderLevel = Literal["full", "summary"]


class Payload(BaseModel):
    """Pointer to a leaf's verbatim content; the content itself is never inlined."""

    model_config = _NODE_CONFIG

    ref: Text = Field(description="Content reference, e.g. node://<id>.")
    format: Text | None = Field(default=None, description="md, json, txt, ...")
    render: tuple[RenderLevel, ...] | None = Field(
        default=None, description="Available render levels; 'full' is verbatim."
    )

    @property
    def levels(self) -> tuple[str, ...]:
        return self.render if self.render else ("full",)


class Link(BaseModel):
    """A see-also edge to a node in another branch, with the reason to follow it."""

    model_config = _NODE_CONFIG

    to: Text = Field(description="Target node id; must resolve in this manifest.")
    why: Text | None = Field(default=None, description="One line: why these relate.")


class Node(BaseModel):
    """A branch (``children``) or a leaf (``payload``), never both, never neither."""

    model_config = _NODE_CONFIG

    id: Text | None = Field(default=None, description="Must equal its key in `nodes`.")
    tier: NonNegInt | None = None
    title: Text | None = None
    what: DescriptorLine = Field(description="One line: what is behind this node.")
    when: DescriptorLine = Field(description="One line: the goal that makes this the branch.")
    keywords: tuple[Text, ...] | None = None
    desc_tokens: NonNegInt | None = Field(default=None, description="Cost of the descriptor.")
    tokens: NonNegInt | None = Field(default=None, description="Cost of a leaf's full payload.")
    summary_tokens: NonNegInt | None = None
    subtree_tokens: NonNegInt | None = None
    content_hash: Text | None = None
    children: tuple[Text, ...] | None = Field(default=None, description="Child ids.")
    payload: Payload | None = None
    links: tuple[Link, ...] | None = None
    facets: dict[Text, Text] | None = None

    @model_validator(mode="after")
    def _branch_xor_leaf(self) -> Node:
        if (self.children is None) == (self.payload is None):
            raise ValueError("a node needs exactly one of 'children' (branch) or 'payload' (leaf)")
        return self

    @property
    def is_leaf(self) -> bool:
        return self.payload is not None

    @property
    def is_branch(self) -> bool:
        return self.children is not None

    @property
    def label(self) -> str:
        return self.title or self.what[:40]


def _long_string(value: Any) -> str | None:
    """Where in an extension value (iteratively: it may nest deep) a key or a string is
    longer than :data:`TEXT_MAX_CHARS`, as ``/a/0/b``; None when every string is bounded."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            if len(item) > TEXT_MAX_CHARS:
                return where
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and len(key) > TEXT_MAX_CHARS:
                    return f"{where}/{key[:40]}..."
                stack.append((f"{where}/{key}", child))
        elif isinstance(item, list | tuple):
            stack.extend((f"{where}/{i}", child) for i, child in enumerate(item))
    return None


class Source(BaseModel):
    """Provenance. Open to extra keys (the schema allows them); ``tokenizer`` records which
    counter produced the costs in this file. Every string in it, extension keys and values
    included, is bounded like the rest of the format."""

    model_config = ConfigDict(frozen=True, extra="allow")

    id: Annotated[StrictStr, Field(min_length=1, max_length=TEXT_MAX_CHARS)]
    kind: Text
    generated_at: Text | None = None
    content_hash: Text | None = None
    tokenizer: Text | None = Field(
        default=None, description="Counter behind every cost, e.g. heuristic:4chars."
    )

    @model_validator(mode="after")
    def _bounded_extensions(self) -> Source:
        where = _long_string(self.__pydantic_extra__ or {})
        if where is not None:
            raise ValueError(
                f"the extension value at {where or '/'} holds a string longer than "
                f"{TEXT_MAX_CHARS} characters; every string of a manifest is bounded"
            )
        return self


class Variant(BaseModel):
    model_config = _NODE_CONFIG

    budget: PositiveInt = Field(description="Target window in tokens for this variant.")
    manifest_tokens: NonNegInt | None = None
    siblings: tuple[PositiveInt, ...] | None = None


_BULK_LOCK = threading.Lock()
_bulk_depth = 0
_saved_thresholds: tuple[int, int, int] = (700, 10, 10)


@contextmanager
def bulk_build() -> Iterator[None]:
    """Hold off automatic cyclic collection while a manifest is parsed.

    Parsing builds tens of thousands of small objects (a model, its dict and field set per
    node), none of them in a cycle; left alone, the collector runs a pass every 700
    allocations and rescans the growing tree each time, which costs about a third of the
    load. Only the generation-0 threshold is raised, so ``gc.enable``/``gc.disable`` (the
    playground's GC guard) are untouched, and nested or concurrent loads share one pause
    (the last one out restores the thresholds)."""
    global _bulk_depth, _saved_thresholds
    with _BULK_LOCK:
        if _bulk_depth == 0:
            _saved_thresholds = gc.get_threshold()
            gc.set_threshold(0, _saved_thresholds[1], _saved_thresholds[2])
        _bulk_depth += 1
    try:
        yield
    finally:
        with _BULK_LOCK:
            _bulk_depth -= 1
            last = _bulk_depth == 0
            if last:
                gc.set_threshold(*_saved_thresholds)
            threshold = gc.get_threshold()[0]
        # The one young-generation pass the parse is due, run now rather than at whatever
        # allocation comes next, so the load pays for its own garbage. Never while the
        # collector is switched off (a worker thread under the playground's guard).
        if last and gc.isenabled() and threshold and gc.get_count()[0] > threshold:
            gc.collect(0)


class Manifest(BaseModel):
    """One budget variant of a source. Structure (ids, parents, cycles, depth) is checked by
    :func:`picocontext.manifest.validate.check_structure`, not here, so errors can be listed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pcx_version: Literal["0.2"]
    usage: Text | None = None
    source: Source
    variant: Variant
    full_tokens: NonNegInt | None = None
    root: Node
    nodes: dict[Text, Node]

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **kwargs: Any) -> Self:
        """Pydantic's JSON parse, with collection held off meanwhile (:func:`bulk_build`)."""
        with bulk_build():
            return super().model_validate_json(json_data, **kwargs)

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Self:
        """Pydantic's validation of parsed data, with collection held off meanwhile."""
        with bulk_build():
            return super().model_validate(obj, **kwargs)

    @property
    def root_id(self) -> str:
        return self.root.id or DEFAULT_ROOT_ID

    @property
    def identity(self) -> str | None:
        return self.source.content_hash

    @property
    def tokenizer(self) -> str | None:
        return self.source.tokenizer

    def get(self, node_id: str) -> Node:
        node = self.nodes.get(node_id)
        if node is None:
            if node_id == self.root_id:
                return self.root
            raise UnknownNode(node_id)
        return node

    def has(self, node_id: str) -> bool:
        return node_id in self.nodes or node_id == self.root_id

    def children_of(self, node_id: str) -> tuple[str, ...]:
        return self.get(node_id).children or ()

    @cached_property
    def parents(self) -> dict[str, str]:
        """Child id -> parent id (first parent wins; validation rejects a second one)."""
        out: dict[str, str] = {}
        for cid in self.root.children or ():
            out.setdefault(cid, self.root_id)
        for nid, node in self.nodes.items():
            for cid in node.children or ():
                out.setdefault(cid, nid)
        return out

    @cached_property
    def _ancestor_cache(self) -> dict[str, tuple[str, ...]]:
        return {}

    def ancestors(self, node_id: str) -> tuple[str, ...]:
        """Root first, parent last; memoized. Bounded by the node count, so a cycle (in an
        unvalidated manifest) cannot hang it."""
        cache = self._ancestor_cache
        hit = cache.get(node_id)
        if hit is not None:
            return hit
        chain: list[str] = []
        seen = {node_id}
        cur = self.parents.get(node_id)
        while cur is not None and cur not in seen and len(chain) <= len(self.nodes) + 1:
            chain.append(cur)
            seen.add(cur)
            cur = self.parents.get(cur)
        chain.reverse()
        result = tuple(chain)
        cache[node_id] = result
        return result

    @cached_property
    def leaf_ids(self) -> tuple[str, ...]:
        return tuple(nid for nid, n in self.nodes.items() if n.is_leaf)

    def computed_full_tokens(self) -> int:
        """``full_tokens`` if stated, else the sum of the leaves' declared ``tokens``."""
        if self.full_tokens is not None:
            return self.full_tokens
        return sum(self.nodes[i].tokens or 0 for i in self.leaf_ids)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape both implementations read: absent optionals and empty
        keywords/links/facets are omitted, ``children: []`` is kept (it marks a branch)."""
        data = self.model_dump(mode="json", exclude_none=True)
        for node in [data["root"], *data["nodes"].values()]:
            for key in ("keywords", "links", "facets"):
                if key in node and not node[key]:
                    del node[key]
        return data

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)
