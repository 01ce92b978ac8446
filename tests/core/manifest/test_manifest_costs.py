"""Cost re-stamping: the file's numbers equal what the runtime charges, with one counter."""

from __future__ import annotations

from typing import Any

import pytest

from picocontext.manifest.costs import annotate_costs
from picocontext.manifest.errors import ManifestInvalid
from picocontext.manifest.model import Manifest
from picocontext.manifest.runtime import Runtime
from picocontext.manifest.tokens import HeuristicCounter
from picocontext.manifest.validate import validate_manifest


class Words:
    name = "words"

    def count(self, text: str) -> int:
        return len(text.split())


def test_costs_match_the_runtime(homelab: Manifest, homelab_resolver: Any) -> None:
    m = annotate_costs(homelab, Words(), homelab_resolver)
    assert m.tokenizer == "words"
    rt = Runtime(m, counter=Words(), resolver=homelab_resolver, leaf_context=False)
    assert m.variant.manifest_tokens == rt.baseline_tokens
    for nid in m.root.children or ():
        assert m.nodes[nid].desc_tokens == rt.level_cost(nid, "full")
    leaf = m.nodes["network.dns"]
    assert leaf.tokens == len(homelab_resolver("network.dns").split())
    assert m.nodes["network"].subtree_tokens == sum(
        m.nodes[c].tokens or 0 for c in m.nodes["network"].children or ()
    )
    assert m.full_tokens == sum(m.nodes[i].tokens or 0 for i in m.leaf_ids)
    report = validate_manifest(m)
    assert report.ok and report.warnings == ()


def test_heuristic_stamp_is_stable_on_our_example(homelab: Manifest, homelab_resolver: Any) -> None:
    again = annotate_costs(homelab, HeuristicCounter(), homelab_resolver)
    assert again.to_dict() == homelab.to_dict()


def test_without_resolver_declared_tokens_stay(tree: Manifest) -> None:
    m = annotate_costs(tree, HeuristicCounter())
    assert m.nodes["a.1"].tokens == 100 and m.full_tokens == 400


def test_refuses_a_broken_tree(b: Any) -> None:
    d = b.tree_doc()
    d["root"]["children"] = ["a"]
    with pytest.raises(ManifestInvalid, match="orphan"):
        annotate_costs(Manifest.model_validate(d), HeuristicCounter())  # parsed, unchecked
