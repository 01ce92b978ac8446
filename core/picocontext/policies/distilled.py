"""The distilled policy: older history lives in a digest tree, the model reads it through tools.

Each turn the working history is split at a complete group boundary (a record plus the tool
results that answer it). The recent tail that fits ``tail_share`` of the window stays visible
together with every protected record; everything older and unprotected is distilled into the
digest tree of :mod:`picocontext.distill` — *incrementally*: the tree is a corpus on disk per
session scope, and a reconcile only summarises the leaves that are new since the last turn
(plus the digests above them). Leaves are scoped by spans of groups, or, when the history is a
dated conversation (every older group starts with its session's date), by session: one digest
per session, listed in the map with its date. The model sees the visible records, a compact
map of the tree as a protected runtime record, and may call ``digest``, ``resolve`` and
``recall``; ``recall`` at entity altitude returns older records word for word.

The runtime stays the authority: the map is fitted to ``map_share`` of the window, every tool
result is fitted to what is left of the window (a recall budget is reduced, digest children are
shortened, with a note saying so), and the shared tool loop checks every prompt before it is
sent. The working context is never changed.

This module holds the configuration, the turn and the digest map. Older history as groups,
chunks and scopes is in :mod:`~picocontext.policies.distilled_history`, the turn's summarizer
wrappers in :mod:`~picocontext.policies.distilled_summaries`, and the tool executor that fits
every result to the window in :mod:`~picocontext.policies.distilled_tools`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from picocontext.backend import (
    ChatModel,
    ModelInput,
    Phase,
    TokenCounter,
    ToolSpec,
    restrict_ids,
    tools_json,
)
from picocontext.budget import RunBudget
from picocontext.cancel import CancelToken, check
from picocontext.distill.agent import (
    RECALL_TOOL,
    DigestTools,
    digest_tool_schema,
    recall_tool_schema,
    resolve_tool_schema,
)
from picocontext.distill.data import DigestNode, Unit
from picocontext.distill.distiller import DistillConfig, Distiller
from picocontext.distill.embedder import Embedder, LexicalEmbedder
from picocontext.distill.errors import DistillError
from picocontext.distill.guard import Guard
from picocontext.distill.ids import (
    KIND_CLUSTER,
    KIND_SCOPE,
    LEVEL_ENTITY,
    LEVEL_SCOPE,
    ROOT_ID,
    is_intermediate,
    l0_id,
)
from picocontext.distill.summarizer import ChatSummarizer, Summarizer
from picocontext.policies.distilled_history import (
    GroupLeaf,
    chunk_text,
    first_words,
    group_text,
    session_scopes,
)
from picocontext.policies.distilled_summaries import SummaryCounts, TurnCancelChat, TurnSummarizer
from picocontext.policies.distilled_tools import DigestToolExecutor
from picocontext.policies.history import HistorySplit, TextMeter, split_history
from picocontext.policies.history import Unit as HistoryUnit
from picocontext.policies.registry import PolicyContext, PolicySpec
from picocontext.receipts import FreshIds, reserved_ids, sample_receipt
from picocontext.records import Record, Role, Scope, Snapshot
from picocontext.report import RunMode, RunReport
from picocontext.session import (
    ContextSession,
    ToolLoop,
)
from picocontext.working import WorkingContext

SOURCE_KIND = "history"
SPAN_SCOPE = "span"
SESSION_SCOPE = "session"
ADAPTER_VERSION = "history-chunks-1"

SYSTEM_TEXT = "\n".join(
    [
        "You answer the latest request of a long conversation that no longer fits the window.",
        "Shown above: the protected instructions and requests, and the most recent records.",
        "Older records are not shown. They are kept word for word in a digest tree; its map "
        "comes after the history.",
        'recall {"query": "words or values you need", "altitude": "entity"} returns older '
        "records verbatim, oldest first.",
        'digest {"nodeId": "an id from the map"} shows a node\'s summary and its children; '
        'resolve {"hash": "a semHash"} finds similar nodes.',
        "Newer records override older ones. Fetch only what the visible records do not settle, "
        "then answer exactly as the latest request asks.",
    ]
)
GUIDANCE = (
    "Call recall, digest or resolve for older details you still need, or answer the latest "
    "request now without calling a tool."
)
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class DistilledConfig(BaseModel):
    """Knobs of the distilled policy. Shares are fractions of ``budget.context_window``."""

    model_config = _FROZEN

    tail_share: float = Field(default=0.35, gt=0.0, lt=1.0)
    map_share: float = Field(default=0.12, gt=0.0, lt=1.0)
    max_steps: int = Field(default=4, ge=1, le=16)
    leaf_words: int = Field(default=120, ge=8, le=20_000)
    leaf_summary_words: int = Field(default=40, ge=4, le=4_000)
    digest_summary_words: int = Field(default=80, ge=8, le=4_000)
    span_groups: int = Field(default=8, ge=1, le=10_000)
    excerpt_words: int = Field(default=24, ge=4, le=400)
    # A leaf's verbatim text is kept anyway; extracting its summary (its first words) instead of
    # asking the model leaves a slow local model only the digests above the leaves to write.
    extract_leaves: bool = False
    fallback_summaries: bool = True
    # A dated conversation (every older group starts with its session's date) gets one digest
    # per session instead of spans of span_groups groups (see session_scopes).
    sessions: bool = True

    @model_validator(mode="after")
    def _shares_leave_room(self) -> DistilledConfig:
        if self.tail_share + self.map_share > 0.9:
            raise ValueError("tail_share + map_share must leave at least 10% of the window")
        return self


class DistilledTurn(BaseModel):
    """What the distillation part of one turn did (the run's tokens are in its RunReport).

    Every ``*_tokens`` field and ``result_allowance`` is in the units of the session's token
    counter (model tokens for a real backend, UTF-8 bytes for the test counter), measured on
    the exact tool-phase prompt."""

    model_config = _FROZEN

    scope: Scope
    """The session scope the turn ran in (one digest corpus per scope)."""
    revision: int
    """The working revision the turn read."""
    visible_records: int
    """Records the model reads directly: protected ones, the request and the recent tail."""
    older_records: int
    """Older unprotected records kept out of the view and distilled instead."""
    older_groups: int
    """Complete groups (a record plus the tool results that answer it) those records form."""
    leaves: int
    """Leaves the older groups make (a group longer than ``leaf_words`` is several)."""
    new_leaves: int
    """Leaves new or changed since the last turn, and so summarised this turn."""
    deleted_leaves: int
    """Leaves whose records left the older history since the last turn."""
    summarizer_calls: int
    """Summaries that reached the pluggable summarizer (extracted leaves do not)."""
    leaf_summaries: int
    """Leaf summaries written this turn (a turn that added k new leaves shows k)."""
    digest_summaries: int
    """Summaries of digests above the leaves written this turn."""
    extracted_leaves: int
    """Leaf summaries taken as the leaf's first words instead of asked of the model."""
    fallback_summaries: int
    """Summaries replaced by an extract because the summarizer gave nothing usable."""
    distill_seconds: float
    """Wall time of this turn's reconcile and sweep, in seconds."""
    view_tokens: int
    """Tokens of the tool-phase prompt over the visible records alone (system text and tool
    specs included, no map)."""
    map_tokens: int
    """Tokens the digest map adds to that prompt."""
    map_nodes_listed: int
    """Digest nodes the map lists."""
    map_nodes_omitted: int
    """Digest nodes left out of the map to fit ``map_share`` of the window."""
    result_allowance: int
    """Tokens the tool results of this turn may take in all: the window minus the output
    allowance, the first prompt and a safety margin."""


# -- the policy -----------------------------------------------------------------------------


class DistilledPolicy:
    """Older history as a digest tree with ``digest``/``resolve``/``recall`` tools.

    ``summarizer`` writes the summaries (a deterministic fake in tests, :class:`ChatSummarizer`
    over the local model in live runs: see :meth:`over_chat_model`). Each session scope gets its
    own corpus under ``corpus_dir``; without one the policy owns a temporary directory and
    removes it on :meth:`close` (or when the policy is garbage collected)."""

    name = "distilled"

    def __init__(
        self,
        summarizer: Summarizer,
        embedder: Embedder | None = None,
        corpus_dir: str | Path | None = None,
        config: DistilledConfig | None = None,
        guard: Guard | None = None,
        name: str | None = None,
    ) -> None:
        self.summarizer = summarizer
        self.embedder = embedder or LexicalEmbedder()
        self.config = config or DistilledConfig()
        self.guard = guard
        if name is not None:
            self.name = name
        if corpus_dir is None:
            self.corpus_dir = Path(tempfile.mkdtemp(prefix="picocontext-distilled-"))
            self._cleanup: weakref.finalize[Any, Any] | None = weakref.finalize(
                self, shutil.rmtree, str(self.corpus_dir), True
            )
        else:
            self.corpus_dir = Path(corpus_dir)
            self.corpus_dir.mkdir(parents=True, exist_ok=True)
            self._cleanup = None
        self._lock = threading.Lock()
        self._distillers: dict[Scope, Distiller] = {}
        self._sweeping: dict[Scope, threading.Lock] = {}
        self._summarizers: dict[Scope, TurnSummarizer] = {}
        self._turns: dict[Scope, list[DistilledTurn]] = {}
        self._closed = False
        self._local = threading.local()

    @classmethod
    def over_chat_model(
        cls,
        model: ChatModel,
        embedder: Embedder | None = None,
        corpus_dir: str | Path | None = None,
        config: DistilledConfig | None = None,
        guard: Guard | None = None,
        max_input_tokens: int = 4096,
        quantization: str = "",
        name: str | None = None,
    ) -> DistilledPolicy:
        """Summaries from a local chat model (the MLX model implements ChatModel); a cancelled
        turn also cancels the summary being generated."""
        local = threading.local()
        summarizer = ChatSummarizer(
            TurnCancelChat(model, local),
            quantization=quantization,
            max_input_tokens=max_input_tokens,
        )
        policy = cls(summarizer, embedder, corpus_dir, config, guard, name)
        policy._local = local
        return policy

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Close every corpus; remove the corpus directory if the policy created it."""
        with self._lock:
            self._closed = True
            for distiller in self._distillers.values():
                distiller.close()
            self._distillers.clear()
            self._summarizers.clear()
        if self._cleanup is not None:
            self._cleanup()

    def __enter__(self) -> DistilledPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- introspection -----------------------------------------------------------------------
    def corpus_path(self, scope: Scope) -> Path:
        key = json.dumps([scope.user_id, scope.conversation_id, scope.branch_id])
        return self.corpus_dir / hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]

    def distiller(self, scope: Scope) -> Distiller:
        """The corpus of ``scope`` (opened on first use)."""
        with self._lock:
            if self._closed:
                raise DistillError("This distilled policy was closed; create a new one.")
            found = self._distillers.get(scope)
            if found is None:
                path = self.corpus_path(scope)
                path.mkdir(parents=True, exist_ok=True)
                (path / "scope.json").write_text(
                    json.dumps(scope.model_dump(), sort_keys=True), encoding="utf-8"
                )
                config = DistillConfig(budget=self.config.digest_summary_words, corpus=SOURCE_KIND)
                summarizer = TurnSummarizer(
                    self.summarizer, self.config.fallback_summaries, self.config.extract_leaves
                )
                found = Distiller.open(
                    path,
                    summarizer,
                    self.embedder,
                    guard=self.guard,
                    config=config,
                    # chunking and the leaf summary length shape every leaf: part of the recipe
                    adapter_versions=(
                        f"{ADAPTER_VERSION}:{self.config.leaf_words}:"
                        f"{self.config.leaf_summary_words}:{self.config.span_groups}:"
                        f"{'sessions' if self.config.sessions else 'spans'}:"
                        f"{'extract' if self.config.extract_leaves else 'model'}",
                    ),
                )
                self._distillers[scope] = found
                self._summarizers[scope] = summarizer
                self._sweeping[scope] = threading.Lock()
            return found

    def turns(self, scope: Scope) -> tuple[DistilledTurn, ...]:
        """Per-turn distillation records of ``scope``, oldest first."""
        with self._lock:
            return tuple(self._turns.get(scope, ()))

    # -- the turn ----------------------------------------------------------------------------
    def turn(
        self, session: ContextSession, budget: RunBudget, cancel: CancelToken | None = None
    ) -> RunReport:
        def build(state: WorkingContext) -> ToolLoop:
            return self._build(state, session.counter, budget, cancel)

        return session.run_tools(build, budget, policy=self.name, cancel=cancel)

    def tool_specs(self, node_ids: Sequence[str] = ()) -> tuple[ToolSpec, ...]:
        """The three tools offered each turn, from the distill package's own schemas;
        ``digest``'s nodeId limited to ``node_ids`` when given."""
        out = []
        for schema in (digest_tool_schema(), resolve_tool_schema(), recall_tool_schema()):
            fn = schema["function"]
            out.append(
                ToolSpec(
                    name=fn["name"], description=fn["description"], parameters=fn["parameters"]
                )
            )
        out[0] = restrict_ids(out[0], node_ids, "nodeId")
        return tuple(out)

    def _input(
        self, view: Snapshot, spec_json: str, control: tuple[Record, ...] = ()
    ) -> ModelInput:
        return ModelInput(
            context=view,
            phase=Phase.TOOLS,
            control_records=control,
            tools_json=spec_json,
            system_text=SYSTEM_TEXT,
            guidance=GUIDANCE,
        )

    def _build(
        self,
        state: WorkingContext,
        counter: TokenCounter,
        budget: RunBudget,
        cancel: CancelToken | None,
    ) -> ToolLoop:
        check(cancel)
        cfg = self.config
        snapshot = state.snapshot
        spec = self.tool_specs()
        spec_json = tools_json(spec)

        def tokens(view: Snapshot, control: tuple[Record, ...] = ()) -> int:
            return counter.prepare(self._input(view, spec_json, control)).token_count

        part = split_history(
            snapshot, tokens, int(budget.context_window * cfg.tail_share), charge_request=True
        )
        check(cancel)

        distiller = self.distiller(snapshot.scope)
        started = time.perf_counter()
        units, leaves = self._units(part.archive)
        wrapper = self._summarizers[snapshot.scope]
        with self._sweeping[snapshot.scope]:  # one turn's sweep at a time per scope
            wrapper.begin(cancel)
            self._local.cancel = cancel
            try:
                sync = distiller.reconcile(SOURCE_KIND, units)
            finally:
                self._local.cancel = None
                wrapper.end()
            counts = SummaryCounts.of(wrapper)
        if sync.sweep.failures:
            raise DistillError(
                f"Distilling older history failed ({sync.sweep.failures} failures): "
                f"{sync.sweep.errors[0] if sync.sweep.errors else 'see the corpus'}"
            )
        distill_seconds = time.perf_counter() - started
        check(cancel)

        tools = distiller.tools()
        spec = self.tool_specs([n.id for n in tools.store.nodes()])
        spec_json = tools_json(spec)  # every prompt from here on carries the offered ids
        fresh = FreshIds(reserved_ids(state.original.records, snapshot.records))
        map_id = fresh("runtime-digest-map")
        view_tokens = tokens(part.view)
        map_budget = int(budget.context_window * cfg.map_share)
        map_text, listed, omitted = self._fit_map(
            tools,
            part,
            len(leaves),
            map_budget,
            lambda text: tokens(part.view, (_map(map_id, text),)) - view_tokens,
        )
        preamble = (_map(map_id, map_text),)
        first = tokens(part.view, preamble)
        receipt = sample_receipt(RECALL_TOOL, fresh=fresh)  # what each further call adds
        overhead = max(0, tokens(part.view, preamble + receipt) - first)
        reserve = max(budget.edit_output_tokens, budget.completion_output_tokens)
        margin = max(16, budget.context_window // 50)
        allowance = budget.context_window - reserve - first - margin
        record = DistilledTurn(
            scope=snapshot.scope,
            revision=snapshot.revision,
            visible_records=len(part.view.records),
            older_records=part.archived_records,
            older_groups=len(part.archive),
            leaves=len(units),
            new_leaves=sync.marked,
            deleted_leaves=sync.deletes,
            summarizer_calls=counts.calls,
            leaf_summaries=counts.leaf_summaries,
            digest_summaries=counts.digest_summaries,
            extracted_leaves=counts.extracted,
            fallback_summaries=counts.fallbacks,
            distill_seconds=distill_seconds,
            view_tokens=view_tokens,
            map_tokens=first - view_tokens,
            map_nodes_listed=listed,
            map_nodes_omitted=omitted,
            result_allowance=allowance,
        )
        with self._lock:
            self._turns.setdefault(snapshot.scope, []).append(record)
        executor = DigestToolExecutor(
            tools, leaves, TextMeter(counter), allowance, overhead, cfg.max_steps, cancel
        )
        return ToolLoop(
            mode=RunMode.DISTILLED,
            view=part.view,
            preamble=preamble,
            tools=spec,
            execute=executor,
            system_text=SYSTEM_TEXT,
            guidance=GUIDANCE,
            max_steps=cfg.max_steps,
        )

    def _units(self, older: Sequence[HistoryUnit]) -> tuple[list[Unit], dict[str, GroupLeaf]]:
        """One leaf per chunk of an older group. Groups are scoped by session when the
        history is a dated conversation (every older group starts with its session's date):
        the tree then has one digest per session, dated by its scope; otherwise by spans of
        ``span_groups`` groups."""
        cfg = self.config
        units: list[Unit] = []
        leaves: dict[str, GroupLeaf] = {}
        scopes = session_scopes(older) if cfg.sessions else None
        for ordinal, group in enumerate(older, start=1):
            if scopes is not None:
                scope = (SESSION_SCOPE, scopes[ordinal - 1])
            else:
                first_span = ((ordinal - 1) // cfg.span_groups) * cfg.span_groups + 1
                scope = (SPAN_SCOPE, f"{first_span:04d}-{first_span + cfg.span_groups - 1:04d}")
            chunks = chunk_text(group_text(group), cfg.leaf_words)
            for part, chunk in enumerate(chunks, start=1):
                unit_id = group[0].id if len(chunks) == 1 else f"{group[0].id}/{part}"
                unit = Unit(
                    source_kind=SOURCE_KIND,
                    unit_id=unit_id,
                    text=chunk,
                    scopes=(scope,),
                    budget=cfg.leaf_summary_words,
                    title=first_words(chunk, 10),
                )
                units.append(unit)
                leaves[l0_id(SOURCE_KIND, unit_id)] = GroupLeaf(
                    ordinal=ordinal,
                    part=part,
                    parts=len(chunks),
                    record_ids=tuple(r.id for r in group),
                )
        return units, leaves

    # -- the map -----------------------------------------------------------------------------
    def _fit_map(
        self,
        tools: DigestTools,
        part: HistorySplit,
        leaf_count: int,
        map_budget: int,
        cost: Callable[[str], int],
    ) -> tuple[str, int, int]:
        """The map text, the number of nodes it lists and the number it leaves out."""
        if not part.archive:
            return (
                "Digest map: nothing older has been distilled yet; the whole history is shown.",
                0,
                0,
            )
        header = (
            f"Digest map: {part.archived_records} older records ({len(part.archive)} groups) are "
            f"not shown above. They are kept verbatim in {leaf_count} leaves under this tree:"
        )
        nodes = {n.id: n for n in tools.store.nodes()}
        lines = [self._map_line(tools, nodes, nodes[ROOT_ID], "root")] if ROOT_ID in nodes else []
        spans = sorted(
            (n for n in nodes.values() if n.kind == KIND_SCOPE and n.level == LEVEL_SCOPE),
            key=lambda n: n.scope_id,
            reverse=True,
        )
        lines += [self._map_line(tools, nodes, n, _scope_label(n)) for n in spans]
        clusters = sorted(
            (
                n
                for n in nodes.values()
                if n.kind == KIND_CLUSTER and n.level == LEVEL_SCOPE and not is_intermediate(n.id)
            ),
            key=lambda n: n.id,
        )
        lines += [self._map_line(tools, nodes, n, "cluster") for n in clusters]
        listable = len(lines)

        def text(count: int) -> str:
            out = [header, *lines[:count]]
            hidden = listable - count
            if hidden:
                out.append(
                    f"({hidden} more digest nodes not listed; digest {ROOT_ID} lists the top "
                    "of the tree.)"
                )
            return "\n".join(out)

        lo, hi = 0, listable
        while lo < hi:  # the largest prefix of lines that fits the map budget
            mid = (lo + hi + 1) // 2
            if cost(text(mid)) <= map_budget:
                lo = mid
            else:
                hi = mid - 1
        return text(lo), lo, listable - lo

    def _map_line(
        self, tools: DigestTools, nodes: Mapping[str, DigestNode], node: DigestNode, label: str
    ) -> str:
        return (
            f"- {label} {node.id} ({_leaf_count(nodes, node)} leaves, sem {node.sem_hash}): "
            f"{first_words(_summary_of(tools, node), self.config.excerpt_words)}"
        )


def _create(config: DistilledConfig, context: PolicyContext) -> DistilledPolicy:
    """Summaries from the session's own model when it is a chat model (the MLX models are),
    leaf summaries extracted unless the config says otherwise (so the slow local model only
    writes the digests above the leaves); the deterministic fake summarizer otherwise."""
    if isinstance(context.backend, ChatModel):
        if "extract_leaves" not in config.model_fields_set:
            config = config.model_copy(update={"extract_leaves": True})
        return DistilledPolicy.over_chat_model(context.backend, config=config, name=context.name)
    from picocontext.distill.testing import FakeSummarizer

    return DistilledPolicy(FakeSummarizer(), config=config, name=context.name)


SPEC = PolicySpec(
    name="distilled",
    config=DistilledConfig,
    factory=_create,
    mode=RunMode.DISTILLED,
    description=(
        "Older history is distilled into a digest tree; the model reads its map and may call "
        "digest/resolve/recall (recall returns older records verbatim)."
    ),
)


def _scope_label(node: DigestNode) -> str:
    if node.scope_name == SESSION_SCOPE:
        return f"session {node.scope_id}"
    return f"span of groups {node.scope_id}"


def _map(record_id: str, text: str) -> Record:
    return Record(id=record_id, role=Role.USER, body=text, protected=True)


def _summary_of(tools: DigestTools, node: DigestNode) -> str:
    """A node's verified summary (only this node's blob is read)."""
    if tools.cas is None or not node.summary_hash:
        return ""
    try:
        return tools.cas.retrieve_text(node.summary_hash)
    except DistillError as exc:
        return f"[summary unavailable: {exc.message}]"


def _leaf_count(nodes: Mapping[str, DigestNode], node: DigestNode) -> int:
    seen: set[str] = set()
    stack = list(node.child_ids)
    count = 0
    while stack:
        node_id = stack.pop()
        child = nodes.get(node_id)
        if node_id in seen or child is None:
            continue
        seen.add(node_id)
        if child.level == LEVEL_ENTITY:
            count += 1
        else:
            stack.extend(child.child_ids)
    return count
