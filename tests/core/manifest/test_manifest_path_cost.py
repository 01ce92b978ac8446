"""``Runtime.path_cost`` prices an always-right walk without walking: it must equal the walk
(same ``spent``, same refusal) for every target, view level, budget and resolver, and stay
linear in depth, which is what keeps ``pcx eval``'s oracle usable on a deep chain."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext.manifest.errors import DisclosureRefused, ManifestError
from picocontext.manifest.model import Manifest
from picocontext.manifest.runtime import Runtime, dict_resolver
from picocontext.manifest.validate import Limits, load_manifest


def _tree() -> tuple[dict[str, Any], dict[str, str]]:
    """r -> x, y (a leaf); x -> x0, x1; each -> three leaves of different sizes."""
    nodes: dict[str, Any] = {
        "x": {"what": "Top x", "when": "x goals", "title": "X", "children": ["x0", "x1"]},
        "y": {"what": "Side y", "when": "y goals", "tokens": 5, "payload": {"ref": "node://y"}},
    }
    leaves = {"y": "body of y"}
    for i in range(2):
        kids = [f"x{i}.{k}" for k in range(3)]
        nodes[f"x{i}"] = {"what": f"Mid x{i}", "when": "mid goals", "children": kids}
        for k, leaf in enumerate(kids):
            nodes[leaf] = {
                "what": f"Leaf {leaf}",
                "when": "leaf goals",
                "keywords": ["kw"] * k,
                "tokens": 40 + k,
                "payload": {"ref": f"node://{leaf}"},
            }
            leaves[leaf] = f"body of {leaf} " + "w" * (10 + 37 * k)
    doc = {
        "pcx_version": "0.2",
        "source": {"id": "deep", "kind": "docs"},
        "variant": {"budget": 100_000},
        "root": {"id": "r", "what": "The root.", "when": "Always.", "children": ["x", "y"]},
        "nodes": nodes,
    }
    return doc, leaves


DOC, DEEP_LEAVES = _tree()
MANIFEST = load_manifest(DOC)
IDS = sorted(MANIFEST.nodes)


def _runtime(m: Manifest, slack: int, level: str, resolved: bool, auto: bool) -> Runtime:
    base = Runtime(m, view_level=level).baseline_tokens  # type: ignore[arg-type]
    return Runtime(
        m,
        budget=base + slack,
        view_level=level,  # type: ignore[arg-type]
        auto_collapse=auto,
        resolver=dict_resolver(DEEP_LEAVES) if resolved else None,
    )


def _walk(rt: Runtime, target: str) -> int | None:
    try:
        for nid in [*rt.manifest.ancestors(target)[1:], target]:
            rt.expand(nid)
    except DisclosureRefused:
        return None
    return rt.spent


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(IDS),
    st.integers(0, 700),
    st.sampled_from(["title", "brief", "full"]),
    st.booleans(),
    st.booleans(),
)
def test_path_cost_is_what_the_walk_spends(
    target: str, slack: int, level: str, resolved: bool, auto: bool
) -> None:
    priced = _runtime(MANIFEST, slack, level, resolved, auto).path_cost(target)
    walked = _walk(_runtime(MANIFEST, slack, level, resolved, auto), target)
    assert priced == walked


def test_path_cost_refuses_a_runtime_that_already_moved() -> None:
    rt = _runtime(MANIFEST, 10_000, "full", True, False)
    rt.expand("x")
    with pytest.raises(ManifestError, match="fresh runtime"):
        rt.path_cost("x0")


def _chain(depth: int) -> dict[str, Any]:
    nodes: dict[str, Any] = {}
    for i in range(depth):
        node: dict[str, Any] = {"what": f"level {i}", "when": f"to reach level {i}"}
        if i == depth - 1:
            node["payload"] = {"ref": f"node://n{i}"}
        else:
            node["children"] = [f"n{i + 1}"]
        nodes[f"n{i}"] = node
    return {
        "pcx_version": "0.2",
        "source": {"id": "chain", "kind": "docs"},
        "variant": {"budget": 100_000_000},
        "root": {"id": "r", "what": "root", "when": "always", "children": ["n0"]},
        "nodes": nodes,
    }


def test_path_cost_is_linear_in_depth() -> None:
    limits = Limits(max_depth=40_000, max_nodes=50_000)
    m = load_manifest(_chain(30_000), limits)
    started = time.perf_counter()
    cost = Runtime(m).path_cost("n29999")
    assert cost is not None and cost > 30_000
    # The walk it replaces took minutes at this depth (an O(depth) open per level).
    assert time.perf_counter() - started < 10
