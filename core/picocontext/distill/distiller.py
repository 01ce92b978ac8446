"""The distiller: the L0 (leaf) pipeline, deletes, reconcile and sweeps; the roll-up above the
leaves is :mod:`picocontext.distill.rollup`, mixed in.

The module stays one piece (about 730 lines) because it is one class whose every method reads
and writes the same corpus state (the node store, the CAS, the embedder and the negative
cache) under the sweep's single-flight lock; the roll-up, hashing, storage and agent surface
already live in modules of their own.

One :class:`Distiller` owns one corpus (a directory with ``nodes.sqlite`` and ``cas/``). All
writes of a corpus go through :meth:`Distiller.sweep`, which is single-flight per corpus (a
thread lock plus an OS file lock, so two processes never sweep the same corpus at once).

Where we differ from the reference (all recorded in the recipe, see ``hashing.FIXES``):

* A — leaves in no scope and no cluster roll up into ``digest:1:unclustered``, so the root
  covers every leaf.
* B — cleanup runs after the root is built and the root's children are top-level L1 nodes
  only; intermediates are never rebuilt when nothing changed.
* C — a leaf's scope membership has its own hash; a scope move refreshes links, no LLM call.
* E — a negative cache keyed by (node, candidate ContentHash, guard version) stops a blocked
  node from calling the summarizer again.
* H — marks are persisted (at-least-once) and a restart resumes them.
* I — a reconcile deletes leaves whose source unit disappeared.
* J — a unit whose text became blank deletes its leaf.
* L — sweeps process refs in sorted order, so the dedup donor is deterministic.
* M — recall inlines summaries (see ``agent.py``).
* Short-circuit #2 needs the summary-input hash (stored in ``membership_hash`` of internal
  rows) to match as well as the ContentHash: the reference reuses a summary whenever the child
  hash *multiset* is unchanged, even if the children it was written from were renamed,
  reordered or re-summarised, so an incremental tree could differ from a clean build.
* Splits partition on the next ``sub_bits`` bits *that actually separate the children*
  (scope and root groups start at bit 0, clusters at ``cluster_bits``), and a partition of one
  child attaches directly to its parent instead of wrapping it in a one-child intermediate.
* By default splits key on a hash of each child's id (``split_key="id"``), so an edit never
  moves a child between intermediates, and the root rolls up each leaf's primary parent only
  (``views="deferred"``): other level-1 nodes are views whose ContentHashes stay exact and
  whose summaries wait, persisted as pending rows, until :meth:`Distiller.complete` (called by
  ``digest`` and ``recall``) writes them. An edit then costs one root-to-leaf path.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from picocontext.distill.cas import BlobStore, GCReport
from picocontext.distill.clusterer import SimHashClusterer
from picocontext.distill.data import (
    DigestNode,
    DigestSnapshot,
    GuardInput,
    GuardStage,
    RollupReport,
    SummaryInput,
    SweepReport,
    SyncReport,
    Unit,
)
from picocontext.distill.embedder import Embedder, check_embeddings
from picocontext.distill.errors import ConfigError, DistillError
from picocontext.distill.guard import Guard, apply_guard, guard_version
from picocontext.distill.hashing import (
    Recipe,
    SemanticRecipe,
    l0_content_hash,
    membership_hash,
    source_field_hash,
)
from picocontext.distill.ids import (
    KIND_ENTITY,
    L0_PREFIX,
    LEVEL_ENTITY,
    is_scope_id,
    l0_id,
)
from picocontext.distill.semhash import (
    format_sem_hash,
    sem_hashes,
)
from picocontext.distill.store import DirtyRef, NodeStore
from picocontext.distill.summarizer import Summarizer
from picocontext.errors import Cancelled

if TYPE_CHECKING:
    from picocontext.distill.agent import DigestTools
    from picocontext.distill.sources import SourceAdapter

from picocontext.distill.config import Counters, DistillConfig, Tokenizer, whitespace_tokens
from picocontext.distill.rollup import Rollup, _Pass


@dataclass
class _Pending:
    node: DigestNode
    summary: str
    source_text: str = ""
    vector: npt.NDArray[np.float32] | None = None
    donor: _Pending | None = None


_GATES: dict[str, threading.RLock] = {}
_GATES_LOCK = threading.Lock()


def _gate_for(key: str) -> threading.RLock:
    with _GATES_LOCK:
        return _GATES.setdefault(key, threading.RLock())


class Distiller(Rollup):
    """Builds and maintains the digest tree of one corpus."""

    def __init__(
        self,
        store: NodeStore,
        cas: BlobStore,
        summarizer: Summarizer,
        embedder: Embedder,
        guard: Guard | None = None,
        config: DistillConfig | None = None,
        tokenizer: Tokenizer | None = None,
        tokenizer_id: str = "whitespace-words",
        adapter_versions: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.cas = cas
        self.summarizer = summarizer
        self.embedder = embedder
        self.guard = guard
        self.config = config or DistillConfig()
        self.tokenizer: Tokenizer = tokenizer or whitespace_tokens
        self.counters = Counters()
        self.clusterer = SimHashClusterer(
            self.config.cluster_bits, self.config.noise_floor, self.config.probe_radius
        )
        if embedder.dims <= 0:
            raise ConfigError(f"Embedder {embedder.embedder_id} reports dims {embedder.dims}.")
        self.recipe_model = Recipe(
            summarizer_id=summarizer.summarizer_id,
            prompt_digest=summarizer.prompt_digest,
            budget=self.config.budget,
            input_budget=self.config.input_budget,
            tokenizer=tokenizer_id,
            guard_version=guard_version(guard),
            fail_open_guard=self.config.fail_open_guard,
            adapter_versions=tuple(sorted(adapter_versions)),
            salt=self.config.recipe_salt,
        )
        self.recipe = self.config.recipe_version or self.recipe_model.version
        self.semantic_recipe = SemanticRecipe(
            embedder_id=embedder.embedder_id, dims=embedder.dims, seed=self.config.sem_seed
        )
        self.guard_version = guard_version(guard)
        self._gate = _gate_for(str(Path(store.path).resolve()))
        self._gate_depth = 0
        # Texts written during the current sweep, by address: the rollup reads children it just
        # summarised from here instead of the disk (content-addressed, so always consistent).
        self._fresh: dict[str, str] = {}
        self.sweeps_in_flight = 0
        self.max_sweeps_in_flight = 0
        self._record_recipes()

    @classmethod
    def open(
        cls,
        directory: str | Path,
        summarizer: Summarizer,
        embedder: Embedder,
        guard: Guard | None = None,
        config: DistillConfig | None = None,
        tokenizer: Tokenizer | None = None,
        tokenizer_id: str = "whitespace-words",
        adapter_versions: Sequence[str] = (),
    ) -> Distiller:
        """Open (or create) the corpus at ``directory``: ``nodes.sqlite`` plus ``cas/``."""
        root = Path(directory)
        return cls(
            NodeStore(root / "nodes.sqlite"),
            BlobStore(root / "cas"),
            summarizer,
            embedder,
            guard=guard,
            config=config,
            tokenizer=tokenizer,
            tokenizer_id=tokenizer_id,
            adapter_versions=adapter_versions,
        )

    def close(self) -> None:
        self.store.close()

    # -- recipes -----------------------------------------------------------------------------
    def _record_recipes(self) -> None:
        """Remember the recipes; a new semantic recipe re-embeds (no summarizer calls)."""
        with self.store.transaction():
            self.store.meta_set("recipe", self.recipe)
            self.store.meta_set("recipe_json", self.recipe_model.model_dump_json())
            old_sem = self.store.meta_get("semantic_recipe")
            self.store.meta_set("semantic_recipe", self.semantic_recipe.version)
            self.store.meta_set("semantic_recipe_json", self.semantic_recipe.model_dump_json())
            if old_sem and old_sem != self.semantic_recipe.version:
                self.store.meta_set("reembed_needed", "1")

    def _reembed_if_needed(self) -> None:
        if self.store.meta_get("reembed_needed") != "1":
            return
        nodes = [n for n in self.store.nodes() if n.summary_hash]
        for start in range(0, len(nodes), self.config.embed_batch):
            batch = nodes[start : start + self.config.embed_batch]
            texts = [self.cas.retrieve_text(n.summary_hash) for n in batch]
            vectors = self._embed(texts)
            hashes = sem_hashes(vectors, self.config.sem_seed)
            with self.store.transaction():
                for node, vec, sem in zip(batch, vectors, hashes, strict=True):
                    self.store.put_vector(node.id, vec)
                    if node.sem_hash != format_sem_hash(sem):
                        self.store.upsert(
                            node.model_copy(update={"sem_hash": format_sem_hash(sem)})
                        )
        with self.store.transaction():
            self.store.meta_set("reembed_needed", "0")
            self.store.meta_set("rollup_needed", "1")

    # -- single flight -------------------------------------------------------------------------
    @contextlib.contextmanager
    def gate(self) -> Iterator[None]:
        """Serialise sweeps of this corpus across threads and processes. Re-entrant in the
        thread that holds it, so a caller can hold it around a check and a sweep."""
        with self._gate:
            if self._gate_depth:
                self._gate_depth += 1
                try:
                    yield
                finally:
                    self._gate_depth -= 1
                return
            with self._exclusive():
                self._gate_depth = 1
                try:
                    yield
                finally:
                    self._gate_depth = 0

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """The OS file lock of the corpus (other processes), held for the outermost gate."""
        lock_path = Path(self.store.path).with_suffix(".sweep.lock")
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            try:
                import fcntl

                fcntl.flock(fd, fcntl.LOCK_EX)
            except ImportError:  # pragma: no cover - non-POSIX: thread lock only
                pass
            self.sweeps_in_flight += 1
            self.max_sweeps_in_flight = max(self.max_sweeps_in_flight, self.sweeps_in_flight)
            try:
                yield
            finally:
                self.sweeps_in_flight -= 1
        finally:
            os.close(fd)

    def reset(self) -> None:
        """Forget the whole tree, its marks and its adapter state (blobs stay for ``gc``),
        under the gate: the corpus is then as a new one, ready for a different source."""
        with self.gate():
            self.store.clear()
            self._record_recipes()

    # -- intake ------------------------------------------------------------------------------
    def mark(self, unit: Unit) -> int:
        """Persist a pending upsert (a blank text becomes a delete, fix J)."""
        if not unit.text.strip():
            return self.mark_delete(unit.source_kind, unit.unit_id)
        return self.store.mark(unit.node_id, "upsert", unit, unit.source_kind, unit.unit_id)

    def mark_delete(self, source_kind: str, unit_id: str) -> int:
        node_id = l0_id(source_kind, unit_id)
        return self.store.mark(node_id, "delete", None, source_kind, unit_id)

    def hashes_of(self, unit: Unit) -> tuple[str, str]:
        """(ContentHash, membership hash) the unit would get."""
        ch = l0_content_hash(self.recipe, source_field_hash(unit.text))
        mh = membership_hash(self.recipe, [*unit.scope_ids, "title=" + unit.title])
        return ch, mh

    # -- sweep -----------------------------------------------------------------------------
    def sweep(self) -> SweepReport:
        """Process every pending ref (sorted), then exactly one rollup if anything changed."""
        started = time.perf_counter()
        with self.gate():
            self._reembed_if_needed()
            refs = self.store.pending()
            if not refs and self.store.meta_get("rollup_needed") != "1":
                return SweepReport(seconds=time.perf_counter() - started)
            failures = 0
            errors: list[str] = []
            for start in range(0, len(refs), self.config.embed_batch):
                f, e = self._process_batch(refs[start : start + self.config.embed_batch])
                failures += f
                errors += e
            rollup: RollupReport | None = None
            try:
                rollup = self._rollup()
            except Cancelled:
                raise
            except Exception as exc:  # the sweep reports, the next sweep retries the rollup
                self.counters.add("failures")
                failures += 1
                errors.append(f"rollup: {exc}")
            finally:
                self._fresh.clear()
            return SweepReport(
                processed=len(refs),
                failures=failures,
                errors=tuple(errors),
                rollup=rollup,
                seconds=time.perf_counter() - started,
            )

    def _process_batch(self, refs: Sequence[DirtyRef]) -> tuple[int, list[str]]:
        pending: list[tuple[DirtyRef, _Pending]] = []
        done: list[DirtyRef] = []
        failures = 0
        errors: list[str] = []
        batch_donors: dict[str, _Pending] = {}
        for ref in refs:
            try:
                if ref.op == "delete" or ref.unit is None:
                    with self.store.transaction():
                        self._delete(ref.source_kind, ref.unit_id)
                        self.store.clear_dirty(ref.ref, ref.seq)
                        self.store.meta_set("rollup_needed", "1")
                    continue
                built = self._prepare_l0(ref.unit, batch_donors)
                if built is None:
                    done.append(ref)
                else:
                    pending.append((ref, built))
                    batch_donors.setdefault(built.node.content_hash, built)
            except Cancelled:
                raise
            except Exception as exc:  # one bad unit never stops the sweep
                failures += 1
                self.counters.add("failures")
                errors.append(f"{ref.ref}: {exc}")
                with self.store.transaction():
                    self.store.fail_dirty(ref.ref, ref.seq, self.config.max_attempts)
        try:
            self._persist_many([p for _, p in pending])
        except Cancelled:
            raise
        except Exception as exc:
            failures += len(pending)
            self.counters.add("failures", len(pending))
            errors.append(f"persist: {exc}")
            with self.store.transaction():
                for ref, _ in pending:
                    self.store.fail_dirty(ref.ref, ref.seq, self.config.max_attempts)
            pending = []
        with self.store.transaction():
            for ref in done:
                self.store.clear_dirty(ref.ref, ref.seq)
            for ref, _ in pending:
                self.store.clear_dirty(ref.ref, ref.seq)
        return failures, errors

    # -- L0 ----------------------------------------------------------------------------------
    def _prepare_l0(self, unit: Unit, batch_donors: dict[str, _Pending]) -> _Pending | None:
        """Short-circuit, dedup, guard and summarise one unit. None means nothing to persist
        (unchanged, links refreshed in place, or blocked)."""
        node_id = unit.node_id
        ch, mh = self.hashes_of(unit)
        scope_parents = unit.scope_ids
        existing = self.store.get(node_id)
        if existing is not None and existing.content_hash == ch:
            self.counters.add("shortcircuit")
            if existing.membership_hash != mh:
                self._refresh_membership(existing, scope_parents, mh, unit.title)
            return None
        if self.store.is_blocked(node_id, ch, self.guard_version):
            self.counters.add("negative_cache_hits")
            return None
        base = DigestNode(
            id=node_id,
            level=LEVEL_ENTITY,
            kind=KIND_ENTITY,
            source_kind=unit.source_kind,
            source_id=unit.unit_id,
            content_hash=ch,
            membership_hash=mh,
            parent_ids=scope_parents,
            title=unit.title,
        )
        donor_pending = batch_donors.get(ch)
        if donor_pending is not None:
            self.counters.add("dedup")
            return _Pending(
                node=base,
                summary=donor_pending.summary,
                source_text=donor_pending.source_text,
                vector=donor_pending.vector,
                donor=donor_pending,
            )
        donor = self.store.find_donor(ch, node_id)
        if donor is not None:
            self.counters.add("dedup")
            summary = self.cas.retrieve_text(donor.summary_hash)
            source = self.cas.retrieve_text(donor.source_hash) if donor.source_hash else ""
            return _Pending(
                node=base.model_copy(
                    update={"summary_hash": donor.summary_hash, "source_hash": donor.source_hash}
                ),
                summary=summary,
                source_text=source,
                vector=self.store.get_vector(donor.id),
            )
        ingest = apply_guard(
            self.guard,
            GuardInput(stage=GuardStage.INGEST, corpus=self.config.corpus, level=0, text=unit.text),
            self.config.fail_open_guard,
        )
        if ingest.blocked:
            self._blocked(node_id, ch, ingest.reason)
            return None
        self.counters.add("summaries")
        summary = self.summarizer.summarize(
            SummaryInput(
                level=LEVEL_ENTITY,
                kind=KIND_ENTITY,
                raw=ingest.text,
                budget=unit.budget or self.config.budget,
            )
        )
        emit = apply_guard(
            self.guard,
            GuardInput(stage=GuardStage.EMIT, corpus=self.config.corpus, level=0, text=summary),
            self.config.fail_open_guard,
        )
        if emit.blocked:
            self._blocked(node_id, ch, emit.reason)
            return None
        return _Pending(node=base, summary=emit.text, source_text=ingest.text)

    def _blocked(self, node_id: str, content_hash: str, reason: str) -> None:
        self.counters.add("guard_blocked")
        with self.store.transaction():
            self.store.add_blocked(node_id, content_hash, self.guard_version, reason)

    def _refresh_membership(
        self, node: DigestNode, scope_parents: tuple[str, ...], mh: str, title: str
    ) -> None:
        """Fix C: new scope parents (and title) without touching content, CAS or vectors."""
        others = tuple(p for p in node.parent_ids if not is_scope_id(p))
        with self.store.transaction():
            for parent_id in node.parent_ids:
                if is_scope_id(parent_id) and parent_id not in scope_parents:
                    self._unlink(parent_id, node.id)
            self.store.upsert(
                node.model_copy(
                    update={
                        "parent_ids": (*scope_parents, *others),
                        "membership_hash": mh,
                        "title": title,
                        "updated_at": time.time_ns(),
                    }
                )
            )
            self.store.meta_set("rollup_needed", "1")
        self.counters.add("links_refreshed")

    def _unlink(self, parent_id: str, child_id: str) -> None:
        parent = self.store.get(parent_id)
        if parent is not None and child_id in parent.child_ids:
            self.store.upsert(
                parent.model_copy(
                    update={"child_ids": tuple(c for c in parent.child_ids if c != child_id)}
                )
            )

    def _store_text(self, text: str) -> str:
        address = self.cas.store_text(text)
        if len(self._fresh) < 50_000:
            self._fresh[address] = text
        return address

    def _read_text(self, address: str) -> str:
        cached = self._fresh.get(address)
        return cached if cached is not None else self.cas.retrieve_text(address)

    def _embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.counters.add("embed_calls")
        self.counters.add("embedded_texts", len(texts))
        return check_embeddings(self.embedder, texts, self.embedder.embed(list(texts)))

    def _persist_many(self, items: Sequence[_Pending]) -> None:
        """Embed what needs it in one call, store blobs, then write rows in one transaction."""
        if not items:
            return
        need = [p for p in items if p.vector is None and p.donor is None]
        if need:
            vectors = self._embed([p.summary for p in need])
            for p, vec in zip(need, vectors, strict=True):
                p.vector = vec
        for p in items:
            if p.vector is None and p.donor is not None:
                p.vector = p.donor.vector  # an in-batch duplicate shares its donor's vector
        hashes = sem_hashes(
            np.stack([np.asarray(p.vector, dtype=np.float32) for p in items]),
            self.config.sem_seed,
        )
        rows: list[tuple[DigestNode, npt.NDArray[np.float32]]] = []
        for p, sem in zip(items, hashes, strict=True):
            summary_hash = p.node.summary_hash or self._store_text(p.summary)
            source_hash = p.node.source_hash
            if not source_hash and p.source_text:
                source_hash = self.cas.store_text(p.source_text)
            node = p.node.model_copy(
                update={
                    "summary_hash": summary_hash,
                    "source_hash": source_hash,
                    "sem_hash": format_sem_hash(sem),
                    "tokens": self.tokenizer(p.summary),
                    "updated_at": time.time_ns(),
                }
            )
            assert p.vector is not None
            rows.append((node, p.vector))
        with self.store.transaction():
            for node, vec in rows:
                old = self.store.get(node.id)
                if old is not None:
                    for parent_id in old.parent_ids:
                        if parent_id not in node.parent_ids:
                            self._unlink(parent_id, node.id)
                self.store.upsert(node)
                self.store.put_vector(node.id, vec)
                self.store.clear_blocked(node.id)
            self.store.meta_set("rollup_needed", "1")
        self.counters.add("nodes", len(rows))

    # -- deletes -----------------------------------------------------------------------------
    def _delete(self, source_kind: str, unit_id: str) -> bool:
        """Unlink from parents, delete row and vector; the blob stays for GC. Idempotent."""
        node_id = l0_id(source_kind, unit_id)
        node = self.store.get(node_id)
        if node is None:
            return False
        with self.store.transaction():
            for parent_id in node.parent_ids:
                self._unlink(parent_id, node_id)
            self.store.delete(node_id)
            self.store.clear_blocked(node_id)
        return True

    def delete_unit(self, source_kind: str, unit_id: str) -> bool:
        """Delete one leaf right away (the next rollup re-rolls its parents)."""
        with self.gate(), self.store.transaction():
            removed = self._delete(source_kind, unit_id)
            if removed:
                self.store.meta_set("rollup_needed", "1")
        return removed

    # -- direct API (marks + sweep) ----------------------------------------------------------
    def apply(self, units: Iterable[Unit], deletes: Iterable[tuple[str, str]] = ()) -> SweepReport:
        """Mark units and deletes, then sweep: the synchronous path tests and tools use."""
        for unit in units:
            self.mark(unit)
        for kind, unit_id in deletes:
            self.mark_delete(kind, unit_id)
        return self.sweep()

    def rollup(self) -> RollupReport:
        """One rollup pass outside a sweep (requests it even if nothing is pending)."""
        with self.gate():
            try:
                return self._rollup()
            finally:
                self._fresh.clear()

    def reconcile(self, source_kind: str, units: Sequence[Unit], sweep: bool = True) -> SyncReport:
        """Compare a source's complete unit set with the tree and mark only what differs:
        new or changed units, and leaves of this source kind whose unit is gone (fix I).
        Then sweep (unless ``sweep=False``: a worker will). An unchanged source costs no
        marks, no writes and no model calls."""
        prefix = f"{L0_PREFIX}{source_kind}:"
        stored = {
            node_id: hashes
            for node_id, hashes in self.store.l0_hashes().items()
            if node_id.startswith(prefix)
        }
        seen: set[str] = set()
        marked = unchanged = deletes = 0
        for unit in units:
            if unit.source_kind != source_kind:
                raise DistillError(
                    f"Unit {unit.unit_id} has source kind {unit.source_kind!r}, expected "
                    f"{source_kind!r}."
                )
            node_id = unit.node_id
            if node_id in seen:
                raise DistillError(f"Source {source_kind!r} yielded unit id {unit.unit_id} twice.")
            seen.add(node_id)
            if not unit.text.strip():
                continue
            ch, mh = self.hashes_of(unit)
            if stored.get(node_id) == (ch, mh) or self.store.is_blocked(
                node_id, ch, self.guard_version
            ):
                unchanged += 1
                continue
            self.mark(unit)
            marked += 1
        for node_id in sorted(set(stored) - seen):
            gone = self.store.get(node_id)
            if gone is not None:
                self.mark_delete(source_kind, gone.source_id)
                deletes += 1
        report = self.sweep() if sweep else SweepReport()
        return SyncReport(
            units=len(seen), unchanged=unchanged, marked=marked, deletes=deletes, sweep=report
        )

    def sync(self, adapter: SourceAdapter, sweep: bool = True) -> SyncReport:
        """Reconcile one source adapter's current units with the tree, then sweep. An adapter
        may expose ``skipped`` (the items its last ``units`` call could not or would not
        read); the report carries them."""
        report = self.reconcile(adapter.source_kind, adapter.units(self.store), sweep=sweep)
        skipped = tuple(str(item) for item in getattr(adapter, "skipped", ()))
        return report.model_copy(update={"skipped": skipped}) if skipped else report

    def pending_ids(self) -> list[str]:
        """Ids of view nodes whose summaries are pending (deferred views), sorted."""
        return self.store.deferred_ids()

    def complete(self, node_ids: Iterable[str] | None = None) -> int:
        """Write the pending summaries of ``node_ids`` (and of the pending nodes below them
        that they are made from), or of every pending node when ``node_ids`` is None. Returns
        the number of summarizer calls. Single-flight with sweeps; a node the guard blocks
        stays pending (and the negative cache stops it from calling the model again)."""
        with self.gate():
            waiting = set(self.store.deferred_ids())
            wanted = waiting if node_ids is None else waiting & set(node_ids)
            targets = [n for i in sorted(wanted) if (n := self.store.get(i)) is not None]
            if not targets:
                return 0
            state = _Pass(index={}, existing={})  # _complete registers what it rewrites
            before = self.counters.get("summaries")
            try:
                for node in targets:
                    self._complete(state, state.index.get(node.id, node))
            finally:
                self._fresh.clear()
            if state.errors:
                raise DistillError("; ".join(state.errors))
            return self.counters.get("summaries") - before

    # -- maintenance and views ---------------------------------------------------------------
    def gc(self, grace_seconds: float = 3600.0, now: float | None = None) -> GCReport:
        """Mark-and-sweep the CAS with the live summary and source hashes as roots."""
        with self.gate():
            return self.cas.gc(self.store.live_blob_addresses(), grace_seconds, now)

    def repair(self) -> list[str]:
        """Verify every referenced blob; drop nodes whose summary or source blob is corrupt or
        missing so the next sync re-summarises them (leaves come back from their source,
        internal nodes from the next rollup). Returns the dropped node ids."""
        dropped: list[str] = []
        with self.gate():
            for node in self.store.nodes():
                for address in (node.summary_hash, node.source_hash):
                    if not address:
                        continue
                    try:
                        self.cas.retrieve(address)
                    except DistillError:
                        dropped.append(node.id)
                        break
            with self.store.transaction():
                for node_id in dropped:
                    bad = self.store.get(node_id)
                    if bad is not None:
                        for parent_id in bad.parent_ids:
                            self._unlink(parent_id, node_id)
                    self.store.delete(node_id)
                if dropped:
                    self.store.meta_set("rollup_needed", "1")
        return dropped

    def snapshot(self, with_summaries: bool = True) -> DigestSnapshot:
        """Nodes and (verified) summaries for viewers; unreadable blobs show the error."""
        nodes = self.store.nodes()
        summaries: dict[str, str] = {}
        if with_summaries:
            for n in nodes:
                if n.summary_hash:
                    try:
                        summaries[n.id] = self.cas.retrieve_text(n.summary_hash)
                    except DistillError as exc:
                        summaries[n.id] = f"[unavailable: {exc}]"
        return DigestSnapshot(nodes=tuple(nodes), summaries=summaries)

    def table(self) -> list[tuple[object, ...]]:
        """The comparable node table (P7): no timestamps."""
        return [n.table_key() for n in self.store.nodes()]

    def tools(self) -> DigestTools:
        from picocontext.distill.agent import DigestTools

        return DigestTools(
            self.store,
            self.cas,
            self.tokenizer,
            self.embedder,
            self.config.sem_seed,
            complete=self.complete,
        )


# DistillConfig and the counters live in picocontext.distill.config; they are re-exported here
# for callers that import them next to the distiller.
__all__ = ["Counters", "DistillConfig", "Distiller", "Tokenizer", "whitespace_tokens"]
