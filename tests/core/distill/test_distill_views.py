"""Deferred views and id-keyed splits (the library defaults): a one-leaf edit re-summarises
one root-to-leaf path (≤ depth + 1 summarizer calls), the other level-1 nodes (secondary
scopes, clusters) keep exact ContentHashes and are summarised on first need, and writing
every pending summary yields exactly the table of a clean build — the same summaries an
eager build writes, only later."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext.distill import ROOT_ID, Altitude, DigestTools, DistillConfig, Distiller, Unit
from picocontext.distill.data import DigestNode, GuardInput, GuardResult, GuardStage
from picocontext.distill.embedder import LexicalEmbedder
from picocontext.distill.ids import is_intermediate
from picocontext.distill.testing import FakeSummarizer, ancestors, depth_to

TOPICS = ["relay thermocouple kiln cone", "tomato compost frost mulch", "chain brake tyre hub"]


def _unit(i: int, text: str | None = None, day: int | None = None) -> Unit:
    conv = i // 6
    words = TOPICS[conv % 3].split()
    body = text if text is not None else f"{words[i % 4]} {words[(i * 3) % 4]} turn {i}"
    on_day = conv if day is None else day
    return Unit(
        source_kind="turn",
        unit_id=f"c{conv:02d}:t{i % 6}",
        text=body,
        scopes=(("conversation", f"c{conv:02d}"), ("day", f"d{on_day % 4}")),
    )


def _units(n: int = 36) -> list[Unit]:
    return [_unit(i) for i in range(n)]


def _open(root: Path, summarizer: FakeSummarizer | None = None, **config: object) -> Distiller:
    settings_ = {
        "recipe_version": "views-test",
        "max_fan_in": 4,
        "sub_bits": 2,  # 4-way splits: a split never leaves a node with more than 4 children
        "cluster_bits": 2,
        **config,
    }
    return Distiller.open(
        root,
        summarizer or FakeSummarizer(),
        LexicalEmbedder(64),
        config=DistillConfig.model_validate(settings_),
    )


def _descendants(nodes: dict[str, DigestNode], start: str) -> set[str]:
    out: set[str] = set()
    stack = list(nodes[start].child_ids) if start in nodes else []
    while stack:
        node_id = stack.pop()
        if node_id not in out and node_id in nodes:
            out.add(node_id)
            stack.extend(nodes[node_id].child_ids)
    return out


def _check_shape(d: Distiller) -> None:
    """P17 under the defaults: fan-in capped (id hashes always separate), links consistent,
    no orphaned '#' nodes; views have no parent, everything else reaches the root."""
    nodes = {n.id: n for n in d.store.nodes()}
    for n in nodes.values():
        if n.level > 0:
            assert len(n.child_ids) <= 4 and all(c in nodes for c in n.child_ids), n.id
        # Leaves list their top-level groups and groups list the root (not the intermediates
        # in between, as in the reference); an intermediate lists the node it hangs under.
        assert all(parent in nodes for parent in n.parent_ids), n.id
        if is_intermediate(n.id):
            assert len(n.parent_ids) == 1 and n.id in nodes[n.parent_ids[0]].child_ids, n.id
        elif n.level == 1:
            assert n.parent_ids in ((), (ROOT_ID,)), n.id
    below_root = {ROOT_ID} | _descendants(nodes, ROOT_ID)
    for n in nodes.values():
        top = nodes[n.id.split("#")[0]]  # an intermediate belongs to its top-level group
        in_view = n.level == 1 and not top.parent_ids and top.id != ROOT_ID
        assert in_view or n.id in below_root, n.id  # leaves too: fix A


_BASE: dict[str, Path] = {}


def _base_corpus() -> Path:
    """One built (and completed) corpus per session, copied by each hypothesis example."""
    if "path" not in _BASE:
        root = Path(tempfile.mkdtemp(prefix="distill-views-"))
        d = _open(root / "base")
        d.apply(_units())
        d.complete()
        d.close()
        _BASE["path"] = root / "base"
    return _BASE["path"]


def test_defaults_defer_views_and_split_on_ids() -> None:
    config = DistillConfig()
    assert config.views == "deferred" and config.split_key == "id"


def test_views_hang_off_the_root_and_wait_for_their_summaries(tmp_path: Path) -> None:
    s = FakeSummarizer()
    d = _open(tmp_path / "c", s)
    d.apply(_units())
    nodes = {n.id: n for n in d.store.nodes()}
    root = nodes[ROOT_ID]
    tops = [n for n in nodes.values() if n.level == 1 and not is_intermediate(n.id)]
    days = [n for n in tops if n.scope_name == "day"]
    clusters = [n for n in tops if n.kind == "cluster"]
    assert days and clusters
    for view in [*days, *clusters]:
        assert view.parent_ids == () and not view.summary_hash and not view.sem_hash
        assert view.content_hash and view.tokens == 0 and d.store.get_vector(view.id) is None
    # The root covers every leaf exactly once, through its conversation (fix A still holds).
    below_root = {i for i in nodes if nodes[i].level == 0 and ROOT_ID in ancestors(d, i)}
    assert below_root == {n.id for n in nodes.values() if n.level == 0}
    assert all(nodes[c].scope_name == "conversation" or is_intermediate(c) for c in root.child_ids)
    # map shows them as pending; nothing was summarised for them yet.
    lines = {x.id: x.wire() for x in d.tools().map().lines}
    assert all(lines[v.id].get("pending") is True for v in days)
    assert "pending" not in lines[ROOT_ID]
    pending = d.pending_ids()
    calls = s.calls
    written = d.complete()
    assert written == s.calls - calls == len(pending)
    assert d.pending_ids() == [] and d.complete() == 0
    d.close()


@settings(max_examples=12, deadline=None)
@given(st.integers(min_value=0, max_value=35), st.sampled_from(TOPICS), st.integers(0, 99))
def test_one_leaf_edit_costs_at_most_depth_plus_one(index: int, topic: str, n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "c"
        shutil.copytree(_base_corpus(), root)
        s = FakeSummarizer()
        d = _open(root, s)
        edited = _unit(index, f"{topic} rewritten {n}")
        d.apply([edited])
        calls = s.calls
        depth = depth_to(d, edited.node_id)
        assert depth >= 2  # root, (its intermediates,) the conversation (, its intermediates)
        assert calls <= depth + 1
        # Exactly the leaf and its ancestors under the root were re-summarised: one path.
        on_path = {
            a for a in ancestors(d, edited.node_id) if a == ROOT_ID or ROOT_ID in ancestors(d, a)
        }
        assert calls == 1 + len(on_path)
        d.close()


@settings(max_examples=10, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=41),
            st.sampled_from([*TOPICS, ""]),
            st.integers(min_value=0, max_value=5),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_completing_pending_views_matches_a_clean_build(
    edits: list[tuple[int, str, int]],
) -> None:
    """After random edits, inserts, day moves and deletes, writing every pending summary
    yields the node table of a clean build (P7/P22 under deferral), and every summary a
    view gets is the one an eager build writes (only the root's side differs)."""
    final = {u.unit_id: u for u in _units()}
    with tempfile.TemporaryDirectory() as tmp:
        inc = _open(Path(tmp) / "inc")
        inc.apply(list(final.values()))
        for step, (index, topic, day) in enumerate(edits):
            unit = _unit(index, f"{topic} edit {step}" if topic else "", day)
            if topic:
                final[unit.unit_id] = unit
            else:
                final.pop(unit.unit_id, None)
            inc.apply([unit])  # a blank text deletes the leaf (fix J)
            if step % 2:
                inc.complete(inc.pending_ids()[:3])  # some views were read in between
        _check_shape(inc)
        inc.complete()
        clean = _open(Path(tmp) / "clean")
        clean.apply(sorted(final.values(), key=lambda u: u.unit_id))
        clean.complete()
        assert inc.table() == clean.table()
        eager = _open(Path(tmp) / "eager", views="eager")
        eager.apply(sorted(final.values(), key=lambda u: u.unit_id))
        eager_rows = {n.id: n for n in eager.store.nodes()}
        for node in clean.store.nodes():
            if node.id.startswith(ROOT_ID):
                continue  # the root rolls up primary parents only
            twin = eager_rows[node.id]
            assert (node.content_hash, node.summary_hash, node.sem_hash, node.child_ids) == (
                twin.content_hash,
                twin.summary_hash,
                twin.sem_hash,
                twin.child_ids,
            ), node.id
        for closing in (inc, clean, eager):
            closing.close()


def test_map_diff_stays_exact_while_summaries_wait(tmp_path: Path) -> None:
    d = _open(tmp_path / "c")
    d.apply(_units())
    d.complete()
    known = d.snapshot(with_summaries=False).known_hashes()
    leaf = _unit(7).node_id
    before = ancestors(d, leaf)
    d.apply([_unit(7, "chain brake tyre hub rewritten completely")])
    after = ancestors(d, leaf)
    result = d.tools().map(known_hashes=known)
    changed = {x.id for x in result.lines if not x.unchanged}
    created = {x.id for x in result.lines} - set(known)
    assert changed == {leaf} | before | after | created  # P13 with pending views
    pending = {x.id for x in result.lines if x.pending}
    assert pending and pending <= changed
    assert all(ROOT_ID not in ancestors(d, p) for p in pending)  # only views wait
    pruned = d.tools().map(known_hashes=known, prune_unchanged=True)
    listed = {x.id for x in pruned.lines}
    unchanged_views = {
        n.id for n in d.store.nodes() if n.level == 1 and not n.parent_ids and n.id not in changed
    }
    assert unchanged_views and not listed & unchanged_views  # no parent, no news: omitted
    assert changed <= listed and pruned.omitted == len(result.lines) - len(listed)


def test_digest_writes_a_pending_view_read_only_tools_show_it_pending(tmp_path: Path) -> None:
    s = FakeSummarizer()
    d = _open(tmp_path / "c", s)
    d.apply(_units())
    view = next(i for i in d.pending_ids() if i.startswith("digest:1:scope:day:"))
    reader = DigestTools.open(tmp_path / "c")
    shown = reader.digest(view)
    assert (
        shown.summary == ""
        and shown.node.pending
        and s.calls
        == len(_units()) + len([n for n in d.store.nodes() if n.level > 0 and n.summary_hash])
    )
    calls = s.calls
    live = d.tools().digest(view)
    assert live.summary.startswith("rollup(") and not live.node.pending
    assert s.calls > calls and all(c.summary for c in live.children)
    assert view not in d.pending_ids()
    calls = s.calls
    d.tools().digest(view)
    assert s.calls == calls  # written once, then served from the tree
    reader.close()
    d.close()


def test_recall_above_entity_altitude_writes_pending_views_first(tmp_path: Path) -> None:
    d = _open(tmp_path / "c")
    d.apply(_units())
    d.tools().recall("kiln relay", budget=400, altitude=Altitude.ENTITY)
    assert d.pending_ids()  # leaves only: nothing needed
    day = next(i for i in d.pending_ids() if i.startswith("digest:1:scope:day:"))
    d.tools().recall("kiln relay", budget=400, altitude=Altitude.SCOPE, scope=day)
    assert day not in d.pending_ids() and d.pending_ids()  # only what that scope reaches
    pack = d.tools().recall("kiln relay", budget=400, altitude=Altitude.SCOPE)
    assert d.pending_ids() == []
    assert pack.items and all(item.text for item in pack.items)


def test_unchanged_sweep_leaves_pending_rows_alone(tmp_path: Path) -> None:
    s = FakeSummarizer()
    d = _open(tmp_path / "c", s)
    d.apply(_units())
    table, calls, writes = d.table(), s.calls, d.store.node_writes
    d.rollup()
    d.reconcile("turn", _units())
    assert (d.table(), s.calls, d.store.node_writes) == (table, calls, writes)  # P1, P12


def test_switching_to_eager_views_writes_what_was_pending(tmp_path: Path) -> None:
    d = _open(tmp_path / "c")
    d.apply(_units())
    assert d.pending_ids()
    d.close()
    eager = _open(tmp_path / "c", views="eager")
    eager.rollup()
    assert eager.pending_ids() == []
    clean = _open(tmp_path / "clean", views="eager")
    clean.apply(_units())
    assert eager.table() == clean.table()


class _BlockDays:
    """Blocks the summaries of day scopes (leaves and conversations pass)."""

    version = "block-days-1"

    def guard(self, request: GuardInput) -> GuardResult:
        if request.stage == GuardStage.EMIT and request.scope.name == "day":
            return GuardResult(blocked=True, reason="no day digests")
        return GuardResult(text=request.text)


def test_a_blocked_view_stays_pending_and_is_tried_once(tmp_path: Path) -> None:
    s = FakeSummarizer()
    d = Distiller.open(
        tmp_path / "c",
        s,
        LexicalEmbedder(64),
        guard=_BlockDays(),
        config=DistillConfig(recipe_version="views-test", max_fan_in=4, sub_bits=2, cluster_bits=2),
    )
    d.apply(_units())
    d.complete()
    days = [i for i in d.pending_ids() if i.startswith("digest:1:scope:day:")]
    assert days and d.counters.get("guard_blocked") > 0
    calls = s.calls
    d.complete()
    assert s.calls == calls  # P26: the negative cache holds for deferred summaries too
    view = d.tools().digest(days[0])
    assert view.summary == "" and view.node.pending


@pytest.mark.parametrize("split_key", ["id", "semhash"])
def test_an_edit_never_regroups_under_id_splits(tmp_path: Path, split_key: str) -> None:
    """With id-keyed splits an edited leaf stays in its intermediates; with SemHash splits
    (the reference) the same edit can move it, which is what made edits cost two paths."""
    d = _open(tmp_path / "c", split_key=split_key, views="eager")
    d.apply(_units())
    shape = {n.id: n.child_ids for n in d.store.nodes() if n.level > 0}
    moved = False
    for i in range(0, 36, 5):
        d.apply([_unit(i, f"{TOPICS[(i + 1) % 3]} entirely new words {i}")])
        now = {n.id: n.child_ids for n in d.store.nodes() if n.level > 0}
        scope_shape = {k: v for k, v in now.items() if "scope:conversation" in k}
        moved |= scope_shape != {k: v for k, v in shape.items() if "scope:conversation" in k}
        shape = now
    assert moved == (split_key == "semhash")
