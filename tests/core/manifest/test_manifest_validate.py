"""Structure checks and hostile manifests: clear errors, never a RecursionError or a hang."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext.manifest.errors import ManifestInvalid
from picocontext.manifest.validate import Limits, load_manifest, validate_manifest


def errors_of(d: Any, limits: Limits | None = None) -> tuple[str, ...]:
    report = validate_manifest(json.dumps(d) if isinstance(d, dict) else d, limits or Limits())
    return report.errors


def test_valid_tree_has_no_errors(b: Any) -> None:
    assert errors_of(b.tree_doc()) == ()


def test_id_must_equal_key(b: Any) -> None:
    d = b.tree_doc()
    d["nodes"]["a.1"]["id"] = "other"
    assert any("does not match its key 'a.1'" in e for e in errors_of(d))


def test_duplicate_child_ref(b: Any) -> None:
    d = b.tree_doc()
    d["root"]["children"] = ["a", "b", "a"]
    assert any("duplicate child ref 'a'" in e for e in errors_of(d))


def test_single_parent(b: Any) -> None:
    d = b.tree_doc()
    d["nodes"]["b"]["children"].append("a.1")
    assert any("'a.1' already has parent 'a'" in e for e in errors_of(d))


def test_unknown_child_and_dangling_link_and_payload_ref(b: Any) -> None:
    d = b.tree_doc()
    d["nodes"]["a"]["children"].append("ghost")
    d["nodes"]["b.1"]["links"] = [{"to": "nowhere"}]
    d["nodes"]["b.2"]["payload"]["ref"] = "node://missing"
    errs = errors_of(d)
    assert any("unknown child id 'ghost'" in e for e in errs)
    assert any("dangling link to unknown id 'nowhere'" in e for e in errs)
    assert any("dangling payload ref 'node://missing'" in e for e in errs)


def test_orphans_are_reported(b: Any) -> None:
    d = b.tree_doc()
    d["nodes"]["lost"] = b.node(payload={"ref": "node://lost"})
    assert any("1 orphan node(s)" in e and "'lost'" in e for e in errors_of(d))


def test_cycle_among_children_is_reported(b: Any) -> None:
    d = b.tree_doc()
    d["nodes"]["c1"] = b.node(children=["c2"])
    d["nodes"]["c2"] = b.node(children=["c3"])
    d["nodes"]["c3"] = b.node(children=["c1"])
    errs = errors_of(d)
    assert any("cycle in children" in e and "c1" in e for e in errs), errs


def test_self_cycle_and_root_as_child(b: Any) -> None:
    d = b.tree_doc()
    d["nodes"]["a"]["children"].append("r")
    d["nodes"]["s"] = b.node(children=["s"])
    errs = errors_of(d)
    assert any("the root 'r' cannot be a child" in e for e in errs)
    assert any("cycle in children: s -> s" in e for e in errs)


def test_root_id_reused_as_node_key(b: Any) -> None:
    d = b.tree_doc()
    d["nodes"]["r"] = b.node(payload={"ref": "node://r"})
    assert any("root id 'r' is also used" in e for e in errors_of(d))


def _chain(n: int) -> dict[str, Any]:
    nodes: dict[str, dict[str, Any]] = {
        f"n{i}": {"what": "x", "when": "y", "children": [f"n{i + 1}"]} for i in range(n)
    }
    nodes[f"n{n}"] = {"what": "x", "when": "y", "payload": {"ref": f"node://n{n}"}}
    return {
        "pcx_version": "0.2",
        "source": {"id": "s", "kind": "k"},
        "variant": {"budget": 9},
        "root": {"what": "r", "when": "r", "children": ["n0"]},
        "nodes": nodes,
    }


def test_100k_deep_chain_is_a_clear_error_not_a_hang() -> None:
    # A generous bound: this guards against quadratic walks or hangs, not a speed claim
    # (speed is measured by scripts/bench.sh manifest, not by tests on a shared machine).
    start = time.perf_counter()
    errs = errors_of(_chain(100_000))
    assert time.perf_counter() - start < 120
    assert errs == ("root: the tree is deeper than the limit of 48 levels",)


def test_deep_chain_within_a_raised_limit_is_valid() -> None:
    assert errors_of(_chain(300), Limits(max_depth=400)) == ()


def test_10mb_descriptor_is_rejected_without_echoing_it(b: Any) -> None:
    d = b.tree_doc()
    d["nodes"]["a"]["what"] = "w" * 10_000_000
    errs = errors_of(d)
    assert errs == ("nodes/a/what: String should have at most 160 characters",)
    d = b.tree_doc()
    d["nodes"]["a"]["title"] = "t" * 10_000_000
    assert errors_of(d) == ("nodes/a/title: String should have at most 4096 characters",)
    d = b.tree_doc()
    d["nodes"]["a.1"]["keywords"] = ["k" * 5000]
    d["nodes"]["a.1"]["facets"] = {"f" * 5000: "v"}
    errs = errors_of(d)
    assert "nodes/a.1/keywords/0: String should have at most 4096 characters" in errs
    assert any(e.startswith("nodes/a.1/facets/") and "4096" in e for e in errs)


def test_deeply_nested_json_is_a_clear_error() -> None:
    errs = errors_of("[" * 200_000 + "]" * 200_000)
    assert len(errs) == 1 and "recursion limit" in errs[0]
    nested = '{"k":' * 5000 + '"x"' + "}" * 5000
    errs = errors_of('{"pcx_version": "0.2", "source": {"id": "s", "kind": ' + nested + "}}")
    assert errs and all("Traceback" not in e for e in errs)


def test_size_limits(b: Any) -> None:
    raw = json.dumps(b.tree_doc())
    assert "bytes exceed the limit" in errors_of(raw, Limits(max_bytes=100))[0]
    assert "exceed the limit of 3" in errors_of(raw, Limits(max_nodes=3))[0]
    d = b.tree_doc()
    d["nodes"]["a"]["children"] = ["a.1", "a.2"]
    assert "children exceed 1" in errors_of(d, Limits(max_children=1))[0]


def test_error_list_is_capped(b: Any) -> None:
    d = b.tree_doc()
    d["nodes"]["a"]["children"] = [f"ghost{i}" for i in range(50)] + ["a.1", "a.2"]
    errs = errors_of(d, Limits(max_errors=5))
    assert len(errs) == 6 and errs[-1].endswith("more error(s) not shown")


def test_not_json_and_wrong_version() -> None:
    assert "Invalid JSON" in errors_of("{nope")[0]
    errs = errors_of(json.dumps({"pcx_version": "0.1"}))
    assert any("pcx_version" in e for e in errs)


def test_warnings_for_inconsistent_costs(b: Any) -> None:
    d = b.tree_doc(budget=10)
    d["variant"]["manifest_tokens"] = 50
    d["nodes"]["a"]["tier"] = 3
    d["nodes"]["a"]["subtree_tokens"] = 7
    d["nodes"]["a.1"]["subtree_tokens"] = 1
    d["nodes"]["a.2"]["subtree_tokens"] = 1
    report = validate_manifest(d)
    assert report.ok
    text = "\n".join(report.warnings)
    assert "exceed the budget" in text and "tier 3 but depth 1" in text
    assert "children sum to 2" in text


def test_load_manifest_raises_with_every_error(b: Any, tmp_path: Any) -> None:
    d = b.tree_doc()
    d["nodes"]["a"]["children"].append("ghost")
    d["nodes"]["lost"] = b.node(payload={"ref": "node://lost"})
    p = tmp_path / "m.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ManifestInvalid) as info:
        load_manifest(p)
    assert len(info.value.errors) == 2 and str(p) in info.value.message
    with pytest.raises(ManifestInvalid, match="cannot read"):
        load_manifest(tmp_path / "missing.json")


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4),
        max_leaves=30,
    )
)
def test_arbitrary_json_never_raises(value: Any) -> None:
    report = validate_manifest(json.dumps(value))
    assert not report.ok and report.errors


_ids = st.sampled_from(["a", "b", "c", "d", "e", "r"])


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c", "d", "e"]),
        st.one_of(st.lists(_ids, max_size=4), st.none()),
        max_size=5,
    ),
    st.lists(_ids, max_size=4),
)
def test_random_graphs_are_classified_without_crashing(
    kids: dict[str, list[str] | None], root_kids: list[str]
) -> None:
    nodes = {
        k: (
            {"what": k, "when": k, "children": v}
            if v is not None
            else {"what": k, "when": k, "payload": {"ref": f"node://{k}"}}
        )
        for k, v in kids.items()
    }
    d = {
        "pcx_version": "0.2",
        "source": {"id": "s", "kind": "k"},
        "variant": {"budget": 9},
        "root": {"what": "r", "when": "r", "children": root_kids},
        "nodes": nodes,
    }
    report = validate_manifest(d)
    # Oracle: a valid manifest is exactly a tree rooted at r covering every node once.
    seen: list[str] = []
    stack = list(root_kids)
    ok = len(set(root_kids)) == len(root_kids)
    while stack and ok and len(seen) <= 6:
        n = stack.pop()
        if n not in nodes or n in seen:
            ok = False
            break
        seen.append(n)
        ch = kids[n] or []
        if len(set(ch)) != len(ch):
            ok = False
        stack.extend(ch)
    ok = ok and sorted(seen) == sorted(nodes)
    assert report.ok == ok, (kids, root_kids, report.errors)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c", "d", "e"]),
        st.tuples(
            st.one_of(st.lists(_ids, max_size=3), st.none()),
            st.lists(st.sampled_from(["a", "b", "x", "r"]), max_size=2),
            st.sampled_from(["a", "b", "e", "zz", "r", "@file:doc.md", "@node:/a"]),
            st.one_of(st.none(), st.integers(0, 3)),
            st.one_of(st.none(), st.sampled_from(["a", "b", "q"])),
        ),
        max_size=5,
    ),
    st.lists(_ids, max_size=4),
    st.integers(1, 4),
    st.lists(st.sampled_from(["a", "q", "r"]), max_size=2),
)
def test_fast_path_agrees_with_the_detailed_pass(
    spec: dict[str, tuple[Any, ...]], root_kids: list[str], max_depth: int, root_links: list[str]
) -> None:
    from picocontext.manifest.model import Manifest
    from picocontext.manifest.validate import _clean_warnings, _detailed_structure

    nodes: dict[str, dict[str, Any]] = {}
    for k, (kids, links, ref, tier, nid) in spec.items():
        n: dict[str, Any] = {"what": k, "when": k, "links": [{"to": t} for t in links]}
        if kids is None:
            # "@..." is a ref written as is (another scheme, or a near-miss of node://)
            n["payload"] = {"ref": ref[1:] if ref.startswith("@") else f"node://{ref}"}
        else:
            n["children"] = kids
        if tier is not None:
            n["tier"] = tier
        if nid is not None:
            n["id"] = nid
        nodes[k] = n
    m = Manifest.model_validate(
        {
            "pcx_version": "0.2",
            "source": {"id": "s", "kind": "k"},
            "variant": {"budget": 9},
            "root": {
                "what": "r",
                "when": "r",
                "children": root_kids,
                "links": [{"to": t} for t in root_links],
            },
            "nodes": nodes,
        }
    )
    limits = Limits(max_depth=max_depth, max_children=3, max_links=1)
    fast = _clean_warnings(m, limits)
    slow_errors, slow_warnings = _detailed_structure(m, limits)
    assert (fast is None) == bool(slow_errors), (spec, root_kids, slow_errors)
    if fast is not None:
        assert fast == slow_warnings


def test_warnings_can_be_skipped_but_errors_cannot(b: Any) -> None:
    from picocontext.manifest.model import Manifest
    from picocontext.manifest.validate import check_structure

    d = b.tree_doc(budget=10)
    d["variant"]["manifest_tokens"] = 50
    m = Manifest.model_validate(d)
    assert check_structure(m)[1] and check_structure(m, warnings=False) == ((), ())
    d["root"]["children"] = ["a", "a"]
    bad = Manifest.model_validate(d)
    assert check_structure(bad, warnings=False)[0]
    assert load_manifest(b.tree_doc(budget=10)).variant.budget == 10


def test_fast_path_accepts_clean_shapes_it_rarely_meets() -> None:
    """Refs in another scheme, a partial set of ids, links from the root: all clean, so the
    fast path must confirm them (not punt to the detailed pass) and agree with it."""
    from picocontext.manifest.model import Manifest
    from picocontext.manifest.validate import _clean_warnings, _detailed_structure

    m = Manifest.model_validate(
        {
            "pcx_version": "0.2",
            "source": {"id": "s", "kind": "k"},
            "variant": {"budget": 9},
            "root": {"what": "r", "when": "r", "children": ["a", "b"], "links": [{"to": "c"}]},
            "nodes": {
                "a": {"id": "a", "what": "a", "when": "a", "children": ["c"]},
                "b": {"what": "b", "when": "b", "payload": {"ref": "file:docs/b.md"}},
                "c": {"what": "c", "when": "c", "payload": {"ref": "node://c"}},
            },
        }
    )
    assert _clean_warnings(m, Limits()) == () == _detailed_structure(m)[0]
    wrong_id = m.model_copy(
        update={"nodes": {**m.nodes, "a": m.nodes["a"].model_copy(update={"id": "z"})}}
    )
    assert _clean_warnings(wrong_id, Limits()) is None
    assert _detailed_structure(wrong_id)[0]


@pytest.mark.parametrize(
    ("ref", "error"),
    [
        ("node://c", None),  # itself
        ("node://b", None),  # another leaf
        ("node://missing", "dangling payload ref 'node://missing'"),
        ("node://a", "'node://a' points at a branch"),
    ],
)
def test_payload_refs_alone_decide_validity(ref: str, error: str | None) -> None:
    """A manifest whose only possible fault is one payload ref: the fast path must not confirm
    a dangling or branch-pointing ref, and must confirm a leaf-to-leaf one."""
    from picocontext.manifest.model import Manifest
    from picocontext.manifest.validate import _clean_warnings, check_structure

    m = Manifest.model_validate(
        {
            "pcx_version": "0.2",
            "source": {"id": "s", "kind": "k"},
            "variant": {"budget": 9},
            "root": {"what": "r", "when": "r", "children": ["a", "b"]},
            "nodes": {
                "a": {"what": "a", "when": "a", "children": ["c"]},
                "b": {"what": "b", "when": "b", "payload": {"ref": "node://b"}},
                "c": {"what": "c", "when": "c", "payload": {"ref": ref}},
            },
        }
    )
    errors = check_structure(m, warnings=False)[0]
    if error is None:
        assert errors == () and _clean_warnings(m, Limits()) == ()
    else:
        assert _clean_warnings(m, Limits()) is None
        assert any(error in e for e in errors), errors
