"""The roll-up: leaves into scope, cluster and unclustered groups, intermediates, the root.

:class:`Rollup` is the half of :class:`~picocontext.distill.distiller.Distiller` that builds
everything above the leaves (adaptive depth: a group larger than ``max_fan_in`` splits on
``sub_bits`` at a time), keeps ContentHashes exact, short-circuits unchanged summaries, and
writes deferred views on demand (:meth:`Rollup._complete`). It reads the leaves the leaf
pipeline wrote and shares its store, CAS, summarizer, guard and counters.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from picocontext.distill.cas import BlobStore
from picocontext.distill.clusterer import SimHashClusterer
from picocontext.distill.data import (
    ChildDigest,
    DigestNode,
    GuardInput,
    GuardStage,
    RollupReport,
    ScopeRef,
    SummaryInput,
)
from picocontext.distill.errors import DistillError
from picocontext.distill.guard import Guard, apply_guard
from picocontext.distill.hashing import (
    rollup_content_hash,
    source_field_hash,
    summary_input_hash,
)
from picocontext.distill.ids import (
    KIND_CLUSTER,
    KIND_SCOPE,
    KIND_TENANT,
    LEVEL_ENTITY,
    LEVEL_SCOPE,
    LEVEL_TENANT,
    ROOT_ID,
    UNCLUSTERED_ID,
    hex16,
    is_intermediate,
    is_scope_id,
    parse_scope_id,
)
from picocontext.distill.semhash import (
    cluster_prefix,
    format_sem_hash,
    parse_sem_hash_or_zero,
    sem_hashes,
)
from picocontext.distill.store import NodeStore
from picocontext.distill.summarizer import Summarizer
from picocontext.errors import Cancelled

if TYPE_CHECKING:
    pass
from picocontext.distill.config import Counters, DistillConfig, Tokenizer


@dataclass
class _Pass:
    """State of one rollup pass."""

    index: dict[str, DigestNode]
    existing: dict[str, DigestNode]
    built: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


def _is_pending(node: DigestNode | None) -> bool:
    """An internal node whose summary was deferred (a view in deferred-views mode)."""
    return node is not None and node.is_pending


class Rollup:
    """Everything above the leaves; mixed into the distiller, whose state it uses."""

    store: NodeStore
    cas: BlobStore
    config: DistillConfig
    counters: Counters
    summarizer: Summarizer
    guard: Guard | None
    guard_version: str
    clusterer: SimHashClusterer
    recipe: str
    tokenizer: Tokenizer
    _fresh: dict[str, str]

    def gate(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def _store_text(self, text: str) -> str:
        raise NotImplementedError

    def _read_text(self, address: str) -> str:
        raise NotImplementedError

    def _embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        raise NotImplementedError

    def _blocked(self, node_id: str, content_hash: str, reason: str) -> None:
        raise NotImplementedError

    def _rollup(self) -> RollupReport:
        leaves = self.store.nodes(LEVEL_ENTITY)
        internal = {n.id: n for n in self.store.nodes() if n.level > LEVEL_ENTITY}
        state = _Pass(index={n.id: n for n in leaves}, existing=internal)
        clusters = self.clusterer.cluster(
            [(n.id, parse_sem_hash_or_zero(n.sem_hash)) for n in leaves]
        )
        clusters_of: dict[str, list[str]] = {}
        for cid, members in clusters.items():
            for member in members:
                clusters_of.setdefault(member, []).append(cid)
        with self.store.transaction():
            for leaf in leaves:
                scopes = [p for p in leaf.parent_ids if is_scope_id(p)]
                wanted = (*scopes, *sorted(clusters_of.get(leaf.id, [])))
                if wanted != leaf.parent_ids:
                    updated = leaf.model_copy(update={"parent_ids": wanted})
                    self.store.upsert(updated)
                    state.index[leaf.id] = updated
        scope_groups: dict[str, list[str]] = {}
        unclustered: list[str] = []
        for leaf in leaves:
            scopes = [p for p in leaf.parent_ids if is_scope_id(p)]
            for sid in scopes:
                scope_groups.setdefault(sid, []).append(leaf.id)
            if not scopes and leaf.id not in clusters_of:
                unclustered.append(leaf.id)
        report = {"scope_nodes": 0, "cluster_nodes": 0, "short_circuits": 0}
        tops: list[str] = []

        # Deferred views: the root rolls up each leaf's *primary* parent only, so an edit
        # re-summarises one path; every other level-1 node is a view (see DistillConfig.views).
        deferred = self.config.views == "deferred"
        primary_tops = {self._primary_parent(state.index[leaf.id], clusters_of) for leaf in leaves}
        cluster_start = self.config.cluster_bits if self.config.split_key == "semhash" else 0

        def top(node_id: str, kind: str, scope: ScopeRef, members: list[str], bits: int) -> None:
            view = deferred and node_id not in primary_tops
            rolled = self._rollup_group(
                state,
                node_id,
                LEVEL_SCOPE,
                kind,
                scope,
                () if view else (ROOT_ID,),
                members,
                bits,
                lazy=view,
            )
            if rolled:
                report["scope_nodes" if kind == KIND_SCOPE else "cluster_nodes"] += 1
            elif not view or not _is_pending(state.index.get(node_id)):
                report["short_circuits"] += 1
            if node_id in state.index and not view:
                tops.append(node_id)

        for sid in sorted(scope_groups):
            name, value = parse_scope_id(sid)
            top(sid, KIND_SCOPE, ScopeRef(name=name, id=value), sorted(scope_groups[sid]), 0)
        for cid, members in clusters.items():
            top(cid, KIND_CLUSTER, ScopeRef(), list(members), cluster_start)
        if unclustered:
            top(UNCLUSTERED_ID, KIND_CLUSTER, ScopeRef(), sorted(unclustered), 0)
        tenant_rolled = False
        if leaves:
            state.built.add(ROOT_ID)
            tenant_rolled = self._rollup_group(
                state, ROOT_ID, LEVEL_TENANT, KIND_TENANT, ScopeRef(), (), sorted(tops), 0
            )
            if not tenant_rolled and tops:
                report["short_circuits"] += 1
        deleted = 0
        with self.store.transaction():
            for node_id in sorted(state.existing):
                if node_id in state.built:
                    continue
                if self.store.delete(node_id):
                    deleted += 1
                    if is_intermediate(node_id):
                        self.counters.add("intermediate_gc")
            if not state.errors:
                self.store.meta_set("rollup_needed", "0")
        if state.errors:
            raise DistillError("; ".join(state.errors))
        return RollupReport(
            scope_nodes=report["scope_nodes"],
            cluster_nodes=report["cluster_nodes"],
            tenant_rolled=tenant_rolled,
            short_circuits=report["short_circuits"],
            deleted=deleted,
        )

    def _split_key(self, child: DigestNode) -> int:
        """The 64-bit value a split partitions on. 'id' hashes the child's id, which no edit
        changes, so an edited child stays in its intermediate (one path per edit); 'semhash'
        (the reference) groups similar children but moves a child whose summary changed."""
        if self.config.split_key == "semhash":
            return parse_sem_hash_or_zero(child.sem_hash)
        return int(source_field_hash(child.id)[:16], 16)

    @staticmethod
    def _primary_parent(leaf: DigestNode, clusters_of: dict[str, list[str]]) -> str:
        """The level-1 node through which a leaf reaches the root in deferred-views mode: its
        first declared scope, else its first cluster, else the unclustered bucket (fix A)."""
        for parent_id in leaf.parent_ids:
            if is_scope_id(parent_id):
                return parent_id
        own = sorted(clusters_of.get(leaf.id, []))
        return own[0] if own else UNCLUSTERED_ID

    def _partition(
        self, children: Sequence[DigestNode], start_bits: int
    ) -> tuple[int, dict[int, list[DigestNode]], list[int]] | None:
        """The first ``sub_bits`` step past ``start_bits`` that separates the children, and the
        prefixes of the steps skipped on the way (they name the sub-nodes, so the names do not
        depend on how many steps had to be skipped)."""
        bits = start_bits
        skipped: list[int] = []
        while bits < 64:
            nxt = min(bits + self.config.sub_bits, 64)
            parts: dict[int, list[DigestNode]] = {}
            for child in children:
                key = cluster_prefix(self._split_key(child), nxt)
                parts.setdefault(key, []).append(child)
            if len(parts) >= 2:
                return nxt, parts, skipped
            skipped.append(next(iter(parts)))
            bits = nxt
        return None

    def _rollup_group(
        self,
        state: _Pass,
        node_id: str,
        level: int,
        kind: str,
        scope: ScopeRef,
        parents: tuple[str, ...],
        members: Sequence[str],
        prefix_bits: int,
        lazy: bool = False,
    ) -> bool:
        state.built.add(node_id)
        children = [state.index[m] for m in members if m in state.index]
        fits = (
            len(children) <= self.config.max_fan_in
            and sum(c.tokens for c in children) <= self.config.input_budget
        )
        split = None if (fits or not children) else self._partition(children, prefix_bits)
        if split is None:
            return self._rollup_node(state, node_id, level, kind, scope, parents, children, lazy)
        bits, parts, skipped = split
        self.counters.add("splits")
        base = node_id + "".join("#" + hex16(p) for p in skipped)
        direct: list[DigestNode] = []
        for prefix in sorted(parts):
            group = parts[prefix]
            if len(group) == 1:
                direct.append(group[0])  # a one-child intermediate would only cost a call
                continue
            sub_id = f"{base}#{hex16(prefix)}"
            self._rollup_group(
                state,
                sub_id,
                LEVEL_SCOPE,
                KIND_CLUSTER,
                scope,
                (node_id,),
                [c.id for c in group],
                bits,
                lazy,
            )
            if sub_id in state.index:
                direct.append(state.index[sub_id])
        return self._rollup_node(state, node_id, level, kind, scope, parents, direct, lazy)

    def _rollup_node(
        self,
        state: _Pass,
        node_id: str,
        level: int,
        kind: str,
        scope: ScopeRef,
        parents: tuple[str, ...],
        children: Sequence[DigestNode],
        lazy: bool = False,
    ) -> bool:
        if not lazy and any(_is_pending(c) for c in children):
            # Only after switching from deferred to eager views: write the pending children
            # first, exactly as a clean eager build would have.
            completed = [self._complete(state, c) for c in children]
            children = [c for c in completed if not _is_pending(c)]  # blocked: as if new
        ch = rollup_content_hash(self.recipe, [c.content_hash for c in children])
        # Short-circuit #2 keys on the ContentHash *and* the summary-input hash: equal content
        # hashes do not imply equal summarizer inputs (children renamed, reordered, or
        # re-summarised under an unchanged hash), and reusing the summary then would make it
        # depend on the history of the tree instead of on its current state (P7, P22).
        ih = summary_input_hash(
            self.recipe,
            level,
            kind,
            scope.name,
            scope.id,
            self.config.budget,
            [(c.id, c.kind, c.content_hash, c.summary_hash) for c in children],
        )
        child_ids = tuple(c.id for c in children)
        existing = state.existing.get(node_id)
        if existing is not None and existing.content_hash == ch and existing.membership_hash == ih:
            self.counters.add("shortcircuit")
            if existing.child_ids != child_ids or existing.parent_ids != parents:
                refreshed = existing.model_copy(
                    update={"child_ids": child_ids, "parent_ids": parents}
                )
                with self.store.transaction():
                    self.store.upsert(refreshed)
                existing = refreshed
            state.index[node_id] = existing
            return False
        if lazy:
            self._defer(state, node_id, level, kind, scope, parents, ch, child_ids, existing)
            return False
        if existing is not None:
            state.index[node_id] = existing
        # The negative cache (fix E) keys internal nodes on the summary-input hash: it covers
        # the ContentHash, and only a different input can yield a different (unblocked) text.
        if self.store.is_blocked(node_id, ih, self.guard_version):
            self.counters.add("negative_cache_hits")
            return False
        self.counters.add("summaries")
        try:
            digests = tuple(
                ChildDigest(id=c.id, kind=c.kind, summary=self._read_text(c.summary_hash))
                for c in children
            )
            summary = self.summarizer.summarize(
                SummaryInput(
                    level=level, kind=kind, scope=scope, children=digests, budget=self.config.budget
                )
            )
        except Cancelled:
            raise
        except Exception as exc:  # keep the old row; the next sweep retries this node
            self.counters.add("failures")
            state.errors.append(f"{node_id}: {exc}")
            return False
        emit = apply_guard(
            self.guard,
            GuardInput(
                stage=GuardStage.EMIT,
                corpus=self.config.corpus,
                scope=scope,
                level=level,
                text=summary,
            ),
            self.config.fail_open_guard,
        )
        if emit.blocked:
            self._blocked(node_id, ih, emit.reason)
            return False
        vector = self._embed([emit.text])[0]
        sem = sem_hashes(vector.reshape(1, -1), self.config.sem_seed)[0]
        node = DigestNode(
            id=node_id,
            level=level,
            kind=kind,
            scope_name=scope.name,
            scope_id=scope.id,
            summary_hash=self._store_text(emit.text),
            content_hash=ch,
            sem_hash=format_sem_hash(sem),
            membership_hash=ih,
            child_ids=child_ids,
            parent_ids=parents,
            updated_at=time.time_ns(),
            tokens=self.tokenizer(emit.text),
        )
        with self.store.transaction():
            self.store.upsert(node)
            self.store.put_vector(node_id, vector)
            self.store.clear_blocked(node_id)
        self.counters.add("nodes")
        state.index[node_id] = node
        return True

    def _defer(
        self,
        state: _Pass,
        node_id: str,
        level: int,
        kind: str,
        scope: ScopeRef,
        parents: tuple[str, ...],
        content_hash: str,
        child_ids: tuple[str, ...],
        existing: DigestNode | None,
    ) -> None:
        """Record a view node whose summary is out of date as *pending*: its ContentHash and
        links are exact (so ``map`` diffs stay exact), its summary, SemHash, tokens and vector
        are empty until :meth:`complete` writes them. The row itself is the persisted queue:
        a crash leaves it pending, and the next ``complete`` finishes it."""
        node = DigestNode(
            id=node_id,
            level=level,
            kind=kind,
            scope_name=scope.name,
            scope_id=scope.id,
            content_hash=content_hash,
            child_ids=child_ids,
            parent_ids=parents,
            updated_at=time.time_ns(),
        )
        same = existing is not None and existing.model_dump(
            exclude={"updated_at"}
        ) == node.model_dump(exclude={"updated_at"})
        if existing is not None and same and _is_pending(existing):
            state.index[node_id] = existing  # already pending with these hashes and links
            return
        with self.store.transaction():
            self.store.upsert(node)
            self.store.delete_vector(node_id)
        self.counters.add("deferred")
        state.index[node_id] = node

    def _complete(self, state: _Pass, node: DigestNode) -> DigestNode:
        """Write a pending node's summary (its pending children first) from the same inputs
        an eager rollup uses, so the result is the row a clean eager build writes."""
        if not _is_pending(node):
            return node
        children = []
        for child_id in node.child_ids:
            child = state.index.get(child_id) or self.store.get(child_id)
            if child is not None:
                children.append(self._complete(state, child))
        if any(_is_pending(c) for c in children):
            return node  # a child the guard blocked: no summary can be made from it yet
        state.existing.setdefault(node.id, node)
        self._rollup_node(
            state,
            node.id,
            node.level,
            node.kind,
            ScopeRef(name=node.scope_name, id=node.scope_id),
            node.parent_ids,
            children,
        )
        return state.index.get(node.id, node)
