"""Re-stamp a manifest's cost fields with one counter, so the numbers in the file mean what
our runtime charges and the file says which counter produced them (``source.tokenizer``).

``desc_tokens`` becomes the count of the node's full-level line as the runtime renders it,
``tokens`` the count of the leaf's verbatim content (when a resolver can produce it), and
``subtree_tokens``, ``variant.manifest_tokens`` (root line + tier-1 lines at full level) and
``full_tokens`` are recomputed from those. Structure and descriptors are never touched.
"""

from __future__ import annotations

import contextlib
from typing import Any

from picocontext.manifest.errors import ManifestError, ManifestInvalid
from picocontext.manifest.model import Manifest
from picocontext.manifest.runtime import LeafResolver, render_line
from picocontext.manifest.tokens import TextCounter
from picocontext.manifest.validate import check_structure


def annotate_costs(
    manifest: Manifest, counter: TextCounter, resolver: LeafResolver | None = None
) -> Manifest:
    """A copy of ``manifest`` with every cost field recomputed by ``counter``. Leaves whose
    content the resolver cannot produce keep their declared ``tokens``."""
    errors, _ = check_structure(manifest)
    if errors:
        raise ManifestInvalid(errors, "annotate_costs input")
    data: dict[str, Any] = manifest.to_dict()
    nodes: dict[str, dict[str, Any]] = data["nodes"]
    for nid, node in manifest.nodes.items():
        nodes[nid]["desc_tokens"] = counter.count(render_line(nid, node, "full"))
        if node.is_leaf and resolver is not None:
            with contextlib.suppress(ManifestError):  # no resident content: keep the declared cost
                nodes[nid]["tokens"] = counter.count(resolver(nid))
    # Post-order without recursion: children before parents.
    order: list[str] = []
    stack = list(manifest.root.children or ())
    while stack:
        nid = stack.pop()
        order.append(nid)
        stack.extend(manifest.nodes[nid].children or ())
    for nid in reversed(order):
        node = manifest.nodes[nid]
        if node.is_leaf:
            nodes[nid]["subtree_tokens"] = nodes[nid].get("tokens", 0)
        else:
            nodes[nid]["tokens"] = 0
            nodes[nid]["subtree_tokens"] = sum(
                nodes[c]["subtree_tokens"] for c in node.children or ()
            )
    root_line = render_line(manifest.root_id, manifest.root, "full")
    data["variant"]["manifest_tokens"] = counter.count(root_line) + sum(
        nodes[c]["desc_tokens"] for c in manifest.root.children or ()
    )
    data["full_tokens"] = sum(nodes[c]["subtree_tokens"] for c in manifest.root.children or ())
    data["source"]["tokenizer"] = counter.name
    return Manifest.model_validate(data)
