"""Shared builders for the manifest tests: small hand-made manifests and the homelab example."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from picocontext.manifest.model import Manifest
from picocontext.manifest.runtime import LeafResolver, dict_resolver
from picocontext.manifest.validate import load_manifest

RESOURCES = Path(__file__).resolve().parents[3] / "resources"
HOMELAB = RESOURCES / "manifests" / "homelab"


def node(what: str = "a thing", when: str = "you need it", **kw: Any) -> dict[str, Any]:
    return {"what": what, "when": when, **kw}


def doc(
    nodes: dict[str, dict[str, Any]], root_children: list[str], budget: int = 4096, **extra: Any
) -> dict[str, Any]:
    return {
        "pcx_version": "0.2",
        "source": {"id": "t", "kind": "docs"},
        "variant": {"budget": budget},
        "root": {
            "id": "r",
            "title": "Root",
            "what": "The root.",
            "when": "Always.",
            "children": root_children,
        },
        "nodes": nodes,
        **extra,
    }


def tree_doc(budget: int = 4096) -> dict[str, Any]:
    """Two branches with two leaves each, one link, facets; leaves declare 100 tokens."""
    nodes = {
        "a": node("Alpha things", "alpha goals", title="Alpha", children=["a.1", "a.2"]),
        "b": node("Beta things", "beta goals", title="Beta", children=["b.1", "b.2"]),
        "a.1": node(
            "First alpha leaf",
            "alpha one",
            title="A1",
            tokens=100,
            payload={"ref": "node://a.1", "render": ["full", "summary"]},
            facets={"kind": "howto"},
            links=[{"to": "b.2", "why": "shares a setting"}],
        ),
        "a.2": node(
            "Second alpha leaf",
            "alpha two",
            title="A2",
            tokens=100,
            payload={"ref": "node://a.2"},
            facets={"kind": "ref"},
        ),
        "b.1": node(
            "First beta leaf",
            "beta one",
            title="B1",
            tokens=100,
            payload={"ref": "node://b.1"},
            facets={"kind": "howto"},
        ),
        "b.2": node(
            "Second beta leaf", "beta two", title="B2", tokens=100, payload={"ref": "node://b.2"}
        ),
    }
    return doc(nodes, ["a", "b"], budget=budget)


LEAVES = {i: f"verbatim body of {i}\n" + ("x" * 200) for i in ("a.1", "a.2", "b.1", "b.2")}


@pytest.fixture
def tree() -> Manifest:
    return load_manifest(tree_doc())


@pytest.fixture
def resolver() -> LeafResolver:
    return dict_resolver(LEAVES)


@pytest.fixture
def homelab() -> Manifest:
    return load_manifest(HOMELAB / "homelab.pcx.2k.json")


@pytest.fixture
def homelab_resolver() -> LeafResolver:
    leaves = {p.stem: p.read_text(encoding="utf-8") for p in (HOMELAB / "leaves").iterdir()}
    return dict_resolver(leaves)


@pytest.fixture
def make() -> Callable[[dict[str, Any]], Manifest]:
    return lambda d: load_manifest(json.loads(json.dumps(d)))


class Builders:
    """The helper functions above, handed to tests as a fixture (conftest is not importable
    under --import-mode=importlib)."""

    node = staticmethod(node)
    doc = staticmethod(doc)
    tree_doc = staticmethod(tree_doc)
    leaves = LEAVES
    homelab_dir = HOMELAB
    resources = RESOURCES


@pytest.fixture
def b() -> type[Builders]:
    return Builders
