"""Spec §1 hashing: golden values, recipes, serializer (parity checklist 8–14)."""

from __future__ import annotations

import datetime as dt
import hashlib

from hypothesis import given
from hypothesis import strategies as st

from picocontext.distill import (
    Recipe,
    SemanticRecipe,
    canonical_value,
    l0_content_hash,
    membership_hash,
    rollup_content_hash,
    scope_value,
    source_field_hash,
    source_text,
    summary_input_hash,
)

HEX64 = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


def test_golden_values_reproduce_exactly() -> None:
    sfh = source_field_hash("Pump vibration high")
    assert sfh == "c834a635e5270ab31fa69fd2aa19391e098808927dcdc65424748044ccc152f4"
    assert (
        l0_content_hash("v1", sfh)
        == "b41a2a1818280d73cbff714d1cb202e34f606f4ed3e8d129c591b3319625d711"
    )
    assert (
        l0_content_hash("v2", sfh)
        == "36d9cc0e945d301823a126b7dd2be0b17017f918889655433d856b107aa5671e"
    )
    assert (
        rollup_content_hash("v1", ["h1", "h2", "h3"])
        == "960f5e8d8ffb98692983e709e53e87cc897c0cdc635abf964d3ec522037f9e46"
    )
    assert (
        rollup_content_hash("v1", ["h3", "h1", "h2"])
        == "960f5e8d8ffb98692983e709e53e87cc897c0cdc635abf964d3ec522037f9e46"
    )
    assert (
        rollup_content_hash("v1", [])
        == "3bfc269594ef649228e9a74bab00f042efc91d5acc6fbee31a382e80d42388fe"
    )
    assert source_field_hash("") == (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


def test_fixture_text_is_title_and_body_joined_by_one_space() -> None:
    assert source_text({"title": "Pump", "body": "vibration high"}, ["title", "body"]) == (
        "Pump vibration high"
    )
    # Missing or null fields are skipped without a placeholder, in declared order.
    assert source_text({"body": "b", "title": None, "x": 1}, ["title", "x", "body"]) == "1 b"


def test_zero_children_hash_the_recipe_alone() -> None:
    assert rollup_content_hash("v9", []) == hashlib.sha256(b"v9").hexdigest()


@given(st.lists(HEX64, max_size=8), st.randoms())
def test_rollup_hash_is_order_independent(children: list[str], rnd: object) -> None:
    shuffled = list(children)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert rollup_content_hash("v1", children) == rollup_content_hash("v1", shuffled)


@given(st.lists(HEX64, min_size=1, max_size=6))
def test_duplicates_are_kept_as_a_multiset(children: list[str]) -> None:
    assert rollup_content_hash("v1", children) != rollup_content_hash(
        "v1", [*children, children[0]]
    )


@given(st.text(max_size=50), st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8))
def test_recipe_salts_l0_and_rollup(text: str, a: str, b: str) -> None:
    if a == b:
        return
    sfh = source_field_hash(text)
    assert l0_content_hash(a, sfh) != l0_content_hash(b, sfh)
    assert rollup_content_hash(a, [sfh]) != rollup_content_hash(b, [sfh])


def test_changing_a_child_changes_the_parent() -> None:
    assert rollup_content_hash("v1", ["a", "b"]) != rollup_content_hash("v1", ["a", "c"])


def test_membership_hash_is_order_independent_and_separate_from_content() -> None:
    assert membership_hash("v1", ["s:a", "s:b"]) == membership_hash("v1", ["s:b", "s:a"])
    assert membership_hash("v1", ["s:a"]) != membership_hash("v1", ["s:b"])
    assert membership_hash("v1", []) != rollup_content_hash("v1", [])


def test_summary_input_hash_covers_everything_the_summarizer_sees() -> None:
    a = ("digest:1:scope:site:s1", "scope", "c1", "sha256:1")
    b = ("digest:1:cluster:abc0000000000000:12", "cluster", "c2", "sha256:2")

    def h(
        *children: tuple[str, str, str, str],
        recipe: str = "v1",
        level: int = 2,
        kind: str = "tenant",
        scope_name: str = "",
        scope_id: str = "",
        budget: int = 256,
    ) -> str:
        return summary_input_hash(recipe, level, kind, scope_name, scope_id, budget, children)

    base = h(a, b)
    assert base == h(a, b)
    assert h(b, a) != base  # order matters: the summarizer reads children in this order
    assert h(a, (b[0], b[1], b[2], "sha256:other")) != base  # a child re-summarised
    assert h(a, ("digest:1:scope:site:s2", *b[1:])) != base  # a child renamed, same content
    assert h(a, (b[0], "scope", *b[2:])) != base  # a child's kind
    assert h(a, (b[0], b[1], "c3", b[3])) != base  # a child's content
    assert h(a, b, recipe="v2") != base
    assert h(a, b, level=1) != base
    assert h(a, b, kind="cluster") != base
    assert h(a, b, budget=128) != base
    assert h(a, b, scope_name="site", scope_id="s1") != h(a, b, scope_name="site", scope_id="s2")
    # Unambiguous encoding: moving text across a field boundary changes the hash.
    assert h(("x\x00y", "z", "c", "s")) != h(("x", "y\x00z", "c", "s"))
    assert base != rollup_content_hash("v1", ["c1", "c2"])


def test_canonical_serializer() -> None:
    assert canonical_value("x y") == "x y"
    assert canonical_value(42) == "42"
    assert canonical_value(1e21) == "1e+21"
    assert canonical_value(0.5) == "0.5"
    assert canonical_value(True) == "true"
    assert canonical_value(dt.datetime(2026, 6, 19, 12, 0, tzinfo=dt.UTC)) == (
        "2026-06-19T12:00:00Z"
    )
    assert canonical_value(dt.datetime(2026, 6, 19, 12, 0)) == "2026-06-19T12:00:00Z"
    assert canonical_value({"b": [1, 2], "a": "x"}) == '{"a":"x","b":[1,2]}'
    assert canonical_value([1, "a"]) == '[1,"a"]'


def test_scope_values_prefer_name_id_and_serialize_non_strings() -> None:
    assert scope_value({"site_id": "s1", "site": "other"}, "site") == "s1"
    assert scope_value({"site": "s2"}, "site") == "s2"
    assert scope_value({"site_id": "  ", "site": "s3"}, "site") == "s3"
    assert scope_value({"site_id": 7}, "site") == "7"  # fix F: numeric keys are kept
    assert scope_value({}, "site") == ""


def test_recipe_version_covers_every_summary_input() -> None:
    base = Recipe(summarizer_id="m")
    variants = [
        Recipe(summarizer_id="m2"),
        Recipe(summarizer_id="m", quantization="4bit"),
        Recipe(summarizer_id="m", prompt_digest="p"),
        Recipe(summarizer_id="m", budget=128),
        Recipe(summarizer_id="m", input_budget=5000),
        Recipe(summarizer_id="m", guard_version="g2"),
        Recipe(summarizer_id="m", serializer_version="canon-2"),
        Recipe(summarizer_id="m", adapter_versions=("docs-2",)),
        Recipe(summarizer_id="m", tokenizer="model:x"),
    ]
    versions = {base.version, *(v.version for v in variants)}
    assert len(versions) == len(variants) + 1
    assert base.version == Recipe(summarizer_id="m").version


def test_semantic_recipe_is_separate() -> None:
    a = SemanticRecipe(embedder_id="lex", dims=256)
    assert a.version != SemanticRecipe(embedder_id="lex", dims=128).version
    assert a.version != SemanticRecipe(embedder_id="lex", dims=256, seed=2).version
    assert "pcg64" in a.generator
