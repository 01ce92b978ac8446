"""The distiller against spec §5.1–5.8 and invariants P1–P5, P8–P12, P17, P20, P21, P25, P26
plus fixes A, B, C, I, J, L. Counters are the oracles."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from picocontext.distill import (
    ROOT_ID,
    UNCLUSTERED_ID,
    CorruptBlob,
    Distiller,
    GuardInput,
    GuardResult,
    GuardStage,
    Unit,
)
from picocontext.distill.ids import is_intermediate
from picocontext.distill.testing import (
    ConstantEmbedder,
    FakeGuard,
    FakeSummarizer,
    MakeDistiller,
    VariedEmbedder,
    build,
    note,
    seven_node_units,
)


def _fields(d: Distiller) -> dict[str, tuple[str, str, str]]:
    return {n.id: (n.content_hash, n.summary_hash, n.sem_hash) for n in d.store.nodes()}


def _io(d: Distiller) -> tuple[int, int, int, int, int]:
    c = d.counters.snapshot()
    return (c["summaries"], c["embed_calls"], d.cas.writes, d.store.node_writes, d.cas.reads)


# -- §5.1 L0 ---------------------------------------------------------------------------------


def test_l0_summarizes_then_short_circuits(make_distiller: MakeDistiller) -> None:
    s = FakeSummarizer()
    d = make_distiller(summarizer=s)
    d.apply([note("n1", "vibration high", title="Pump")])
    l0 = [i for i in s.inputs if i.level == 0]
    assert len(l0) == 1 and l0[0].kind == "entity" and l0[0].raw == "Pump vibration high"
    assert l0[0].budget == 256
    blobs = len(d.cas)
    calls = s.calls
    d.apply([note("n1", "vibration high", title="Pump")])
    assert s.calls == calls and len(d.cas) == blobs
    assert d.counters.get("shortcircuit") >= 1
    d.apply([note("n1", "vibration low", title="Pump")])
    assert [i.raw for i in s.inputs if i.level == 0][-1] == "Pump vibration low"


def test_unit_budget_is_passed_to_the_summarizer(make_distiller: MakeDistiller) -> None:
    s = FakeSummarizer()
    d = make_distiller(summarizer=s)
    d.apply([Unit(source_kind="n", unit_id="a", text="one two three four", budget=2)])
    node = d.store.get("digest:0:n:a")
    assert node is not None and d.cas.retrieve_text(node.summary_hash) == "l0(one two"


def test_blank_text_writes_nothing_and_deletes_an_existing_leaf(
    make_distiller: MakeDistiller,
) -> None:
    s = FakeSummarizer()
    d = make_distiller(summarizer=s)
    d.apply([note("n1", "   ")])
    assert s.calls == 0 and len(d.cas) == 0 and d.store.count() == 0
    d.apply([note("n1", "some text")])
    assert d.store.get("digest:0:note:n1") is not None
    d.apply([note("n1", " \n ")])  # fix J
    assert d.store.get("digest:0:note:n1") is None and d.store.get(ROOT_ID) is None


def test_guard_blocks_fail_closed(make_distiller: MakeDistiller) -> None:
    d = make_distiller(guard=FakeGuard())
    d.apply([note("n1", "the SECRET plan")])
    assert len(d.cas) == 0 and d.store.get("digest:0:note:n1") is None
    assert d.counters.get("guard_blocked") == 1


def test_guard_redacts_before_summary_and_in_every_blob(make_distiller: MakeDistiller) -> None:
    s = FakeSummarizer()
    d = make_distiller(summarizer=s, guard=FakeGuard())
    d.apply([note("n1", "pin 12345 for door", "s1"), note("n2", "call 5550199 later", "s1")])
    assert all("12345" not in i.raw and "5550199" not in i.raw for i in s.inputs)
    for address in d.cas.addresses():  # P9: no CAS blob has the pattern
        text = d.cas.retrieve_text(address)
        assert "12345" not in text and "5550199" not in text
    assert d.store.get("digest:0:note:n1") is not None


def test_guard_error_fail_open_passes_original_text(make_distiller: MakeDistiller) -> None:
    s = FakeSummarizer()
    d = make_distiller(summarizer=s, guard=FakeGuard(raise_error=True), fail_open_guard=True)
    d.apply([note("n1", "pin 12345")])
    assert [i.raw for i in s.inputs if i.level == 0] == ["pin 12345"]


def test_guard_error_fail_closed_keeps_the_row_byte_identical(
    make_distiller: MakeDistiller,
) -> None:
    d = make_distiller(guard=FakeGuard())
    d.apply([note("n1", "first version")])
    before = d.store.get("digest:0:note:n1")
    vec_before = d.store.get_vector("digest:0:note:n1")
    d.guard = FakeGuard(raise_error=True)
    writes = d.cas.writes
    d.apply([note("n1", "second version")])
    assert d.store.get("digest:0:note:n1") == before  # P8
    vec_after = d.store.get_vector("digest:0:note:n1")
    assert vec_after is not None and vec_before is not None
    assert np.array_equal(vec_after, vec_before)
    assert d.cas.writes == writes
    assert d.counters.get("guard_blocked") == 1


def test_emit_guard_block_keeps_previous_hashes(make_distiller: MakeDistiller) -> None:
    class EmitBlocker:
        version = "emit-1"

        def guard(self, request: GuardInput) -> GuardResult:
            if request.stage == GuardStage.EMIT and "forbidden" in request.text:
                return GuardResult(blocked=True, reason="no")
            return GuardResult(text=request.text)

    d = make_distiller(guard=EmitBlocker())
    d.apply([note("n1", "allowed text", "s1")])
    before = d.store.get("digest:0:note:n1")
    d.apply([note("n1", "forbidden text", "s1")])
    assert d.store.get("digest:0:note:n1") == before


# -- §5.2 dedup and tokens -------------------------------------------------------------------


def test_exact_dedup_across_sweeps_reuses_summary_and_vector(
    make_distiller: MakeDistiller,
) -> None:
    s = FakeSummarizer()
    e = VariedEmbedder()
    d = make_distiller(summarizer=s, embedder=e)
    d.apply([note("a", "identical body")])
    l0_calls = sum(1 for i in s.inputs if i.level == 0)
    embedded = d.counters.get("embedded_texts")
    d.mark(note("b", "identical body"))
    # Only the L0 phase: embed calls made by the second leaf itself.
    refs = d.store.pending()
    d._process_batch(refs)
    assert d.counters.get("embedded_texts") == embedded  # P10: 0 embed calls
    assert sum(1 for i in s.inputs if i.level == 0) == l0_calls
    a, b = d.store.get("digest:0:note:a"), d.store.get("digest:0:note:b")
    assert a is not None and b is not None and a.summary_hash == b.summary_hash != ""
    assert a.sem_hash == b.sem_hash
    va, vb = d.store.get_vector(a.id), d.store.get_vector(b.id)
    assert va is not None and vb is not None and np.array_equal(va, vb)
    assert d.counters.get("dedup") == 1


def test_exact_dedup_within_one_batch(make_distiller: MakeDistiller) -> None:
    s = FakeSummarizer()
    d = make_distiller(summarizer=s, embedder=VariedEmbedder())
    d.apply([note("a", "same words"), note("b", "same words"), note("c", "other words")])
    assert sum(1 for i in s.inputs if i.level == 0) == 2
    a, b = d.store.get("digest:0:note:a"), d.store.get("digest:0:note:b")
    assert a is not None and b is not None and a.summary_hash == b.summary_hash
    assert d.counters.get("dedup") == 1


def test_persisted_tokens_are_the_tokenizer_count(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    d.apply(seven_node_units())
    for node in d.store.nodes():
        summary = d.cas.retrieve_text(node.summary_hash)
        assert node.tokens == len(summary.split()) > 0  # P25
    assert d.tokenizer("one two three") == 3


# -- §5.3/5.4 rollup -------------------------------------------------------------------------


def test_seven_node_tree(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    report = d.apply(seven_node_units())
    ids = {n.id for n in d.store.nodes()}
    assert ids == {
        "digest:0:note:n1",
        "digest:0:note:n2",
        "digest:0:note:n3",
        "digest:1:scope:site:s1",
        "digest:1:scope:site:s2",
        next(i for i in ids if i.startswith("digest:1:cluster:")),
        ROOT_ID,
    }
    root = d.store.get(ROOT_ID)
    assert root is not None and "digest:1:scope:site:s1" in root.child_ids
    assert report.rollup is not None and report.rollup.tenant_rolled
    assert report.rollup.scope_nodes == 2 and report.rollup.cluster_nodes == 1
    leaf = d.store.get("digest:0:note:n1")
    assert leaf is not None and leaf.parent_ids[0] == "digest:1:scope:site:s1"
    assert leaf.parent_ids[1].startswith("digest:1:cluster:")
    assert leaf.kind == "entity" and leaf.source_kind == "note" and leaf.source_id == "n1"
    for n in d.store.nodes():
        assert n.level == {"entity": 0, "scope": 1, "cluster": 1, "tenant": 2}[n.kind]


def test_unchanged_rollup_is_free(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    d.apply(seven_node_units())
    snap = _fields(d)
    before = _io(d)
    report = d.rollup()
    assert _io(d) == before  # P12: 0 summaries, 0 embeds, 0 CAS writes/reads, 0 node writes
    assert not report.tenant_rolled and report.short_circuits > 0
    assert _fields(d) == snap


def test_resync_is_a_no_op(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    units = seven_node_units()
    d.reconcile("note", units)
    snap = _fields(d)
    before = _io(d)
    report = d.reconcile("note", units)
    assert report.marked == 0 and report.unchanged == 3
    assert _io(d) == before  # P1
    assert _fields(d) == snap


def test_one_leaf_edit_calls_at_most_four_summaries(make_distiller: MakeDistiller) -> None:
    s = FakeSummarizer()
    d = make_distiller(summarizer=s)
    d.apply(seven_node_units())
    before = _fields(d)
    calls = s.calls
    d.apply([note("n1", "vibration critical", "s1", title="Pump")])
    assert 1 <= s.calls - calls <= 4  # n1, s1, the cluster, the root
    after = _fields(d)
    for keep in ("digest:0:note:n2", "digest:0:note:n3", "digest:1:scope:site:s2"):
        assert after[keep] == before[keep]
    assert after[ROOT_ID][0] != before[ROOT_ID][0]


def test_swapping_two_texts_keeps_content_hashes_but_rewrites_stale_summaries(
    tmp_path: Path,
) -> None:
    # a (site s1) and b (site s2) swap texts: every internal ContentHash stays the same (the
    # cluster and the root cover the same multisets), but scope s1 now holds what s2 held, so
    # the cluster's and the root's summaries read their children in a different order. Reusing
    # them under the unchanged ContentHash would keep summaries no clean build would write.
    s = FakeSummarizer()
    d = build(tmp_path / "inc", summarizer=s)
    d.apply([note("a", "pump vibration", "s1"), note("b", "valve pressure", "s2")])
    before = {n.id: n for n in d.store.nodes()}
    calls = s.calls
    d.apply([note("a", "valve pressure", "s1"), note("b", "pump vibration", "s2")])
    after = {n.id: n for n in d.store.nodes()}
    cluster = next(i for i in after if i.startswith("digest:1:cluster:"))
    for node_id in (cluster, ROOT_ID):
        assert after[node_id].content_hash == before[node_id].content_hash
        assert after[node_id].summary_hash != before[node_id].summary_hash
    summaries = d.snapshot().summaries
    assert summaries[cluster] == "rollup(l0(valve pressure)|l0(pump vibration))"
    # Leaves dedup from each other; s1, s2, the cluster and the root are re-summarised once.
    assert s.calls - calls == 4
    clean = build(tmp_path / "clean")
    clean.apply([note("a", "valve pressure", "s1"), note("b", "pump vibration", "s2")])
    assert d.table() == clean.table()
    calls = s.calls
    d.rollup()
    assert s.calls == calls  # and the new inputs short-circuit from now on (P12)


def test_internal_rows_without_an_input_hash_are_summarised_once(
    make_distiller: MakeDistiller,
) -> None:
    # Rows written before the summary-input hash existed carry an empty one: their summary's
    # inputs are unknown, so the next rollup re-summarises them once (same text: a pure
    # function of the same inputs), then short-circuits.
    s = FakeSummarizer()
    d = make_distiller(summarizer=s)
    d.apply(seven_node_units())
    table = d.table()
    internal = [n for n in d.store.nodes() if n.level > 0]
    assert all(n.membership_hash for n in internal)
    with d.store.transaction():
        for n in internal:
            d.store.upsert(n.model_copy(update={"membership_hash": ""}))
    calls = s.calls
    d.rollup()
    assert s.calls - calls == len(internal)
    assert d.table() == table
    calls = s.calls
    d.rollup()
    assert s.calls == calls


def test_root_is_summarised_at_most_once_per_sweep(make_distiller: MakeDistiller) -> None:
    s = FakeSummarizer()
    d = make_distiller(summarizer=s, embedder=VariedEmbedder(), max_fan_in=3, sub_bits=1)
    units = [note(f"n{i}", f"note {i}", f"s{i % 4}") for i in range(20)]
    for batch in (units, [note("n1", "edited"), note("n7", "edited too")]):
        start = len(s.inputs)
        d.apply(batch)
        assert sum(1 for i in s.inputs[start:] if i.level == 2) <= 1  # P20


# -- fix A: orphans reach the root -----------------------------------------------------------


def test_leaves_in_no_scope_and_no_cluster_reach_the_root(make_distiller: MakeDistiller) -> None:
    d = make_distiller(embedder=VariedEmbedder())
    d.apply([note("solo", "alone in the corpus")])
    bucket = d.store.get(UNCLUSTERED_ID)
    root = d.store.get(ROOT_ID)
    assert bucket is not None and bucket.child_ids == ("digest:0:note:solo",)
    assert root is not None and root.child_ids == (UNCLUSTERED_ID,)
    old_root = root.content_hash
    d.apply([note("solo", "alone but edited")])
    root = d.store.get(ROOT_ID)
    assert root is not None and root.content_hash != old_root  # P4 with fix A


# -- fix C: membership moves without LLM calls -----------------------------------------------


def test_scope_move_refreshes_links_without_summarising_the_leaf(
    make_distiller: MakeDistiller,
) -> None:
    s = FakeSummarizer()
    d = make_distiller(summarizer=s)
    d.apply([note("n1", "text one", "s1"), note("n2", "text two", "s1")])
    leaf_before = d.store.get("digest:0:note:n1")
    d.apply([note("n1", "text one", "s2")])
    assert not any(i.level == 0 for i in s.inputs[-5:])
    leaf = d.store.get("digest:0:note:n1")
    assert leaf is not None and leaf_before is not None
    assert leaf.summary_hash == leaf_before.summary_hash
    assert leaf.parent_ids[0] == "digest:1:scope:site:s2"
    s1 = d.store.get("digest:1:scope:site:s1")
    s2 = d.store.get("digest:1:scope:site:s2")
    assert s1 is not None and s1.child_ids == ("digest:0:note:n2",)
    assert s2 is not None and s2.child_ids == ("digest:0:note:n1",)
    assert d.counters.get("links_refreshed") == 1


# -- §5.6 deletes ----------------------------------------------------------------------------


def test_delete_collapses_cluster_and_is_idempotent(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    d.apply([note("n1", "alpha", "s1"), note("n2", "beta", "s1")])
    cluster = next(n.id for n in d.store.nodes() if n.id.startswith("digest:1:cluster:"))
    assert d.delete_unit("note", "n1")
    assert d.store.get("digest:0:note:n1") is None
    assert d.store.get_vector("digest:0:note:n1") is None
    d.rollup()
    assert d.store.get(cluster) is None  # below the floor
    n2 = d.store.get("digest:0:note:n2")
    assert n2 is not None and cluster not in n2.parent_ids
    assert not d.delete_unit("note", "n1")


def test_deleting_everything_removes_the_root(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    d.apply(seven_node_units())
    d.apply([], deletes=[("note", "n1"), ("note", "n2"), ("note", "n3")])
    assert d.store.count() == 0
    d.rollup()
    d.rollup()
    assert d.store.get(ROOT_ID) is None


def test_empty_scopes_disappear(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    d.apply(seven_node_units())
    d.apply([], deletes=[("note", "n3")])
    assert d.store.get("digest:1:scope:site:s2") is None
    assert "digest:1:scope:site:s2" not in d.store.get(ROOT_ID).child_ids  # type: ignore[union-attr]


def test_reconcile_deletes_vanished_units(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    units = seven_node_units()
    d.reconcile("note", units)
    report = d.reconcile("note", units[:2])  # fix I
    assert report.deletes == 1 and d.store.get("digest:0:note:n3") is None


def test_delete_then_create_in_one_sweep(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    d.mark(note("x", "created"))
    d.mark_delete("note", "x")
    d.sweep()
    assert d.store.get("digest:0:note:x") is None and d.store.count() == 0


# -- §5.7/5.8 end to end ---------------------------------------------------------------------


def test_e2e_build_edit_secret_and_delete(make_distiller: MakeDistiller) -> None:
    d = make_distiller(guard=FakeGuard())
    d.apply(seven_node_units())
    assert d.store.get(ROOT_ID) is not None
    blobs = len(d.cas)
    d.apply([note("n4", "the SECRET recipe", "s1")])
    assert len(d.cas) == blobs
    snap = _fields(d)
    d.rollup()
    assert _fields(d) == snap and snap
    d.apply([], deletes=[("note", "n2")])
    assert d.store.get("digest:0:note:n2") is None


# -- P5 recipe -------------------------------------------------------------------------------


def test_recipe_bump_invalidates_everything(tmp_path: Path) -> None:
    units = [*seven_node_units(), note("n4", "vibration high", "s2", title="Pump")]
    d1 = build(tmp_path / "c", recipe_version="v1")
    d1.reconcile("note", units)
    before = _fields(d1)
    d1.close()
    s = FakeSummarizer()
    d2 = build(tmp_path / "c", summarizer=s, recipe_version="v2")
    d2.reconcile("note", units)
    after = _fields(d2)
    assert set(before) == set(after)
    assert all(after[i][0] != before[i][0] for i in before)
    internal = sum(1 for n in d2.store.nodes() if n.level > 0)
    assert s.calls == 3 + internal  # 3 distinct sources (n4 duplicates n1) + internal nodes


def test_computed_recipe_changes_with_the_summarizer(tmp_path: Path) -> None:
    a = build(tmp_path / "a", recipe_version="", summarizer=FakeSummarizer(tag="-a"))
    b = build(tmp_path / "b", recipe_version="", summarizer=FakeSummarizer(tag="-b"))
    assert a.recipe != b.recipe and a.recipe.startswith("r1-")


def test_semantic_recipe_change_reembeds_without_summaries(tmp_path: Path) -> None:
    units = [note(f"n{i}", f"text number {i}", "s1") for i in range(5)]
    d1 = build(tmp_path / "c", embedder=VariedEmbedder(8))
    d1.reconcile("note", units)
    d1.close()
    s = FakeSummarizer()
    d2 = build(tmp_path / "c", summarizer=s, embedder=VariedEmbedder(16))
    d2.reconcile("note", units)
    l0_calls = [i for i in s.inputs if i.level == 0]
    assert l0_calls == []  # fix K: no leaf re-summarised
    assert all(d2.store.get_vector(n.id).size == 16 for n in d2.store.nodes())  # type: ignore[union-attr]


# -- P17 adaptive depth ----------------------------------------------------------------------


class _Spread:
    """Distinct, well-spread SemHashes: unit vectors on distinct axes of a wide space."""

    def __init__(self) -> None:
        self.calls = 0

    @property
    def embedder_id(self) -> str:
        return "spread"

    @property
    def dims(self) -> int:
        return 64

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls += 1
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for row, text in enumerate(texts):
            rng = np.random.default_rng(abs(hash(text)) % (1 << 32))
            out[row] = rng.standard_normal(64)
        return out


def _check_shape(d: Distiller, max_fan_in: int) -> None:
    nodes = {n.id: n for n in d.store.nodes()}
    for n in nodes.values():
        if n.level > 0:
            assert len(n.child_ids) <= max_fan_in, n.id
            assert all(c in nodes for c in n.child_ids)
        if is_intermediate(n.id):
            parent = nodes.get(n.parent_ids[0])
            assert parent is not None and n.id in parent.child_ids  # no orphaned '#' nodes


def test_adaptive_depth_splits_and_cleans_up(make_distiller: MakeDistiller) -> None:
    d = make_distiller(embedder=VariedEmbedder(16), max_fan_in=4, sub_bits=2, noise_floor=99)
    d.apply([note(f"n{i:02d}", f"distinct note {i}", "s1") for i in range(24)])
    assert any(is_intermediate(n.id) for n in d.store.nodes())
    assert d.counters.get("splits") > 0
    _check_shape(d, 4)
    summaries = d.counters.get("summaries")
    d.rollup()
    assert d.counters.get("summaries") == summaries  # fix B: no '#' rebuilt when unchanged
    d.apply([], deletes=[("note", f"n{i:02d}") for i in range(20)])
    _check_shape(d, 4)
    assert d.counters.get("intermediate_gc") > 0


def test_no_intermediates_under_the_cap(make_distiller: MakeDistiller) -> None:
    d = make_distiller(embedder=VariedEmbedder(16), max_fan_in=64)
    d.apply([note(f"n{i}", f"note {i}", "s1") for i in range(3)])
    assert not any(is_intermediate(n.id) for n in d.store.nodes())


def test_token_budget_also_forces_splits(make_distiller: MakeDistiller) -> None:
    d = make_distiller(embedder=VariedEmbedder(16), input_budget=10, noise_floor=99)
    d.apply([note(f"n{i}", f"word {i} " * 3, "s1") for i in range(8)])
    assert any(is_intermediate(n.id) for n in d.store.nodes())


def test_identical_semhashes_cannot_split_and_roll_up_as_is(
    make_distiller: MakeDistiller,
) -> None:
    d = make_distiller(embedder=ConstantEmbedder(), max_fan_in=2)
    d.apply([note(f"n{i}", f"note {i}", "s1") for i in range(5)])
    scope = d.store.get("digest:1:scope:site:s1")
    assert scope is not None and len(scope.child_ids) == 5
    assert not any(is_intermediate(n.id) for n in d.store.nodes())


# -- P26 negative cache ----------------------------------------------------------------------


class _PoisonRollups:
    """Blocks internal summaries that mention 'poison' (leaves pass)."""

    version = "poison-1"

    def guard(self, request: GuardInput) -> GuardResult:
        if request.stage == GuardStage.EMIT and request.level > 0 and "poison" in request.text:
            return GuardResult(blocked=True, reason="poisoned rollup")
        return GuardResult(text=request.text)


def test_blocked_internal_node_is_retried_at_most_once(make_distiller: MakeDistiller) -> None:
    s = FakeSummarizer()
    d = make_distiller(summarizer=s, guard=_PoisonRollups(), embedder=VariedEmbedder())
    d.apply([note("a", "clean", "s1"), note("b", "also clean", "s1"), note("z", "other", "s2")])
    scope_before = d.store.get("digest:1:scope:site:s1")
    d.apply([note("a", "poison", "s1")])
    s1_calls = [i for i in s.inputs if i.scope.id == "s1"]
    for k in range(3):  # unrelated edits trigger more rollups
        d.apply([note("z", f"other {k}", "s2")])
    assert len([i for i in s.inputs if i.scope.id == "s1"]) == len(s1_calls)
    assert d.store.get("digest:1:scope:site:s1") == scope_before  # keeps previous hashes
    assert d.store.blocked_count() >= 1


# -- P21 GC after re-summarising -------------------------------------------------------------


def test_gc_never_removes_live_summaries(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    d.apply(seven_node_units())
    d.apply([note("n1", "changed", "s1")])
    report = d.gc(grace_seconds=0.0, now=1e12)
    assert report.removed > 0 and report.missing_live == ()
    for n in d.store.nodes():
        assert d.cas.retrieve_text(n.summary_hash)
        if n.source_hash:
            assert d.cas.retrieve_text(n.source_hash)
    d.rollup()


def test_sorted_sweep_order_picks_a_deterministic_donor(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    for unit_id in ("zz", "mm", "aa"):
        d.mark(note(unit_id, "same text"))
    d.sweep()
    assert d.counters.get("dedup") == 2  # "aa" summarised first, then reused (fix L)


def test_counters_expose_the_reference_metric_names(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    d.apply(seven_node_units())
    text = d.counters.prometheus()
    for name in (
        "fabriq_distill_summaries_total",
        "fabriq_distill_shortcircuit_total",
        "fabriq_distill_nodes_total",
        "fabriq_distill_guard_blocked_total",
        "fabriq_distill_failures_total",
        "fabriq_distill_splits_total",
        "fabriq_distill_dedup_total",
        "fabriq_distill_intermediate_gc_total",
    ):
        assert f"\n{name} " in "\n" + text
    assert f"fabriq_distill_summaries_total {d.counters.get('summaries')}" in text


def test_summarizer_failure_is_counted_and_the_sweep_continues(
    make_distiller: MakeDistiller,
) -> None:
    s = FakeSummarizer(fail_on="broken")
    d = make_distiller(summarizer=s)
    report = d.apply([note("a", "broken unit", "s1"), note("b", "fine unit", "s1")])
    assert report.failures == 1 and d.counters.get("failures") == 1
    assert d.store.get("digest:0:note:b") is not None
    assert d.store.get("digest:0:note:a") is None
    # The failing ref is retried on later sweeps, then dropped after max_attempts.
    d.sweep()
    d.sweep()
    assert d.store.pending_count() == 0


def test_repair_drops_nodes_with_corrupt_blobs_and_sync_rebuilds_them(
    make_distiller: MakeDistiller,
) -> None:
    d = make_distiller()
    units = seven_node_units()
    d.reconcile("note", units)
    table = d.table()
    leaf = d.store.get("digest:0:note:n2")
    assert leaf is not None
    d.cas.path_of(leaf.summary_hash).write_bytes(b"torn write")
    with pytest.raises(CorruptBlob):
        d.tools().digest(leaf.id)
    assert d.repair() == ["digest:0:note:n2"]
    d.reconcile("note", units)
    assert d.table() == table
    assert d.cas.retrieve_text(leaf.summary_hash).startswith("l0(")  # rewritten, verified


def test_internal_summary_input_shape(make_distiller: MakeDistiller) -> None:
    s = FakeSummarizer()
    d = make_distiller(summarizer=s)
    d.apply(seven_node_units())
    scope_input = next(i for i in s.inputs if i.kind == "scope" and i.scope.id == "s1")
    assert scope_input.level == 1 and scope_input.scope.name == "site"
    assert scope_input.budget == 256 and scope_input.raw == ""
    assert [(c.id, c.kind) for c in scope_input.children] == [
        ("digest:0:note:n1", "entity"),
        ("digest:0:note:n2", "entity"),
    ]
    assert scope_input.children[0].summary == "l0(Pump vibration high)"
    root_input = next(i for i in s.inputs if i.level == 2)
    assert root_input.kind == "tenant"


def test_rows_carry_unix_nanosecond_timestamps(make_distiller: MakeDistiller) -> None:
    before = time.time_ns()
    d = make_distiller()
    d.apply(seven_node_units())
    assert all(before <= n.updated_at <= time.time_ns() for n in d.store.nodes())


def test_delete_leaves_the_blob_for_gc(make_distiller: MakeDistiller) -> None:
    d = make_distiller()
    d.apply([note("n1", "to be deleted", "s1"), note("n2", "stays", "s1")])
    leaf = d.store.get("digest:0:note:n1")
    assert leaf is not None
    d.apply([], deletes=[("note", "n1")])
    assert d.cas.exists(leaf.summary_hash)
    d.gc(grace_seconds=0.0, now=time.time() + 10)
    assert not d.cas.exists(leaf.summary_hash)


def test_leaf_embeddings_are_batched_per_page(make_distiller: MakeDistiller) -> None:
    e = ConstantEmbedder()
    d = make_distiller(embedder=e, embed_batch=2)
    d.apply([note(f"n{i}", f"distinct text {i}", "s1") for i in range(5)])
    assert e.batches[:3] == [2, 2, 1]  # then one single-text call per internal node
    assert all(b == 1 for b in e.batches[3:])
