"""map / digest / resolve / recall and their tool schemas (P13, P14, P23; checklist 60–73)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picocontext.distill import (
    ROOT_ID,
    Altitude,
    DigestTools,
    Distiller,
    NodeNotFound,
    ToolCallError,
    distill_tool_schemas,
    render_outline,
)
from picocontext.distill.testing import (
    ConstantEmbedder,
    MakeDistiller,
    VariedEmbedder,
    ancestors,
    note,
    seven_node_units,
)
from picocontext.prompts import edit_tool_schema
from picocontext.records import Scope, Snapshot

# -- map -------------------------------------------------------------------------------------


def test_map_lines_sorted_with_hashes_and_no_summary(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    d.apply(seven_node_units())
    result = d.tools().map()
    keys = [(x.level, x.id) for x in result.lines]
    assert keys == sorted(keys) and len(keys) == 7
    assert result.lines[-1].id == ROOT_ID
    for line in result.lines:
        wire = line.wire()
        assert wire["contentHash"] and len(wire["semHash"]) == 16
        assert "summary" not in wire and "unchanged" not in wire
        assert ("scope" in wire) == bool(line.scope)
    assert list(result.lines[0].wire()) == ["id", "level", "kind", "contentHash", "semHash"]


def test_map_with_the_current_snapshot_marks_everything_unchanged(
    make_distiller: MakeDistiller,
) -> None:
    d = make_distiller()
    d.apply(seven_node_units())
    tools = d.tools()
    known = d.snapshot(with_summaries=False).known_hashes()
    again = tools.map(known_hashes=known)
    assert all(line.unchanged for line in again.lines) and again.deleted == ()
    pruned = tools.map(known_hashes=known, prune_unchanged=True)
    assert [x.id for x in pruned.lines] == [ROOT_ID] and pruned.omitted == 6


def test_map_diff_after_an_edit_is_exactly_the_leaf_and_its_ancestors(
    make_distiller: MakeDistiller,
) -> None:
    d = make_distiller(embedder=ConstantEmbedder())
    d.apply([*seven_node_units(), note("n4", "gasket ok", "s3")])
    known = d.snapshot(with_summaries=False).known_hashes()
    d.apply([note("n1", "vibration critical", "s1", title="Pump")])
    result = d.tools().map(known_hashes=known)
    changed = {x.id for x in result.changed}
    assert changed == {"digest:0:note:n1", *ancestors(d, "digest:0:note:n1")}
    pruned = d.tools().map(known_hashes=known, prune_unchanged=True)
    assert {x.id for x in pruned.changed} == changed
    assert len(pruned.lines) < len(result.lines)
    assert "digest:0:note:n4" not in {x.id for x in pruned.lines}  # under unchanged s3


def test_map_reports_deleted_and_new_nodes(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    d.apply(seven_node_units())
    known = d.snapshot(with_summaries=False).known_hashes()
    d.apply([note("n9", "new one", "s9")], deletes=[("note", "n3")])
    result = d.tools().map(known_hashes=known)
    assert "digest:0:note:n3" in result.deleted
    assert "digest:1:scope:site:s2" in result.deleted
    new = next(x for x in result.lines if x.id == "digest:0:note:n9")
    assert not new.unchanged


def test_map_scope_filter(make_distiller: MakeDistiller) -> None:
    d = make_distiller(embedder=VariedEmbedder(), max_fan_in=2, noise_floor=99)
    d.apply([note(f"n{i}", f"text {i}", "s1") for i in range(6)] + [note("x", "y", "s2")])
    by_value = d.tools().map(scope="s1")
    ids = {x.id for x in by_value.lines}
    assert ROOT_ID in ids and "digest:1:scope:site:s1" in ids
    assert not any(i.startswith("digest:0:") for i in ids)  # leaves have no scope_id
    assert "digest:1:scope:site:s2" not in ids
    subtree = d.tools().map(scope="digest:1:scope:site:s1")
    assert "digest:0:note:n0" in {x.id for x in subtree.lines}


def test_map_on_an_empty_tree(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    assert d.tools().map().lines == ()
    assert d.tools().call("map", None)["lines"] == []
    assert d.tools().call("map", "{}")["lines"] == []


def test_outline_rendering(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    d.apply(seven_node_units())
    text = render_outline(d.tools().map(), {n.id: n for n in d.store.nodes()})
    assert text.splitlines()[0].startswith("digest:2:tenant [tenant] ch=")
    assert len(text.splitlines()) == 7


# -- digest ----------------------------------------------------------------------------------


def test_digest_returns_summary_and_children(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    d.apply([note("n1", "vibration high", "s1", title="Pump")])
    view = d.tools().digest(ROOT_ID)
    assert view.node.id == ROOT_ID and view.summary.startswith("rollup(")
    assert view.children and all(c.content_hash for c in view.children)
    root = d.store.get(ROOT_ID)
    assert root is not None and [c.id for c in view.children] == list(root.child_ids)
    no_cas = DigestTools(d.store, None, d.tokenizer)
    assert no_cas.digest(ROOT_ID).summary == ""


def test_digest_of_unknown_node_is_an_error(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    with pytest.raises(NodeNotFound, match=r'node "digest:2:tenant" not found'):
        d.tools().digest(ROOT_ID)


# -- resolve ---------------------------------------------------------------------------------


def test_resolve_exact_and_near(make_distiller: MakeDistiller) -> None:
    d = make_distiller(embedder=VariedEmbedder())
    d.apply(seven_node_units())
    tools = d.tools()
    for node in d.store.nodes():
        res = tools.resolve(node.content_hash)
        assert res.exact is not None and res.exact.content_hash == node.content_hash
        assert res.near == ()  # a 64-hex input never yields near matches
        near = tools.resolve(node.sem_hash).near
        assert any(m.node.id == node.id and m.hamming_bits == 0 for m in near)
        assert all(m.hamming_bits <= 8 for m in near)
        assert [(m.hamming_bits, m.node.id) for m in near] == sorted(
            (m.hamming_bits, m.node.id) for m in near
        )
    assert tools.resolve("deadbeef").exact is None


def test_resolve_lists_every_exact_match(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    d.apply([note("a", "same"), note("b", "same")])
    a = d.store.get("digest:0:note:a")
    assert a is not None
    res = d.tools().resolve(a.content_hash)
    assert res.exact is not None and res.exact.id == "digest:0:note:a"
    assert res.also_exact == ("digest:0:note:b",)


# -- recall ----------------------------------------------------------------------------------


def _corpus(make_distiller: MakeDistiller) -> Distiller:
    d = make_distiller(embedder=VariedEmbedder())
    units = [
        note(f"n{i}", f"pump {i} reading {' '.join(['word'] * 20)}", f"s{i % 3}") for i in range(9)
    ]
    d.apply(units)
    return d


def test_recall_auto_altitudes(make_distiller: MakeDistiller) -> None:
    d = _corpus(make_distiller)
    tools = d.tools()
    big = tools.recall("pump reading", 100_000)
    assert big.altitude == Altitude.ENTITY and all(not i.is_digest for i in big.items)
    entity_total = sum(i.tokens for i in big.items)
    smaller = tools.recall("pump reading", entity_total - 1)
    assert smaller.altitude in (Altitude.SCOPE, Altitude.TENANT)
    assert any(i.is_digest for i in smaller.items) or smaller.omitted > 0


def test_recall_never_packs_a_digest_with_an_entity_it_covers(
    make_distiller: MakeDistiller,
) -> None:
    d = _corpus(make_distiller)
    tools = d.tools()
    nodes = {n.id: n for n in d.store.nodes()}
    for altitude in (Altitude.SCOPE, Altitude.TENANT):
        pack = tools.recall("pump", 100_000, altitude)
        digests = [i.node_id for i in pack.items if i.is_digest]
        entities = {i.node_id for i in pack.items if not i.is_digest}
        for dig in digests:
            stack, covered = list(nodes[dig].child_ids), set()
            while stack:
                c = stack.pop()
                covered.add(c)
                stack.extend(nodes[c].child_ids)
            assert not covered & entities
    assert all(not i.is_digest for i in tools.recall("pump", 10, Altitude.ENTITY).items)


def test_recall_packing_stops_at_the_first_overflow(make_distiller: MakeDistiller) -> None:
    d = _corpus(make_distiller)
    pack = d.tools().recall("pump", 50, Altitude.ENTITY)
    assert pack.tokens <= 50 and pack.tokens == sum(i.tokens for i in pack.items)
    full = d.tools().recall("pump", 100_000, Altitude.ENTITY)
    assert [i.node_id for i in pack.items] == [i.node_id for i in full.items][: len(pack.items)]
    assert pack.omitted == len(full.items) - len(pack.items) > 0


def test_recall_inlines_summary_text(make_distiller: MakeDistiller) -> None:
    d = _corpus(make_distiller)
    pack = d.tools().recall("pump", 100_000, Altitude.TENANT)
    assert pack.items[0].node_id == ROOT_ID and pack.items[0].text.startswith("rollup(")


def test_recall_rejects_a_non_positive_budget(make_distiller: MakeDistiller) -> None:
    from picocontext.distill import DistillError

    with pytest.raises(DistillError):
        _corpus(make_distiller).tools().recall("x", 0)


# -- tool schemas and dispatch ---------------------------------------------------------------


def test_tool_schemas_follow_the_edit_context_style() -> None:
    reference = edit_tool_schema(
        Snapshot(scope=Scope(user_id="u", conversation_id="c", branch_id="b"))
    )
    schemas = distill_tool_schemas()
    assert [s["function"]["name"] for s in schemas] == ["map", "digest", "resolve", "recall"]
    for schema in schemas:
        assert set(schema) == set(reference)
        assert schema["type"] == "function"
        params = schema["function"]["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert set(params["required"]) <= set(params["properties"])
        json.loads(json.dumps(schema))
    assert schemas[0]["function"]["parameters"]["required"] == []


def test_call_dispatch(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    d.apply(seven_node_units())
    tools = d.tools()
    root = d.store.get(ROOT_ID)
    assert root is not None
    assert tools.call("digest", {"nodeId": ROOT_ID})["node"]["id"] == ROOT_ID
    assert tools.call("resolve", json.dumps({"hash": root.content_hash}))["exact"]["id"] == ROOT_ID
    out = tools.call("map", {"knownHashes": {ROOT_ID: root.content_hash}, "pruneUnchanged": True})
    assert out["lines"] == [{**out["lines"][0], "unchanged": True}] and out["omitted"] == 6
    assert tools.call("recall", {"query": "pump", "altitude": "tenant"})["altitude"] == "tenant"
    assert tools.call("recall", {"query": "pump", "altitude": 1})["altitude"] == "entity"
    assert isinstance(tools.call("resolve", {"hash": "deadbeef"}), dict)


@pytest.mark.parametrize(
    ("name", "args", "fragment"),
    [
        ("digest", {}, "nodeId"),
        ("digest", {"nodeId": ""}, "nodeId"),
        ("map", {"scope": 3}, "scope"),
        ("map", {"bogus": 1}, "bogus"),
        ("resolve", "not json", "not valid JSON"),
        ("resolve", "[1]", "JSON object"),
        ("recall", {"query": "x", "altitude": "sideways"}, "altitude"),
        ("recall", {"query": "x", "budget": 0}, "budget"),
        ("frobnicate", {}, "Unknown tool"),
    ],
)
def test_bad_tool_calls_raise_actionable_errors(
    make_distiller: MakeDistiller, name: str, args: Any, fragment: str
) -> None:
    with pytest.raises(ToolCallError, match=fragment):
        make_distiller().tools().call(name, args)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.one_of(
        st.none(),
        st.text(max_size=30),
        st.dictionaries(
            st.text(max_size=12),
            st.one_of(st.text(max_size=10), st.integers(), st.booleans(), st.none()),
            max_size=4,
        ),
    ),
    st.sampled_from(["map", "digest", "resolve", "recall"]),
)
def test_decoder_never_crashes_with_an_unexpected_exception(
    make_distiller: MakeDistiller, payload: Any, name: str
) -> None:
    tools = make_distiller().tools()
    from picocontext.distill import DistillError

    try:
        out = tools.call(name, payload)
    except DistillError:
        return
    assert isinstance(out, dict)
