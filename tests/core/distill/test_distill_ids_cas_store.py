"""Node ids (checklist 1–7), the content-addressed store (P21) and the SQLite schema (75, 76)."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from picocontext.distill import (
    BlobStore,
    CorruptBlob,
    DigestNode,
    InvalidHash,
    InvalidId,
    MissingBlob,
    NodeStore,
    StoreError,
    Unit,
    address_of,
)
from picocontext.distill.ids import (
    ROOT_ID,
    cluster_id,
    intermediate_id,
    is_intermediate,
    l0_id,
    parse_cluster_id,
    parse_scope_id,
    scope_id,
)


def test_id_formats() -> None:
    assert l0_id("asset", "uuid-1") == "digest:0:asset:uuid-1"
    assert scope_id("site", "s1") == "digest:1:scope:site:s1"
    assert cluster_id(0xABC << 52, 12) == "digest:1:cluster:abc0000000000000:12"
    assert intermediate_id("digest:1:scope:site:s1", 0xABCD << 48) == (
        "digest:1:scope:site:s1#abcd000000000000"
    )
    assert ROOT_ID == "digest:2:tenant"
    assert is_intermediate("digest:2:tenant#1000000000000000")
    assert not is_intermediate("digest:1:cluster:abc0000000000000:12")


def test_scope_id_parse_splits_on_first_colon_after_the_name() -> None:
    assert parse_scope_id("digest:1:scope:site:a:b:c") == ("site", "a:b:c")
    for bad in ("digest:1:scope:site", "digest:1:cluster:x", "digest:1:scope:site:s1#00"):
        with pytest.raises(InvalidId):
            parse_scope_id(bad)


@given(
    st.text(alphabet="abcdef0123456789", min_size=1, max_size=10).filter(lambda s: ":" not in s),
    st.text(min_size=1, max_size=20).filter(lambda s: s.strip() == s and s),
)
def test_scope_id_round_trips(name: str, value: str) -> None:
    assert parse_scope_id(scope_id(name, value)) == (name, value)


def test_cluster_id_parse() -> None:
    assert parse_cluster_id("digest:1:cluster:abc0000000000000:12") == (0xABC << 52, 12)
    for bad in (
        "digest:1:cluster:abc0000000000000:12#0000000000000000",
        "digest:1:cluster:abc0000000000000:65",
        "digest:1:cluster:abc:12",
        "digest:1:cluster:zzz0000000000000:12",
    ):
        with pytest.raises(InvalidId):
            parse_cluster_id(bad)


# -- CAS -----------------------------------------------------------------------------------


def test_store_is_content_addressed_and_deduplicated(tmp_path: Path) -> None:
    cas = BlobStore(tmp_path)
    a = cas.store_text("hello")
    assert a == address_of(b"hello") and a.startswith("sha256:") and len(a) == 71
    assert cas.store_text("hello") == a
    assert cas.writes == 1 and len(cas) == 1
    assert cas.retrieve_text(a) == "hello"
    path = cas.path_of(a)
    assert path.parent.name == a[7:9] and path.parent.parent.name == "sha256"
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp-")]


def test_corrupt_blob_is_an_error_never_served(tmp_path: Path) -> None:
    cas = BlobStore(tmp_path)
    a = cas.store_text("the real summary")
    cas.path_of(a).write_bytes(b"tampered")
    with pytest.raises(CorruptBlob) as info:
        cas.retrieve(a)
    assert a in str(info.value)


def test_missing_and_malformed_addresses(tmp_path: Path) -> None:
    cas = BlobStore(tmp_path)
    with pytest.raises(MissingBlob):
        cas.retrieve(address_of(b"never stored"))
    for bad in ("", "md5:00", "sha256:" + "A" * 64, "sha256:" + "0" * 63):
        with pytest.raises(InvalidHash):
            cas.retrieve(bad)


def test_gc_keeps_live_and_young_blobs(tmp_path: Path) -> None:
    cas = BlobStore(tmp_path)
    live = cas.store_text("live")
    old = cas.store_text("old unreferenced")
    young = cas.store_text("young unreferenced")
    past = time.time() - 7200
    for address in (live, old):
        os.utime(cas.path_of(address), (past, past))
    stale_tmp = cas.path_of(live).parent / ".tmp-crashed"
    stale_tmp.write_bytes(b"half")
    os.utime(stale_tmp, (past, past))
    report = cas.gc({live, address_of(b"gone")}, grace_seconds=3600)
    assert cas.exists(live) and cas.exists(young) and not cas.exists(old)
    assert report.removed == 1 and report.kept_in_grace == 1 and report.temp_removed == 1
    assert report.missing_live == (address_of(b"gone"),)
    assert not stale_tmp.exists()


def test_reusing_a_blob_renews_its_grace(tmp_path: Path) -> None:
    cas = BlobStore(tmp_path)
    a = cas.store_text("shared")
    past = time.time() - 7200
    os.utime(cas.path_of(a), (past, past))
    cas.store_text("shared")  # a dedup reuse about to be referenced again
    assert cas.gc(set(), grace_seconds=3600).removed == 0


# -- node store ----------------------------------------------------------------------------


def test_schema_columns_and_indexes(tmp_path: Path) -> None:
    NodeStore(tmp_path / "n.sqlite").close()
    db = sqlite3.connect(tmp_path / "n.sqlite")
    cols = {r[1]: (r[2], r[4]) for r in db.execute("PRAGMA table_info(digest_nodes)")}
    for name in (
        "id",
        "level",
        "kind",
        "scope_name",
        "scope_id",
        "source_id",
        "source_kind",
        "summary_hash",
        "content_hash",
        "sem_hash",
        "child_ids",
        "parent_ids",
        "updated_at",
        "tokens",
    ):
        assert name in cols
    assert cols["child_ids"][1] == "'[]'" and cols["parent_ids"][1] == "'[]'"
    indexed = set()
    for (index_name,) in db.execute("SELECT name FROM sqlite_master WHERE type='index'"):
        indexed |= {tuple(r[2] for r in db.execute(f"PRAGMA index_info({index_name})"))}
    for wanted in (("level",), ("source_kind", "source_id"), ("summary_hash",), ("content_hash",)):
        assert wanted in indexed
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"digest_vectors", "dirty_refs", "guard_blocked"} <= tables


def test_rows_round_trip_with_non_null_links(tmp_path: Path) -> None:
    store = NodeStore(tmp_path / "n.sqlite")
    store.upsert(DigestNode(id="digest:0:n:1", level=0, kind="entity"))
    raw = store._q("SELECT child_ids, parent_ids FROM digest_nodes")
    assert raw == [("[]", "[]")]
    node = store.get("digest:0:n:1")
    assert node is not None and node.child_ids == () and node.parent_ids == ()
    store.put_vector("digest:0:n:1", np.array([1, 2], dtype=np.float32))
    assert store.delete("digest:0:n:1") and store.get_vector("digest:0:n:1") is None
    assert not store.delete("digest:0:n:1")


def test_the_node_list_is_read_again_after_any_write_from_any_connection(tmp_path: Path) -> None:
    store = NodeStore(tmp_path / "n.sqlite")
    other = NodeStore(tmp_path / "n.sqlite")  # another process's connection to the same file
    store.upsert(DigestNode(id="digest:0:n:1", level=0, kind="entity"))
    first = store.nodes()
    assert [n.id for n in first] == ["digest:0:n:1"]
    first.clear()  # the caller's list is its own: the cache does not change with it
    assert [n.id for n in store.nodes()] == ["digest:0:n:1"]
    other.upsert(DigestNode(id="digest:0:n:2", level=0, kind="entity"))
    assert [n.id for n in store.nodes()] == ["digest:0:n:1", "digest:0:n:2"]
    assert [n.id for n in store.nodes(level=0)] == ["digest:0:n:1", "digest:0:n:2"]
    assert store.delete("digest:0:n:1")
    assert [n.id for n in store.nodes(level=0)] == ["digest:0:n:2"]
    other.clear()
    assert store.nodes() == [] and other.nodes() == []


def test_nodes_read_inside_a_transaction_that_rolls_back_are_not_remembered(
    tmp_path: Path,
) -> None:
    store = NodeStore(tmp_path / "n.sqlite")
    with pytest.raises(RuntimeError), store.transaction():
        store.upsert(DigestNode(id="digest:0:n:1", level=0, kind="entity"))
        assert [n.id for n in store.nodes()] == ["digest:0:n:1"]  # its own uncommitted write
        raise RuntimeError("the write fails")
    assert store.nodes() == [] and store.count() == 0


def test_dirty_queue_latest_wins_and_respects_newer_marks(tmp_path: Path) -> None:
    store = NodeStore(tmp_path / "n.sqlite")
    u1 = Unit(source_kind="n", unit_id="a", text="one")
    u2 = Unit(source_kind="n", unit_id="a", text="two")
    store.mark(u1.node_id, "upsert", u1, "n", "a")
    seq = store.mark(u2.node_id, "upsert", u2, "n", "a")
    pending = store.pending()
    assert len(pending) == 1 and pending[0].unit == u2 and pending[0].seq == seq
    newer = store.mark(u1.node_id, "upsert", u1, "n", "a")
    store.clear_dirty(u1.node_id, seq)  # processed the old mark: the newer one stays
    assert [p.seq for p in store.pending()] == [newer]
    assert not store.fail_dirty(u1.node_id, newer, 2)
    assert store.fail_dirty(u1.node_id, newer, 2)
    assert store.pending() == []


def test_marks_survive_reopen(tmp_path: Path) -> None:
    store = NodeStore(tmp_path / "n.sqlite")
    u = Unit(source_kind="n", unit_id="b", text="x")
    store.mark(u.node_id, "upsert", u, "n", "b")
    store.close()
    assert [p.ref for p in NodeStore(tmp_path / "n.sqlite").pending()] == [u.node_id]


def test_refuses_a_foreign_database(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "other.sqlite")
    db.execute("CREATE TABLE x (a)")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="refusing"):
        NodeStore(tmp_path / "other.sqlite")


def test_storing_over_a_torn_blob_rewrites_it(tmp_path: Path) -> None:
    cas = BlobStore(tmp_path)
    a = cas.store_text("intact text")
    cas.path_of(a).write_bytes(b"")
    assert cas.store_text("intact text") == a
    assert cas.retrieve_text(a) == "intact text"


def test_labels_are_short_and_readable() -> None:
    from picocontext.distill.data import label_of

    assert label_of(DigestNode(id=ROOT_ID, level=2, kind="tenant")) == "root"
    scope = DigestNode(
        id="digest:1:scope:site:s1", level=1, kind="scope", scope_name="site", scope_id="s1"
    )
    assert label_of(scope) == "site: s1"
    cluster = DigestNode(id="digest:1:cluster:abc0000000000000:12", level=1, kind="cluster")
    assert label_of(cluster) == "cluster abc/12"
    sub = DigestNode(id="digest:1:scope:site:s1#a400000000000000", level=1, kind="cluster")
    assert label_of(sub) == "#a4…"
    leaf = DigestNode(id="digest:0:n:1", level=0, kind="entity", source_id="1", title="Pump")
    assert label_of(leaf) == "Pump"
    assert label_of(leaf.model_copy(update={"title": ""})) == "1"
