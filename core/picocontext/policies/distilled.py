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
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from picocontext.backend import (
    ChatMessage,
    ChatModel,
    ModelInput,
    ModelResponse,
    Phase,
    TokenCounter,
    ToolSpec,
    restrict_ids,
    tools_json,
)
from picocontext.budget import RunBudget
from picocontext.cancel import CancelToken, check
from picocontext.distill.agent import (
    DIGEST_TOOL,
    RECALL_TOOL,
    RESOLVE_TOOL,
    DigestTools,
    digest_tool_schema,
    recall_tool_schema,
    resolve_tool_schema,
)
from picocontext.distill.distiller import DistillConfig, Distiller
from picocontext.distill.embedder import Embedder, LexicalEmbedder
from picocontext.distill.errors import DistillError, NodeNotFound, SummarizerError, ToolCallError
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
from picocontext.distill.models import DigestNode, SummaryInput, Unit
from picocontext.distill.summarizer import ChatSummarizer, Summarizer
from picocontext.errors import Cancelled
from picocontext.manifest.tokens import TextCounter
from picocontext.policies.archive_tree import sessions_of
from picocontext.policies.history import HistorySplit, TextMeter, ToolExecutor, split_history
from picocontext.policies.history import Unit as HistoryUnit
from picocontext.policies.registry import PolicyContext, PolicySpec
from picocontext.records import Record, Role, Scope, Snapshot
from picocontext.report import RunMode, RunReport
from picocontext.session import (
    ContextSession,
    FreshIds,
    ToolLoop,
    ToolResult,
    reserved_ids,
    sample_receipt,
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
SHORT_NO_ROOM = "No room is left in the context window. Answer now."
NO_ROOM = (
    "No room is left in the context window for this result (about {need} tokens needed, "
    "{left} left). Answer now with what you have, or ask for less (a smaller recall budget)."
)

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_WORDS = re.compile(r"\S+")


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

    ``leaf_summaries`` and ``digest_summaries`` count the summaries written this turn (a turn
    that added k new leaves shows ``leaf_summaries == k``); ``summarizer_calls`` counts those
    that reached the pluggable summarizer (extracted leaves do not)."""

    model_config = _FROZEN

    scope: Scope
    revision: int
    visible_records: int
    older_records: int
    older_groups: int
    leaves: int
    new_leaves: int
    deleted_leaves: int
    summarizer_calls: int
    leaf_summaries: int
    digest_summaries: int
    extracted_leaves: int
    fallback_summaries: int
    distill_seconds: float
    view_tokens: int
    map_tokens: int
    map_nodes_listed: int
    map_nodes_omitted: int
    result_allowance: int


# -- history → groups, view and units -------------------------------------------------------


@dataclass(frozen=True)
class _Leaf:
    """Where a leaf came from, so results can say "older group 4, part 2/3"."""

    ordinal: int
    part: int
    parts: int
    record_ids: tuple[str, ...]

    @property
    def label(self) -> str:
        part = f", part {self.part}/{self.parts}" if self.parts > 1 else ""
        return f"older group {self.ordinal}{part}"


def session_scopes(older: Sequence[HistoryUnit]) -> list[str] | None:
    """Each older group's session as a scope value (``"003 2026-03-02"``: number, then the
    date its records carry), when every group belongs to a dated session and there are at
    least two; None otherwise (the tree then groups by spans)."""
    runs = sessions_of(older)
    if len(runs) < 2 or any(not tag for tag, _ in runs):
        return None
    return [f"{n:03d} {tag}" for n, (tag, units) in enumerate(runs, start=1) for _ in units]


def group_text(records: Sequence[Record]) -> str:
    """The verbatim text of a group: a header per record, then its body unchanged."""
    names = {c.id: c.name for r in records for c in r.tool_calls}
    lines: list[str] = []
    for record in records:
        if record.role is Role.TOOL:
            tool = names.get(record.tool_call_id or "", "a tool")
            lines.append(f"[{record.id}] tool result of {tool}:")
        else:
            lines.append(f"[{record.id}] {record.role.value}:")
        if record.body:
            lines.append(record.body)
        for call in record.tool_calls:
            lines.append(f"[{record.id}] called {call.name} {call.arguments}")
    return "\n".join(lines)


def chunk_text(text: str, max_words: int) -> list[str]:
    """Slices of ``text`` with at most ``max_words`` words each, cut at line ends, and between
    words only inside a line that is longer than a slice. Joining the slices gives ``text``."""
    pieces: list[tuple[str, int]] = []
    for line in text.splitlines(keepends=True):
        starts = [m.start() for m in _WORDS.finditer(line)]
        count = len(starts)
        if count <= max_words:
            pieces.append((line, count))
            continue
        for k in range(0, count, max_words):
            begin = 0 if k == 0 else starts[k]
            end = starts[k + max_words] if k + max_words < count else len(line)
            pieces.append((line[begin:end], min(max_words, count - k)))
    chunks: list[str] = []
    current = ""
    words = 0
    for piece, count in pieces:
        if words and words + count > max_words:
            chunks.append(current)
            current, words = "", 0
        current += piece
        words += count
    if current:
        chunks.append(current)
    return chunks or [text]


# -- summarizer wrappers --------------------------------------------------------------------


def _extract(text: str, words: int) -> str:
    parts = text.split()
    return " ".join(parts[:words]) + (" …" if len(parts) > words else "")


class _TurnSummarizer:
    """The summarizer a scope's distiller is opened with, for its whole life (so the distiller
    is never rewired). During a turn's sweep (:meth:`begin` .. :meth:`end`, under the scope's
    sweep lock) it checks that turn's cancellation before every call, counts summaries by
    level, extracts leaf summaries when asked to, and (if allowed) falls back to an extract when
    the model returns nothing usable, so a flaky small model never loses a leaf. Outside a
    turn (pending views written by a digest call) it is the policy's summarizer unchanged."""

    def __init__(self, inner: Summarizer, fallback: bool, extract_leaves: bool) -> None:
        self.inner = inner
        self.fallback = fallback
        self.extract_leaves = extract_leaves
        self.begin(None)
        self.end()

    def begin(self, cancel: CancelToken | None) -> None:
        """Start a turn's sweep: its cancel token, counts from zero."""
        self.cancel = cancel
        self.active = True
        self.leaf_summaries = 0
        self.digest_summaries = 0
        self.calls = 0
        self.extracted = 0
        self.fallbacks = 0

    def end(self) -> None:
        self.active = False
        self.cancel = None

    @property
    def summarizer_id(self) -> str:
        return self.inner.summarizer_id

    @property
    def prompt_digest(self) -> str:
        return self.inner.prompt_digest

    def summarize(self, request: SummaryInput) -> str:
        if not self.active:
            return self.inner.summarize(request)
        check(self.cancel)
        if request.level == LEVEL_ENTITY:
            self.leaf_summaries += 1
            if self.extract_leaves:
                self.extracted += 1
                return _extract(request.raw, request.budget) or "(empty)"
        else:
            self.digest_summaries += 1
        self.calls += 1
        try:
            return self.inner.summarize(request)
        except SummarizerError:
            if not self.fallback:
                raise
            self.fallbacks += 1
            source = request.raw or " ".join(c.summary for c in request.children)
            return _extract(source, request.budget) or "(empty)"


