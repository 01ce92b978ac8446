"""Closing a branch is O(depth): every open branch keeps a running total of what hangs from it,
the budget is credited at once, and the hidden lines are cleared on the next read. These tests
hold the running totals against a from-scratch recomputation after every step of random op
sequences on a four-level tree (deeper than the shared fixtures, so totals propagate through
several open ancestors), and check that nothing stale is ever observable."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext.manifest.errors import ManifestError, NotOnFrontier
from picocontext.manifest.model import Manifest
from picocontext.manifest.runtime import Runtime, dict_resolver
from picocontext.manifest.session import NavSession
from picocontext.manifest.tokens import HeuristicCounter
from picocontext.manifest.validate import load_manifest


def node(what: str, when: str, **kw: Any) -> dict[str, Any]:
    return {"what": what, "when": when, **kw}


def _deep_doc() -> tuple[dict[str, Any], dict[str, str]]:
    """r -> x, y; x -> x0, x1; each xN -> xN0, xN1 (branches); each of those -> two leaves.
    y is a leaf linking into the deep end, so lateral lines mix with revealed ones."""
    nodes: dict[str, dict[str, Any]] = {}
    leaves: dict[str, str] = {}
    nodes["x"] = node("Top x", "x goals", title="X", children=["x0", "x1"])
    for i in range(2):
        mid = f"x{i}"
        nodes[mid] = node(f"Mid {mid}", "mid goals", children=[f"{mid}{j}" for j in range(2)])
        for j in range(2):
            low = f"{mid}{j}"
            kids = [f"{low}.{k}" for k in range(2)]
            nodes[low] = node(f"Low {low}", "low goals", children=kids)
            for k, leaf in enumerate(kids):
                nodes[leaf] = node(
                    f"Leaf {leaf}",
                    "leaf goals",
                    tokens=40 + k,
                    payload={"ref": f"node://{leaf}", "render": ["full", "summary"]},
                )
                leaves[leaf] = f"body of {leaf} " + "w" * (10 + 7 * k)
    nodes["y"] = node(
        "Side y",
        "y goals",
        tokens=5,
        payload={"ref": "node://y"},
        links=[{"to": "x01.1", "why": "deep"}, {"to": "x1", "why": "mid"}],
    )
    manifest = {
        "pcx_version": "0.2",
        "source": {"id": "deep", "kind": "docs"},
        "variant": {"budget": 100_000},
        "root": {"id": "r", "what": "The root.", "when": "Always.", "children": ["x", "y"]},
        "nodes": nodes,
    }
    return manifest, leaves


DEEP, DEEP_LEAVES = _deep_doc()
IDS = sorted(DEEP["nodes"])


def _runtime(m: Manifest, slack: int, auto: bool) -> Runtime:
    base = Runtime(m, view_level="brief").baseline_tokens
    return Runtime(
        m,
        budget=base + slack,
        view_level="brief",
        auto_collapse=auto,
        resolver=dict_resolver(DEEP_LEAVES),
        summary_resolver=dict_resolver(DEEP_LEAVES),
        counter=HeuristicCounter(),
    )


def _recomputed(rt: Runtime) -> int:
    """What is resident, priced from scratch from the rendered ledger (flushes first)."""
    return sum(rt.counter.count(e.text) for e in rt.ledger())


_OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["open", "open", "summary", "look", "close", "close", "close_run", "disclose"]
        ),
        st.integers(0, 10_000),
        st.integers(0, 5).map(lambda v: v == 0),  # any id 1 time in 6, else the frontier
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(_OPS, st.integers(0, 600), st.booleans())
def test_running_totals_match_a_recomputation(
    ops: list[tuple[str, int, bool]], slack: int, auto: bool
) -> None:
    m = load_manifest(DEEP)
    rt = _runtime(m, slack, auto)
    for op, pick, anywhere in ops:
        # Mostly act on what is on the frontier (so opens nest and looks land under open
        # branches); sometimes on any id, so refusals are exercised too.
        pool = IDS if anywhere else rt.visible_ids()
        nid = pool[pick % len(pool)]
        try:
            if op == "open":
                rt.expand(nid)
            elif op == "summary":
                rt.expand(nid, level="summary")
            elif op == "look":
                rt.look([nid])
            elif op == "close":
                walked = rt._subtree_items(nid)[0] if rt.is_revealed(nid) else None
                before = rt.spent
                freed = rt.collapse(nid)
                assert before - rt.spent == freed
                assert walked is None or freed == walked
            elif op == "close_run":
                # Closes in a row with no read between them: each sees the previous one's
                # clean-up still pending (e.g. a branch, then a branch or leaf under it).
                open_now = [*rt._revealed, *rt._spliced]
                if pick % 2:
                    open_now.reverse()  # children first, as well as parents first
                before = rt.spent
                freed = sum(rt.collapse(i) for i in (nid, *open_now))
                assert before - rt.spent == freed
            else:
                rt.disclose([nid])
        except ManifestError:
            pass
        # Checked before anything flushes: the credit for a close is already exact.
        spent = rt.spent
        assert spent == _recomputed(rt)
        assert rt.spent == spent  # clearing hidden lines moves no tokens
        assert rt.budget_remaining >= 0
        for bid, rec in rt._revealed.items():
            assert rec.tokens == rt._subtree_items(bid)[0], bid
            assert rec.up is rt._revealed.get(rt._visible[bid])
        assert rt._visible.keys() == rt._level.keys() == rt._line_cost.keys()
        assert set(rt._lru) <= rt._spliced.keys() | rt._revealed.keys()
        assert set(rt._spliced) <= rt._visible.keys()


def test_close_of_a_nested_branch_credits_every_open_ancestor() -> None:
    m = load_manifest(DEEP)
    rt = _runtime(m, 10_000, False)
    base = rt.spent
    for nid in ("x", "x0", "x01", "x01.1"):
        rt.expand(nid)
    opened = rt.spent
    top = rt._revealed["x"].tokens
    assert top == opened - base
    freed_low = rt.collapse("x01")
    assert rt._revealed["x"].tokens == top - freed_low
    assert rt._revealed["x0"].tokens == rt._subtree_items("x0")[0]
    freed_top = rt.collapse("x")
    assert freed_low + freed_top == opened - base
    assert rt.spent == base == _recomputed(rt)


def test_leaf_splices_and_level_switches_move_every_open_ancestor() -> None:
    m = load_manifest(DEEP)
    rt = _runtime(m, 10_000, False)
    for nid in ("x", "x1", "x10"):
        rt.expand(nid)

    def totals() -> list[int]:
        return [rt._revealed[b].tokens for b in ("x", "x1", "x10")]

    start = totals()
    rt.expand("x10.1")
    assert totals() == [t + rt._spliced["x10.1"].cost for t in start]
    rt.expand("x10.1", level="summary")  # switch: release full, charge the summary
    assert totals() == [t + rt._spliced["x10.1"].cost for t in start]
    rt.collapse("x10.1")
    assert totals() == start
    before = rt.spent
    rt.look(["x10.0"])  # brief -> full: the line grows, and so does every total above it
    grew = rt.spent - before
    assert grew > 0
    assert totals() == [t + grew for t in start]
    for b in ("x", "x1", "x10"):
        assert rt._revealed[b].tokens == rt._subtree_items(b)[0]


def test_closes_in_a_row_never_credit_twice() -> None:
    """A branch or leaf under a reveal closed a moment ago is already hidden: closing it
    frees 0, before and after the clean-up."""
    m = load_manifest(DEEP)
    rt = _runtime(m, 10_000, False)
    base = rt.spent
    for nid in ("x", "x0", "x00", "x00.1", "x1"):
        rt.expand(nid)
    rt.disclose(["x01.0"])
    lateral = rt.spent
    freed = rt.collapse("x")
    assert rt._pending
    assert rt.collapse("x0") == 0  # nested reveal, hidden
    assert rt.collapse("x00.1") == 0  # nested splice, hidden
    assert rt.collapse("x1") == 0  # its reveal went too
    assert rt.collapse("x") == 0  # closed already
    assert rt.collapse("x01.0") > 0  # a lateral line is never the branch's
    assert rt.spent < lateral - freed
    assert rt.spent == base == _recomputed(rt)


def test_nothing_stale_is_observable_after_a_close() -> None:
    """Between the O(depth) close and the clean-up, every reader sees the closed state."""
    m = load_manifest(DEEP)
    rt = _runtime(m, 10_000, False)
    for nid in ("x", "x0", "x00", "x00.1"):
        rt.expand(nid)
    rt.collapse("x")
    assert rt._pending  # the clean-up is deferred ...
    assert not rt.is_revealed("x0")  # ... but no reader can tell
    assert not rt._pending
    rt.collapse("x")  # nothing left to reclaim
    assert rt.collapse("x") == 0
    for probe in (rt.is_visible, rt.is_spliced, rt.is_revealed):
        rt.expand("x")
        rt.expand("x0")
        rt.collapse("x")
        assert not probe("x0" if probe is not rt.is_spliced else "x00.1")
    rt.collapse("x")
    assert "x0" not in rt.visible_ids()
    assert "x0" not in rt.frontier_view()
    assert all(e.node_id != "x0" for e in rt.peek())
    with pytest.raises(NotOnFrontier):
        rt.expand("x0")
    # Reopening shows the children again, charged afresh, nested state gone.
    rt.expand("x")
    assert rt.is_visible("x0") and not rt.is_revealed("x0")
    assert rt.spent == _recomputed(rt)


def test_reopen_and_lateral_lines_survive_a_close() -> None:
    """A lateral line under a closed branch is not the branch's to reclaim."""
    m = load_manifest(DEEP)
    rt = _runtime(m, 10_000, False)
    rt.disclose(["x01.1"])  # lateral, before its ancestors are open
    rt.expand("x")
    rt.expand("x0")
    rt.expand("x01")  # x01.1 stays lateral; only x01.0 is revealed here
    assert rt._revealed["x01"].kids == ["x01.0"]
    rt.collapse("x")
    assert rt.is_visible("x01.1")
    assert not rt.is_visible("x01.0")
    assert rt.spent == _recomputed(rt)


def test_session_close_is_the_runtime_collapse() -> None:
    m = load_manifest(DEEP)
    s = NavSession(m, "local", resolver=dict_resolver(DEEP_LEAVES), protocol=None)
    s.open("x")
    s.open("x0")
    s.open("x00")
    shown = s.shown_tokens
    remaining = s.budget_remaining
    freed = s.close("x")
    assert freed > 0
    assert s.budget_remaining == remaining + freed
    assert s.shown_tokens == shown  # shown never decreases
    assert s.close("x") == 0
    with pytest.raises(ManifestError):
        s.close("nope")
    with pytest.raises(ManifestError):
        s.close("r")
