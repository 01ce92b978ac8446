"""Runtime accounting and the peer's bugs B5-B10 and B19, each with our behaviour."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picocontext.manifest.errors import (
    BudgetTooSmall,
    DisclosureRefused,
    LevelUnavailable,
    ManifestError,
    NotOnFrontier,
    ResolveError,
)
from picocontext.manifest.model import Manifest
from picocontext.manifest.runtime import LeafResolver, Runtime, dict_resolver, render_line
from picocontext.manifest.tokens import HeuristicCounter
from picocontext.manifest.validate import load_manifest


class SpyCounter:
    """Counts every call, so a test can prove one counter priced every charge."""

    name = "spy"

    def __init__(self) -> None:
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return len(text.split())


def assert_ledger(rt: Runtime) -> None:
    """B19: spent is exactly the counted rendered text, and never above the budget."""
    total = sum(rt.counter.count(e.text) for e in rt.ledger())
    assert rt.spent == total
    assert rt.spent <= rt.effective_budget
    # Internal bookkeeping stays in step (collapse relies on it: only reveals and splices are
    # ever in the LRU, and every visible line has a level and a cost).
    assert rt._visible.keys() == rt._level.keys() == rt._line_cost.keys()
    assert set(rt._lru) <= rt._spliced.keys() | rt._revealed.keys()
    assert set(rt._spliced) <= rt._visible.keys()
    assert not rt._pending  # ledger() cleared what closed reveals hid
    assert_reveal_totals(rt)


def assert_reveal_totals(rt: Runtime) -> None:
    """Every open branch's running total equals a from-scratch walk of what hangs from it,
    and each reveal points at the reveal its line hangs from."""
    rt._flush()
    for nid, rec in rt._revealed.items():
        assert rec.tokens == rt._subtree_items(nid)[0], nid
        assert rec.up is rt._revealed.get(rt._visible[nid])


# --- B5: a budget below the baseline -------------------------------------------------------
def test_b5_budget_below_baseline_is_refused(tree: Manifest) -> None:
    baseline = Runtime(tree).baseline_tokens
    with pytest.raises(BudgetTooSmall) as info:
        Runtime(tree, budget=baseline - 1)
    assert info.value.baseline == baseline
    with pytest.raises(BudgetTooSmall):
        Runtime(tree, budget=baseline + 10, reserve=11)
    rt = Runtime(tree, budget=baseline)
    assert rt.budget_remaining == 0


def test_effective_budget_is_budget_minus_reserve(tree: Manifest) -> None:
    rt = Runtime(tree, budget=1000, reserve=300)
    assert rt.effective_budget == 700
    assert rt.budget_remaining == 700 - rt.spent
    with pytest.raises(ManifestError):
        Runtime(tree, reserve=-1)


# --- B6: look twice charges once -----------------------------------------------------------
def test_b6_repeated_look_is_free(tree: Manifest) -> None:
    rt = Runtime(tree, view_level="title")
    start = rt.spent
    rt.look(["a"])
    once = rt.spent
    assert once > start
    rt.look(["a"])
    rt.look(["a", "a"])
    assert rt.spent == once
    rt.look(["a"], level="brief")  # never downgrades, never charges
    assert rt.spent == once
    assert_ledger(rt)


def test_look_is_atomic_and_frontier_only(tree: Manifest) -> None:
    rt = Runtime(tree, view_level="title")
    with pytest.raises(NotOnFrontier):
        rt.look(["a", "a.1"])
    assert rt.spent == rt.baseline_tokens
    tight = Runtime(tree, view_level="title", budget=rt.baseline_tokens + 1)
    with pytest.raises(DisclosureRefused):
        tight.look(["a", "b"])
    assert tight.spent == tight.baseline_tokens


# --- B7: the summary level never returns full content ---------------------------------------
def test_b7_summary_serves_and_charges_the_summary(tree: Manifest, resolver: LeafResolver) -> None:
    rt = Runtime(tree, resolver=resolver)
    rt.expand("a")
    with pytest.raises(LevelUnavailable, match="no summary resolver"):
        rt.expand("a.1", level="summary")
    rt = Runtime(tree, resolver=resolver, summary_resolver=dict_resolver({"a.1": "short"}))
    rt.expand("a")
    before = rt.spent
    text = rt.expand("a.1", level="summary")
    assert text.endswith("short") and "verbatim body" not in text
    assert rt.spent - before == rt.counter.count(text)
    with pytest.raises(LevelUnavailable, match="advertises no summary"):
        rt.expand("a.2", level="summary")
    # switching the same leaf to full replaces the summary, charged on the full text
    full = rt.expand("a.1")
    assert "verbatim body of a.1" in full
    assert_ledger(rt)


# --- B8: true LRU, and branch reveals can be reclaimed --------------------------------------
def test_b8_eviction_is_lru_not_fifo(tree: Manifest, resolver: LeafResolver) -> None:
    probe = Runtime(tree, resolver=resolver)
    probe.expand("a")
    probe.expand("b")
    leaf = probe.expand_cost("a.1")
    rt = Runtime(tree, resolver=resolver, auto_collapse=True, budget=probe.spent + 2 * leaf + 5)
    rt.expand("a")
    rt.expand("b")
    rt.expand("a.1")
    rt.expand("a.2")
    rt.expand("a.1")  # re-open refreshes a.1: a.2 is now least recently used
    rt.expand("b.1")
    assert rt.is_spliced("a.1") and not rt.is_spliced("a.2") and rt.is_spliced("b.1")
    assert_ledger(rt)


def test_b8_branch_reveals_are_reclaimable(tree: Manifest, resolver: LeafResolver) -> None:
    rt = Runtime(tree, resolver=resolver)
    base = rt.spent
    rt.expand("a")
    rt.expand("a.1")
    assert rt.collapse("a") > 0
    assert rt.spent == base and not rt.is_visible("a.1") and not rt.is_spliced("a.1")
    # auto-collapse reclaims an old reveal (with its children) when a leaf needs room
    probe = Runtime(tree, resolver=resolver)
    probe.expand("a")
    probe.expand("b")
    need = probe.spent + probe.expand_cost("b.1") - 1
    rt = Runtime(tree, resolver=resolver, auto_collapse=True, budget=need)
    rt.expand("a")
    rt.expand("b")
    rt.expand("b.1")
    assert not rt.is_revealed("a") and rt.is_spliced("b.1")
    assert_ledger(rt)


def test_auto_collapse_never_evicts_the_path_to_the_target(
    tree: Manifest, resolver: LeafResolver
) -> None:
    probe = Runtime(tree, resolver=resolver)
    probe.expand("a")
    rt = Runtime(
        tree,
        resolver=resolver,
        auto_collapse=True,
        budget=probe.spent + probe.expand_cost("a.1") - 1,
    )
    rt.expand("a")
    with pytest.raises(DisclosureRefused):
        rt.expand("a.1")
    assert rt.is_revealed("a") and rt.spent == probe.spent


def test_refusal_without_auto_collapse_changes_nothing(
    tree: Manifest, resolver: LeafResolver
) -> None:
    probe = Runtime(tree, resolver=resolver)
    probe.expand("a")
    rt = Runtime(tree, resolver=resolver, budget=probe.spent + 3)
    rt.expand("a")
    spent = rt.spent
    with pytest.raises(DisclosureRefused) as info:
        rt.expand("a.1")
    assert info.value.overage == info.value.cost - info.value.remaining > 0
    assert "collapse" in info.value.suggestion
    assert rt.spent == spent and not rt.is_spliced("a.1")


# --- B9: the frontier is enforced, the envelope charged -------------------------------------
def test_b9_opening_off_the_frontier_is_refused(tree: Manifest, resolver: LeafResolver) -> None:
    rt = Runtime(tree, resolver=resolver)
    with pytest.raises(NotOnFrontier, match="open 'a' first"):
        rt.expand("a.1")
    assert rt.spent == rt.baseline_tokens
    rt.expand("a")
    assert "verbatim body of a.1" in rt.expand("a.1")


def test_b9_envelope_is_charged_and_names_unseen_ancestors(
    tree: Manifest, resolver: LeafResolver
) -> None:
    rt = Runtime(tree, resolver=resolver)
    rt.expand("a")
    before = rt.spent
    text = rt.expand("a.1")
    assert text.startswith("[context] Root › Alpha › A1")
    assert rt.spent - before == rt.counter.count(text)
    # a lateral jump (followed link) shows the unseen parent's descriptor in the envelope
    rt.disclose(["b.2"])
    rt.collapse("b.2")
    rt2 = Runtime(tree, resolver=resolver)
    rt2.expand("a")
    rt2.disclose([t for t, _ in rt2.related("a.1")])
    rt2.collapse("b")  # nothing: b was never revealed
    text2 = rt2.expand("b.2")
    assert "  - Beta: Beta things" not in text2  # b is a visible tier-1 line already
    assert_ledger(rt2)


def test_envelope_lists_ancestor_descriptors_only_when_not_visible(b: Any) -> None:
    d = b.doc(
        {
            "x": b.node("X branch", "x", title="X", children=["y"]),
            "y": b.node("Y branch", "y", title="Y", children=["z"]),
            "z": b.node("Z leaf", "z", title="Z", payload={"ref": "node://z"}),
            "w": b.node(
                "W leaf",
                "w",
                title="W",
                payload={"ref": "node://w"},
                links=[{"to": "z", "why": "w relates to z"}],
            ),
        },
        ["x", "w"],
    )
    rt = Runtime(load_manifest(d), resolver=dict_resolver({"z": "zz", "w": "ww"}))
    rt.disclose([t for t, _ in rt.related("w")], {"z": "w relates to z"})
    text = rt.expand("z")
    assert "  - Y: Y branch" in text and "  - X:" not in text
    assert_ledger(rt)


# --- B19: one tokenizer, exactly what is rendered -------------------------------------------
def test_b19_one_counter_prices_everything(tree: Manifest, resolver: LeafResolver) -> None:
    spy = SpyCounter()
    rt = Runtime(
        tree, resolver=resolver, counter=spy, view_level="title", protocol_text="read the index"
    )
    assert spy.calls > 0
    rt.look(["a"])
    rt.expand("a")
    rt.expand("a.1")
    rt.disclose(["b.2"], {"b.2": "why not"})
    assert_ledger(rt)
    # stored desc_tokens are ignored: the rendered line is what is charged
    lines = rt.ledger()
    assert lines[0].key == "@protocol" and lines[0].tokens == 3
    assert any(e.key == "a" and e.text == render_line("a", tree.get("a"), "full") for e in lines)


def test_b19_stored_desc_tokens_do_not_drive_charges(b: Any) -> None:
    d = b.tree_doc()
    for n in d["nodes"].values():
        n["desc_tokens"] = 999
    rt = Runtime(load_manifest(d))
    assert rt.baseline_tokens < 100
    assert_ledger(rt)


# --- B10 lives in the session tests; here the leaf stays verbatim ----------------------------
def test_leaves_resolve_verbatim(tree: Manifest, b: Any) -> None:
    rt = Runtime(tree, resolver=dict_resolver(b.leaves), leaf_context=False)
    rt.expand("a")
    text = rt.expand("a.2")
    assert text == "--- a.2 (full) ---\n" + b.leaves["a.2"]
    rt3 = Runtime(tree, resolver=dict_resolver({}))
    rt3.expand("a")
    with pytest.raises(ResolveError, match="ship it in the local store"):
        rt3.expand("a.1")
    assert not rt3.is_spliced("a.1")


def test_ref_mode_charges_the_declared_payload(tree: Manifest) -> None:
    rt = Runtime(tree)
    rt.expand("a")
    before = rt.spent
    text = rt.expand("a.1")
    assert "node://a.1" in text
    assert rt.spent - before == rt.counter.count(text) + 100


def test_repeated_open_is_free(tree: Manifest, resolver: LeafResolver) -> None:
    rt = Runtime(tree, resolver=resolver)
    rt.expand("a")
    after_branch = rt.spent
    rt.expand("a")
    assert rt.spent == after_branch
    first = rt.expand("a.1")
    spent = rt.spent
    assert rt.expand("a.1") == first and rt.spent == spent


def test_root_cannot_be_opened_and_unknown_ids_are_named(tree: Manifest) -> None:
    rt = Runtime(tree)
    with pytest.raises(ManifestError, match="root"):
        rt.expand("r")
    with pytest.raises(ManifestError, match="Unknown node id 'nope'"):
        rt.expand("nope")
    with pytest.raises(ManifestError, match="view level"):
        Runtime(tree, view_level="huge")  # type: ignore[arg-type]


def test_peek_related_facets_search_reconcile(tree: Manifest) -> None:
    rt = Runtime(tree)
    entries = rt.peek()
    assert [e.node_id for e in entries] == ["a", "b"]
    assert entries[0].expand_cost == rt.expand_cost("a") > 0
    assert rt.related("a.1") == [("b.2", "shares a setting")]
    assert rt.find_by_facets(kind="howto") == ["a.1", "b.1"]
    assert rt.find_by_facets() == []
    assert rt.search("second beta", k=2)[0] == "b.2"
    assert rt.reconcile(current_identity=None) == []
    warn = rt.reconcile(current_identity="sha256:new", live_ids={"a", "b", "a.1"})
    assert "stale manifest" in warn[0] and "3 node(s) no longer exist" in warn[1]


def test_views_get_shorter(homelab: Manifest) -> None:
    costs = [Runtime(homelab, view_level=v).baseline_tokens for v in ("title", "brief", "full")]
    assert costs[0] < costs[1] < costs[2]


# --- property: whatever the agent does, the budget holds and the ledger is exact ------------
_ops = st.lists(
    st.tuples(
        st.sampled_from(["open", "look", "close", "disclose", "summary"]),
        st.sampled_from(["a", "b", "a.1", "a.2", "b.1", "b.2"]),
    ),
    max_size=25,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(_ops, st.integers(0, 400), st.booleans(), st.sampled_from(["title", "brief", "full"]))
def test_budget_never_exceeded(
    b: Any, ops: list[tuple[str, str]], slack: int, auto: bool, level: str
) -> None:
    m = load_manifest(b.tree_doc())
    base = Runtime(m, view_level=level).baseline_tokens  # type: ignore[arg-type]
    rt = Runtime(
        m,
        budget=base + slack,
        auto_collapse=auto,
        view_level=level,  # type: ignore[arg-type]
        resolver=dict_resolver(b.leaves),
        summary_resolver=dict_resolver({"a.1": "s"}),
        counter=HeuristicCounter(),
    )
    for op, nid in ops:
        try:
            if op == "open":
                rt.expand(nid)
            elif op == "summary":
                rt.expand(nid, level="summary")
            elif op == "look":
                rt.look([nid])
            elif op == "close":
                # The planning walk (what auto-collapse counts on freeing) and the collapse
                # itself must agree on every token.
                planned = (
                    rt._subtree_items(nid)[0]
                    if rt.is_revealed(nid) and not rt.is_spliced(nid)
                    else None
                )
                freed = rt.collapse(nid)
                assert planned is None or freed == planned
            else:
                rt.disclose([nid])
        except ManifestError:
            pass
        assert_ledger(rt)
        assert rt.budget_remaining >= 0