@dataclass(frozen=True)
class _SummaryCounts:
    """What one turn's sweep asked of the summarizer (read under the sweep lock)."""

    calls: int
    leaf_summaries: int
    digest_summaries: int
    extracted: int
    fallbacks: int

    @classmethod
    def of(cls, wrapper: _TurnSummarizer) -> _SummaryCounts:
        return cls(
            wrapper.calls,
            wrapper.leaf_summaries,
            wrapper.digest_summaries,
            wrapper.extracted,
            wrapper.fallbacks,
        )


class _TurnCancelChat:
    """A ChatModel that hands the current turn's cancel token to the wrapped model, so a
    cancelled turn stops a summary that is being generated."""

    def __init__(self, model: ChatModel, local: threading.local) -> None:
        self._model = model
        self._local = local

    @property
    def model_id(self) -> str:
        return self._model.model_id

    def count_tokens(self, text: str) -> int:
        return self._model.count_tokens(text)

    def chat(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        cancel: CancelToken | None = None,
    ) -> ModelResponse:
        token: CancelToken | None = cancel or getattr(self._local, "cancel", None)
        return self._model.chat(messages, max_tokens, tools, token)


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
        self._summarizers: dict[Scope, _TurnSummarizer] = {}
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
            _TurnCancelChat(model, local),
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
                summarizer = _TurnSummarizer(
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
            counts = _SummaryCounts.of(wrapper)
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
        executor = _Executor(
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

    def _units(self, older: Sequence[HistoryUnit]) -> tuple[list[Unit], dict[str, _Leaf]]:
        """One leaf per chunk of an older group. Groups are scoped by session when the
        history is a dated conversation (every older group starts with its session's date):
        the tree then has one digest per session, dated by its scope; otherwise by spans of
        ``span_groups`` groups."""
        cfg = self.config
        units: list[Unit] = []
        leaves: dict[str, _Leaf] = {}
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
                    title=_extract(chunk, 10),
                )
                units.append(unit)
                leaves[l0_id(SOURCE_KIND, unit_id)] = _Leaf(
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
            f"{_extract(_summary_of(tools, node), self.config.excerpt_words)}"
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


# -- tool execution -------------------------------------------------------------------------


class _Executor(ToolExecutor):
    """Runs one tool call through :meth:`DigestTools.call` and fits the result to the window.

    The ledger starts at the tokens left after the first prompt (minus reserved output and a
    margin). A result too big for what is left is rendered smaller (a reduced recall budget,
    shortened digest children, fewer near matches) until one fits, or refused with a note
    saying how much was needed (a model that sends many calls at once may still hit the
    runtime's check)."""

    def __init__(
        self,
        tools: DigestTools,
        leaves: Mapping[str, _Leaf],
        meter: TextCounter,
        allowance: int,
        overhead: int,
        max_steps: int,
        cancel: CancelToken | None,
    ) -> None:
        refusal = overhead + meter.count(SHORT_NO_ROOM) + meter.count(_TYPICAL_ARGS)
        super().__init__(meter, allowance, overhead, max_steps, refusal)
        self.tools = tools
        self.leaves = leaves
        self.cancel = cancel

    def __call__(self, name: str, arguments: str) -> ToolResult:
        check(self.cancel)
        fixed = self.call_cost(arguments)
        grantable = self.remaining - self.reserve
        try:
            wire = self.tools.call(name, arguments)
            payload = json.loads(arguments) if arguments.strip() else {}
            args = payload if isinstance(payload, dict) else {}
            candidates = self._renderings(name, args, wire, grantable - fixed)
            for text in candidates:
                if self.fits(arguments, self.meter.count(text)):
                    return self.grant(arguments, text)
            need = fixed + self.meter.count(candidates[-1]) if candidates else fixed
            message = NO_ROOM.format(need=need, left=max(0, grantable))
            return self.refuse(arguments, message, SHORT_NO_ROOM)
        except Cancelled:
            raise
        except ToolCallError as exc:
            return self.refuse(arguments, exc.message + _HINTS.get(name, ""), SHORT_NO_ROOM)
        except NodeNotFound as exc:
            return self.refuse(
                arguments,
                f'No digest node "{exc.node_id}". Use a node id from the digest map or from a '
                "digest result.",
                SHORT_NO_ROOM,
            )
        except DistillError as exc:
            return self.refuse(arguments, f"{name} failed: {exc.message}", SHORT_NO_ROOM)

    def _renderings(
        self, name: str, payload: dict[str, Any], wire: dict[str, Any], left: int
    ) -> list[str]:
        """Candidate texts, most complete first; the first that fits ``left`` is returned."""
        if name == RECALL_TOOL:
            return self._recalls(payload, wire, left)
        if name == DIGEST_TOOL:
            return self._digests(wire)
        if name == RESOLVE_TOOL:
            return self._resolves(wire)
        raise ToolCallError(f"Unknown tool {name!r}; expected digest, resolve or recall.")

    # recall: shrink the budget until the pack fits (the pack itself stays whole items)
    def _recalls(self, payload: dict[str, Any], wire: dict[str, Any], left: int) -> list[str]:
        requested = int(wire.get("budget", 0))
        out = [self._render_recall(wire, requested, requested)]
        budget = requested
        for _ in range(12):
            cost = self.meter.count(out[-1])
            if cost <= left or budget <= 1:
                break
            shrink = max(1, int(budget * max(left, 0) / max(cost, 1) * 0.9))
            budget = min(budget - 1, shrink)
            smaller = self.tools.call(RECALL_TOOL, {**payload, "budget": budget})
            out.append(self._render_recall(smaller, requested, budget))
        return out

    def _render_recall(self, wire: dict[str, Any], requested: int, budget: int) -> str:
        items: list[dict[str, Any]] = list(wire.get("items", []))
        leaves = [i for i in items if not i.get("digest")]
        digests = [i for i in items if i.get("digest")]
        leaves.sort(key=lambda i: self._order(str(i["nodeId"])))
        head = (
            f"recall at {wire['altitude']} altitude: {len(items)} items, {wire['tokens']} of "
            f"{budget} words"
        )
        if wire.get("omitted"):
            head += f"; {wire['omitted']} more did not fit"
        if budget != requested:
            head += f" (budget reduced from {requested} to {budget} words to fit the window)"
        lines = [head + ". Older records oldest first:" if leaves else head + "."]
        for item in leaves:
            leaf = self.leaves.get(str(item["nodeId"]))
            label = leaf.label if leaf else "older record"
            lines.append(f"--- {label} ({item['nodeId']})")
            lines.append(str(item["text"]))
        for item in digests:
            lines.append(f"--- digest {item['kind']} ({item['nodeId']}), a summary:")
            lines.append(str(item["text"]))
        return "\n".join(lines)

    def _order(self, node_id: str) -> tuple[int, int]:
        leaf = self.leaves.get(node_id)
        return (leaf.ordinal, leaf.part) if leaf else (1 << 30, 0)

    # digest: full children summaries, then excerpts, then ids, then fewer children
    def _digests(self, wire: dict[str, Any]) -> list[str]:
        children: list[dict[str, Any]] = list(wire.get("children", []))
        children.sort(key=lambda c: self._order(str(c["id"])))  # leaves in history order
        out = [self._render_digest(wire, children, None), self._render_digest(wire, children, 12)]
        out.append(self._render_digest(wire, children, 0))
        count = len(children)
        while count > 0:
            count //= 2
            out.append(self._render_digest(wire, children[:count], 0, len(children) - count))
        return out

    def _render_digest(
        self,
        wire: dict[str, Any],
        children: Sequence[dict[str, Any]],
        words: int | None,
        hidden: int = 0,
    ) -> str:
        node = wire["node"]
        lines = [
            f"{node['id']} ({node['kind']}, level {node['level']}, sem {node.get('semHash', '')}):",
            str(wire.get("summary", "")),
        ]
        leaf = self.leaves.get(str(node["id"]))
        if leaf is not None:
            lines.append(
                f"This is {leaf.label} (records {', '.join(leaf.record_ids)}). For its verbatim "
                f'text call recall with "altitude": "entity" and "scope": "{node["id"]}".'
            )
        if children:
            lines.append(f"Children ({len(children) + hidden}):")
        for child in children:
            label = self.leaves.get(str(child["id"]))
            where = f" {label.label}" if label else ""
            summary = str(child.get("summary", ""))
            if words is None:
                text = f": {summary}"
            elif words:
                text = f": {_extract(summary, words)}"
            else:
                text = ""
            lines.append(f"- {child['id']} ({child['kind']}{where}){text}")
        if hidden:
            lines.append(f"({hidden} more children not shown: the window is nearly full.)")
        return "\n".join(lines)

    def _resolves(self, wire: dict[str, Any]) -> list[str]:
        near: list[dict[str, Any]] = list(wire.get("near", []))
        out = [self._render_resolve(wire, near, 0)]
        count = len(near)
        while count > 0:
            count //= 2
            out.append(self._render_resolve(wire, near[:count], len(near) - count))
        return out

    def _render_resolve(
        self, wire: dict[str, Any], near: Sequence[dict[str, Any]], hidden: int
    ) -> str:
        lines: list[str] = []
        exact = wire.get("exact")
        if exact:
            lines.append(f"exact: {exact['id']} ({exact['kind']}, level {exact['level']})")
        if wire.get("alsoExact"):
            lines.append("also exact: " + ", ".join(wire["alsoExact"]))
        for match in near:
            n = match["node"]
            lines.append(
                f"near: {n['id']} ({n['kind']}, level {n['level']}, {match['hammingBits']} bits)"
            )
        if hidden:
            lines.append(f"({hidden} more near matches not shown: the window is nearly full.)")
        return "\n".join(lines) or "No node has that hash (and none is within 8 bits)."


_TYPICAL_ARGS = '{"query": "a few words", "altitude": "entity"}'
_HINTS = {
    RECALL_TOOL: ' Example: {"query": "price of the kettle", "altitude": "entity", "budget": 200}.',
    DIGEST_TOOL: f' Example: {{"nodeId": "{ROOT_ID}"}}.',
    RESOLVE_TOOL: ' Example: {"hash": "<a 16-hex semHash from the map>"}.',
}
