"""From a described tree to pcx 0.2 files: manifests (one per budget), the leaf store and
``llms.txt``.

Costs are counted with one counter on exactly what the runtime renders
(:func:`picocontext.manifest.runtime.render_line`), and ``manifest_tokens`` is the runtime's own
baseline (protocol text + root line + tier-1 lines at the ``full`` view) -- so the number the
build checks against the budget is the number a reader will be charged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from picocontext.build.ir import SourceNode
from picocontext.build.quality import Descriptor, clean_line
from picocontext.manifest.model import Link, Manifest, Node, Payload, Source, Variant
from picocontext.manifest.runtime import render_line
from picocontext.manifest.session import DEFAULT_PROTOCOL
from picocontext.manifest.tokens import TextCounter

BUILDER = "picocontext-build/1"
TITLE_CHARS = 120


class Verbosity(BaseModel):
    """How much of each descriptor a variant ships."""

    model_config = ConfigDict(frozen=True)

    name: str
    keywords: int
    what_chars: int
    when_chars: int
    links: bool


RICH = Verbosity(name="rich", keywords=6, what_chars=160, when_chars=160, links=True)
STANDARD = Verbosity(name="standard", keywords=3, what_chars=120, when_chars=100, links=True)
COMPACT = Verbosity(name="compact", keywords=0, what_chars=90, when_chars=70, links=False)
VERBOSITIES = (RICH, STANDARD, COMPACT)


def content_hash(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _hashes(root: SourceNode) -> dict[str, str]:
    out: dict[str, str] = {}
    for node in root.post_order():
        if node.is_leaf:
            out[node.id] = content_hash(node.content)
        else:
            out[node.id] = content_hash("".join(out[c.id] for c in node.children))
    return out


def build_manifest(
    root: SourceNode,
    descriptors: Mapping[str, Descriptor],
    *,
    source_id: str,
    kind: str,
    budget: int,
    siblings: Sequence[int],
    counter: TextCounter,
    verbosity: Verbosity = RICH,
    links: Mapping[str, Sequence[tuple[str, str]]] | None = None,
    protocol: str = DEFAULT_PROTOCOL,
    extra_source: Mapping[str, str] | None = None,
) -> Manifest:
    hashes = _hashes(root)
    tokens: dict[str, int] = {}
    subtree: dict[str, int] = {}
    for node in root.post_order():
        if node.is_leaf:
            tokens[node.id] = counter.count(node.content)
            subtree[node.id] = tokens[node.id]
        else:
            tokens[node.id] = 0
            subtree[node.id] = sum(subtree[c.id] for c in node.children)
    present = {n.id for n in root.walk()}
    nodes: dict[str, Node] = {}
    depth: dict[str, int] = {root.id: 0}
    for node in root.walk():
        for c in node.children:
            depth[c.id] = depth[node.id] + 1
        if node is root:
            continue
        d = descriptors[node.id]
        node_links = None
        if verbosity.links and links and node.id in links:
            node_links = (
                tuple(
                    Link(to=to, why=clean_line(why, 120))
                    for to, why in links[node.id]
                    if to in present
                )
                or None
            )
        fields = {
            "id": node.id,
            "tier": depth[node.id],
            "title": clean_line(node.title, TITLE_CHARS, fallback=node.id),
            "what": clean_line(d.what, verbosity.what_chars),
            "when": clean_line(d.when, verbosity.when_chars),
            "keywords": tuple(d.keywords[: verbosity.keywords]) or None,
            "tokens": tokens[node.id],
            "subtree_tokens": subtree[node.id],
            "content_hash": hashes[node.id],
            "links": node_links,
            "facets": dict(node.facets) or None,
        }
        if node.is_leaf:
            fields["payload"] = Payload(
                ref=f"node://{node.id}", format=node.format, render=("full",)
            )
        else:
            fields["children"] = tuple(c.id for c in node.children)
        draft = Node.model_validate(fields)
        nodes[node.id] = draft.model_copy(
            update={"desc_tokens": counter.count(render_line(node.id, draft, "full"))}
        )
    rd = descriptors[root.id]
    root_node = Node(
        id=root.id,
        tier=0,
        title=clean_line(root.title, TITLE_CHARS, fallback=source_id),
        what=clean_line(rd.what, verbosity.what_chars),
        when=clean_line(rd.when, verbosity.when_chars),
        children=tuple(c.id for c in root.children),
        subtree_tokens=subtree[root.id],
        content_hash=hashes[root.id],
        facets=dict(root.facets) or None,
    )
    baseline = counter.count(protocol) + counter.count(render_line(root.id, root_node, "full"))
    baseline += sum(counter.count(render_line(c.id, nodes[c.id], "full")) for c in root.children)
    source = Source.model_validate(
        {
            "id": source_id,
            "kind": kind,
            "content_hash": hashes[root.id],
            "tokenizer": counter.name,
            "builder": BUILDER,
            **(extra_source or {}),
        }
    )
    return Manifest(
        pcx_version="0.2",
        usage=protocol,
        source=source,
        variant=Variant(
            budget=budget,
            manifest_tokens=baseline,
            siblings=tuple(b for b in siblings if b != budget) or None,
        ),
        full_tokens=subtree[root.id],
        root=root_node,
        nodes=nodes,
    )


def leaf_store(root: SourceNode) -> dict[str, str]:
    """Leaf id -> verbatim content: what a resident resolver serves."""
    return {n.id: n.content for n in root.walk() if n.is_leaf and n is not root}


def _md_text(text: str) -> str:
    return text.replace("[", "(").replace("]", ")")


def llms_txt(manifest: Manifest, origins: Mapping[str, str] | None = None) -> str:
    """The llms.txt view of one variant: headings for branches, one bullet per leaf. Lines are
    single-line by construction (B16); leaves link to their source file when it is known."""
    origins = origins or {}
    lines = [f"# {_md_text(manifest.root.title or manifest.source.id)}", ""]
    lines.append(f"> {manifest.root.what}")
    lines += [
        "",
        "## How to read this index",
        "",
        "Each heading is a group and says what is inside it; each bullet is one document with "
        "a one-line description. Read the headings first, then open only the documents whose "
        "description fits the question.",
    ]
    stack: list[tuple[str, int]] = [(c, 0) for c in reversed(manifest.root.children or ())]
    while stack:
        nid, level = stack.pop()
        node = manifest.nodes[nid]
        title = _md_text(node.title or nid)
        if node.is_branch:
            lines += ["", f"{'#' * min(level + 2, 6)} {title}", "", node.what, ""]
            stack.extend((c, level + 1) for c in reversed(node.children or ()))
        else:
            origin = origins.get(nid, "")
            target = origin if origin and "#" not in origin else f"node://{nid}"
            lines.append(f"- [{title}]({target}): {node.what}")
    return "\n".join(lines).rstrip() + "\n"
