"""Format: models, round trips, and the generated JSON Schema agreeing with the models."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from picocontext.manifest.model import Manifest, Node
from picocontext.manifest.schema import SCHEMA_FILENAME, generate_schema, schema_errors
from picocontext.manifest.validate import load_manifest

jsonschema: Any = importlib.import_module("jsonschema")


def test_shipped_schema_is_generated_from_the_models(b: Any) -> None:
    shipped = json.loads((b.resources / "schemas" / SCHEMA_FILENAME).read_text())
    assert shipped == generate_schema()


def test_schema_is_valid_draft_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(generate_schema())


def test_homelab_round_trips_byte_for_byte(b: Any) -> None:
    path = b.homelab_dir / "homelab.pcx.2k.json"
    raw = json.loads(path.read_text())
    m = load_manifest(path)
    assert m.to_dict() == raw
    assert load_manifest(m.to_json()).to_dict() == raw
    assert schema_errors(m.to_dict()) == []


def test_tokenizer_is_recorded_in_source(b: Any) -> None:
    m = load_manifest(b.homelab_dir / "homelab.pcx.2k.json")
    assert m.tokenizer == "heuristic:4chars"
    assert m.identity is not None and m.identity.startswith("sha256:")


def test_root_id_defaults_to_r(b: Any) -> None:
    d = b.tree_doc()
    del d["root"]["id"]
    assert load_manifest(d).root_id == "r"


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"children": ["x"], "payload": {"ref": "node://x"}}, "exactly one"),
        ({}, "exactly one"),
        ({"what": ""}, "what"),
        ({"when": "w" * 161}, "when"),
        ({"payload": {"ref": "node://x"}, "meta": 1}, "meta"),
        ({"payload": {"ref": "node://x"}, "tokens": -1}, "tokens"),
        ({"payload": {"ref": "node://x"}, "tokens": True}, "tokens"),
        ({"payload": {"ref": "node://x"}, "tokens": "5"}, "tokens"),
        ({"payload": {"ref": "node://x", "render": ["full", "tiny"]}}, "render"),
    ],
)
def test_node_rules(patch: dict[str, Any], needle: str) -> None:
    data = {"what": "w", "when": "w", **patch}
    with pytest.raises(ValidationError) as info:
        Node.model_validate(data)
    assert needle in str(info.value)


def test_source_is_open_but_nodes_and_top_level_are_closed(b: Any) -> None:
    d = b.tree_doc()
    d["source"]["my_extension"] = {"any": "thing"}
    assert load_manifest(d).source.model_extra == {"my_extension": {"any": "thing"}}
    d["extra_top"] = 1
    with pytest.raises(Exception, match="extra_top"):
        load_manifest(d)


def test_empty_optional_collections_are_omitted_but_empty_children_kept(b: Any) -> None:
    d = b.doc({"e": {"what": "e", "when": "e", "children": [], "keywords": [], "links": []}}, ["e"])
    out = Manifest.model_validate(d).to_dict()
    assert out["nodes"]["e"] == {"what": "e", "when": "e", "children": []}


# --- property: the generated schema and the models accept exactly the same nodes -------------
_text = st.text(min_size=0, max_size=170)
_node = st.fixed_dictionaries(
    {},
    optional={
        "what": _text,
        "when": _text,
        "title": st.one_of(st.text(max_size=10), st.integers()),
        "tier": st.integers(-2, 3),
        "tokens": st.one_of(st.integers(-3, 50), st.booleans(), st.text(max_size=2)),
        "keywords": st.lists(st.text(max_size=5), max_size=3),
        "children": st.lists(st.text(max_size=3), max_size=3),
        "payload": st.fixed_dictionaries(
            {"ref": st.text(max_size=5)},
            optional={
                "render": st.lists(st.sampled_from(["full", "summary", "x"]), max_size=2),
                "bogus": st.just(1),
            },
        ),
        "links": st.lists(
            st.fixed_dictionaries({"to": st.text(max_size=3)}, optional={"why": st.integers()}),
            max_size=2,
        ),
        "facets": st.dictionaries(
            st.text(max_size=3), st.one_of(st.text(max_size=3), st.integers()), max_size=2
        ),
        "meta": st.just({}),
    },
)


@settings(max_examples=300, deadline=None)
@given(_node)
def test_schema_and_models_agree_on_nodes(data: dict[str, Any]) -> None:
    doc = {
        "pcx_version": "0.2",
        "source": {"id": "s", "kind": "k"},
        "variant": {"budget": 10},
        "root": {"what": "r", "when": "r", "children": []},
        "nodes": {"n": data},
    }
    try:
        Manifest.model_validate(doc)
        model_ok = True
    except ValidationError:
        model_ok = False
    assert (schema_errors(doc) == []) == model_ok, data
