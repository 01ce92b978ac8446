"""NavigatedPolicy: progressive disclosure over the conversation's own history.

Before each turn the working snapshot is split into what the model sees directly -- every
protected record, the latest user request and a recent tail that fits ``tail_share`` of the
window (cut only between complete tool groups) -- and an *archive*: the older unprotected
records. The archive is compiled in memory into a pcx manifest (one verbatim leaf per record,
grouped by turn; descriptors from the offline engine, or from a chat model when one is given)
and cached per scope, so the next turn reuses unchanged history instead of recompiling it.

The model reads the manifest index as a protected runtime record standing in the history where
the archived records end (before the recent tail, so the prompt stays in time order), with
what the prefetch opened for the latest request spliced in, and may call ``index``,
``look``, ``open`` and ``close`` (:class:`~picocontext.manifest.NavSession` verbs) through the
session's bounded tool loop before answering. Two limits hold, both measured in the session's
units:

* the NavSession runtime holds ``nav_share`` of the window (what is resident: the index plus
  open nodes; ``close`` gives budget back);
* a transcript guard: text already returned stays in this turn's prompt even after ``close``,
  so a disclosure that would push the next prompt past the window (minus its output
  allowance) is refused with a message instead of failing the run.

The working context is never changed: the policy only reads it.

This module holds the configuration, the turn plan and the compile cache. The verbs and their
executor are in :mod:`~picocontext.policies.navigated_tools`, the archive as a source tree in
:mod:`~picocontext.policies.archive_tree`, and where the index stands in the view and the
prefetch in :mod:`~picocontext.policies.archive_view`.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from picocontext.backend import (
    ChatModel,
    ModelInput,
    Phase,
    TokenCounter,
    tools_json,
)
from picocontext.budget import RunBudget
from picocontext.build.compiler import BuildOptions, BuildResult, compile_tree
from picocontext.build.engines import LLMEngine, OfflineEngine
from picocontext.build.engines.base import DescriptorEngine
from picocontext.build.errors import SelfCheckFailed
from picocontext.build.ir import SourceTree
from picocontext.cancel import CancelToken, check
from picocontext.errors import BudgetExceeded
from picocontext.manifest.model import Manifest
from picocontext.manifest.routing import NAVIGATORS, make_navigator
from picocontext.manifest.runtime import ViewLevel, dict_resolver
from picocontext.manifest.session import ModeConfig, NavSession
from picocontext.manifest.tokens import TextCounter
from picocontext.policies.archive_nav import ArchiveNavigator
from picocontext.policies.archive_tree import archive_tree, session_tree
from picocontext.policies.archive_tree import leaf_text as leaf_text
from picocontext.policies.archive_tree import speaker_line as speaker_line
from picocontext.policies.archive_tree import split_tag as split_tag
from picocontext.policies.archive_view import asked_before, prefetch, replies
from picocontext.policies.archive_view import with_index as with_index
from picocontext.policies.history import (
    Counting,
    HistorySplit,
    Unit,
    split_history,
    text_meter_for,
)
from picocontext.policies.navigated_tools import (
    CLOSE_TOOL,
    NAV_TOOLS,
    NO_ROOM,
    NavToolExecutor,
    nav_tools,
)
from picocontext.policies.registry import PolicyContext, PolicySpec
from picocontext.prompts import COMPLETION_GUIDANCE, COMPLETION_INSTRUCTIONS
from picocontext.receipts import FreshIds, reserved_ids, sample_receipt
from picocontext.records import Record, Role, Scope, Snapshot
from picocontext.report import RunMode, RunReport, ToolStep
from picocontext.session import (
    ContextSession,
    ToolLoop,
    ToolResult,
)
from picocontext.working import WorkingContext

# -- our texts ---------------------------------------------------------------------------------

SYSTEM_TEXT = (
    "You answer inside a small context window. The newest messages are shown in full; older "
    "records were moved to an archive, indexed after the conversation. If the answer needs an "
    "archived record, read it with the tools: open a branch to list its records, open a leaf "
    "to see one record verbatim, look for fuller descriptions, close to free reading budget. "
    "Later records override earlier ones. When you know enough, answer the latest user "
    "request without calling a tool."
)

GUIDANCE = "Read the archive with a tool if you need it, or answer the latest user request now."

PROTOCOL = (
    "Lines read `id [kind] title: description`. A branch groups records; a leaf is one record, "
    "verbatim when opened. #n is the record number: higher is newer."
)

# When everything fits there is nothing to navigate: the prompt is append-only's, word for word,
# so a column differs from the baseline only where navigation does something.
PLAIN_SYSTEM_TEXT = COMPLETION_INSTRUCTIONS
PLAIN_GUIDANCE = COMPLETION_GUIDANCE

ARCHIVE_NAVIGATOR = ArchiveNavigator.name

INDEX_HEADER = "ARCHIVE INDEX - older records of this conversation, readable with the tools."

# -- configuration -----------------------------------------------------------------------------


class NavigatedConfig(BaseModel):
    """Shares are of ``budget.context_window``. ``counting``: ``auto`` uses the session
    counter's tokenizer when it has ``count_tokens``, else renders text through the session
    counter (exact in the window's units); ``heuristic`` is 4 characters per token."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tail_share: float = Field(default=0.35, gt=0, lt=1)
    nav_share: float = Field(default=0.35, gt=0, lt=1)
    # Tool steps per turn; each one's call and receipt is reserved before the reading budget
    # is set. None: one per 1,024 tokens of window, 4 to 8 -- an oracle's path through an
    # archive of up to 25 turns is four opens (group, turn, record, page), and at a
    # 4,096-token window eight reserved steps took a sixth of the window from reading.
    max_steps: int | None = Field(default=None, ge=1, le=16)
    view_level: ViewLevel = "brief"
    # The view the archive's reachability self-check walks at. None: the view the model is
    # shown (view_level), the exact check. "full" prices every line with its "when" and keys,
    # about twice a brief line: the compiler then builds a narrower tree with smaller pages,
    # which suits a reader that wanders without closing, but refuses long archives the model
    # could read (live, a 16-step history then failed at step 6 instead of 14 in a replay).
    check_view: ViewLevel | None = None
    segment_records: int = Field(default=8, ge=1, le=64)
    group_width: int = Field(default=5, ge=2, le=64)
    # True: a dated conversation (every archived turn's body starts with its session's date,
    # as ``picocontext eval --conversation`` writes them) is indexed by session, one dated line
    # per session with passages of ``passage_records`` turns under it (see session_tree).
    # Off by default: on LoCoMo it opened less evidence than groups of turns (0.33-0.46
    # against 0.47 on 80 questions, docs/conversations.md), since the compiler regroups the
    # session lines to fit its reveal budget and a passage's descriptor shows one line of it.
    sessions: bool = False
    passage_records: int = Field(default=4, ge=1, le=64)
    min_nav_tokens: int = Field(default=64, ge=1)
    idf_refresh_growth: float = Field(default=2.0, ge=1)
    counting: Counting = "auto"
    cached_scopes: int = Field(default=16, ge=1)
    leaf_share: float = Field(default=0.5, gt=0, le=1)
    reveal_share: float = Field(default=0.3, gt=0, le=1)
    call_slack: int = Field(default=8, ge=0)
    # A model-free navigator that walks the archive for the latest request before the model
    # reads it; what it shows is in the index, charged to the reading budget. "archive" (the
    # default, picocontext.policies.archive_nav): subtree-scan's descriptor ranking with a
    # query made for conversations -- the reply to the newest earlier asking of the question,
    # then newer matching records, then older ones while the budget lasts -- since on notebook
    # episodes a document navigator's best match is an earlier asking, which holds no answer
    # (scripts/bench.sh prefetch, docs/build.md). A name from
    # picocontext.manifest.routing.NAVIGATORS runs that document navigator instead (it stops
    # after one leaf); None: the model navigates alone.
    navigator: str | None = ARCHIVE_NAVIGATOR
    prefetch_steps: int = Field(default=8, ge=1, le=16)

    def steps_for(self, window: int) -> int:
        """The tool steps a turn in a ``window``-token context may take (see ``max_steps``)."""
        if self.max_steps is not None:
            return self.max_steps
        return min(8, max(4, window // 1024))

    @model_validator(mode="after")
    def _shares_leave_room(self) -> NavigatedConfig:
        if self.tail_share + self.nav_share >= 1:
            raise ValueError("tail_share + nav_share must stay below 1 (outputs need room too)")
        known = (ARCHIVE_NAVIGATOR, *NAVIGATORS)
        if self.navigator is not None and self.navigator not in known:
            raise ValueError(f"navigator must be one of {', '.join(sorted(known))}")
        return self


def tail_ladder(first: int, rungs: int = 4) -> tuple[int, ...]:
    """Tail budgets to try, largest first: ``first``, halved while it stays positive, then 0
    (at most ``rungs`` values). Each smaller tail leaves more of the window for reading."""
    values = [first]
    while len(values) < rungs - 1 and values[-1] // 2 > 0:
        values.append(values[-1] // 2)
    if values[-1] != 0:
        values.append(0)
    return tuple(dict.fromkeys(values))


# -- per-turn state ----------------------------------------------------------------------------


class NavigatedTurn(BaseModel):
    """What one navigated turn did besides the report: the split, the compile and the
    reading budget.

    Every ``*_tokens``, ``nav_budget``, ``transcript_limit`` and ``spent`` is in the units of
    the text counter ``counter`` names (the model's tokenizer, or a stand-in such as UTF-8
    bytes in tests). The reading numbers (``spent``, ``shown_tokens``, ``refused``) are as the
    loop left them once :meth:`NavPlan.finished` is read after the turn."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    scope: str
    """The session scope the turn ran in, as text."""
    counter: str
    """Name of the text counter behind every token number of this turn."""
    view_ids: tuple[str, ...]
    """Ids of the records the model reads directly (protected, the request, the recent
    tail), in history order; the archive index record is not among them."""
    archived_ids: tuple[str, ...]
    """Ids of the older unprotected records moved to the archive."""
    tail_tokens: int
    """Tokens the recent tail adds to the view."""
    nav_budget: int = 0
    """Reading budget of the NavSession runtime: tokens that may be resident at once (the
    index plus open nodes; ``close`` gives them back). 0 when there is no archive."""
    index_tokens: int = 0
    """Tokens resident before the model's first call: the index plus what the prefetch
    opened."""
    transcript_limit: int = 0
    """Tokens the turn's prompt may still grow by over the whole tool loop (the window, minus
    the output allowance and the fixed prompt): the transcript guard's ledger, which
    ``close`` does not give back."""
    compiled: Literal["none", "reused", "incremental", "full"] = "none"
    """How the archive's manifest was obtained: no archive, reused from the cache, rebuilt
    incrementally over the cached build, or compiled in full."""
    engine: str = ""
    """The descriptor engine that described the archive (offline or a chat model)."""
    engine_calls: int = 0
    """Descriptor-engine calls the compile made this turn (0 when reused)."""
    cache_hits: int = 0
    """Descriptors the compile took from its cache this turn (0 when reused)."""
    compile_seconds: float = 0.0
    """Wall time of this turn's compile, in seconds (0 when reused)."""
    manifest: Manifest | None = None
    """The archive's manifest; ``None`` when there is no archive."""
    spent: int = 0
    """Tokens resident in the reading budget: the index and every node still open."""
    shown_tokens: int = 0
    """Tokens of every text the NavSession returned this turn, summed; unlike ``spent``,
    not reduced by ``close``."""
    refused: int = 0
    """Tool calls the executor refused (bad arguments, ids not readable now, no room)."""
    dropped_ids: tuple[str, ...] = ()
    """The oldest of ``archived_ids`` left out of the index: at the largest reading budget no
    index of the whole archive let every leaf be reached, so only its newest part that does is
    indexed (the model cannot read these records this turn; the index says so)."""


# How a turn got its archive's manifest: reused from the cache, rebuilt incrementally, compiled.
CompileMode = Literal["reused", "incremental", "full"]


@dataclass
class _Compiled:
    key: str
    result: BuildResult
    budget: int
    idf_leaves: int
    # Positions of leaves that are not records (a session tree's passages).
    order: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Refused:
    """A tail rung whose archive the compiler refused, kept to index part of it later."""

    split: HistorySplit
    info: NavigatedTurn
    nav_budget: int
    per_call: int
    error: SelfCheckFailed


@dataclass
class NavPlan:
    """One turn's loop plus the live objects behind it (tests and tools read these)."""

    loop: ToolLoop
    info: NavigatedTurn
    nav: NavSession | None = None
    executor: NavToolExecutor | None = None
    leaves: dict[str, str] = field(default_factory=dict)
    # The archive index record, placed in the view where the archive was (None: no archive).
    index: Record | None = None

    def finished(self) -> NavigatedTurn:
        """The turn info with the reading numbers as they stand now (after the loop ran)."""
        if self.nav is None or self.executor is None:
            return self.info
        return self.info.model_copy(
            update={
                "spent": self.nav.spent,
                "shown_tokens": self.nav.shown_tokens,
                "refused": self.executor.refused,
            }
        )


class NavigatedPolicy:
    """Progressive disclosure over history through a pcx manifest; see the module docs."""

    def __init__(
        self,
        config: NavigatedConfig | None = None,
        *,
        describer: ChatModel | None = None,
        text_counter: TextCounter | None = None,
        name: str = "navigated",
    ) -> None:
        self.config = config or NavigatedConfig()
        self.describer = describer
        self.text_counter = text_counter
        self.name = name
        self._lock = threading.Lock()
        # Per scope, its last BUDGETS_PER_SCOPE compiles by key, newest last.
        self._compiled: OrderedDict[str, OrderedDict[str, _Compiled]] = OrderedDict()
        # Archives the compiler refused at a budget (by key): the next turn tries a smaller
        # tail at once instead of repeating the failed shaping attempts.
        self._refused: OrderedDict[str, SelfCheckFailed] = OrderedDict()
        self._turns: dict[Scope, list[NavigatedTurn]] = {}

    # -- ContextPolicy ----------------------------------------------------------------------
    def turn(
        self, session: ContextSession, budget: RunBudget, cancel: CancelToken | None = None
    ) -> RunReport:
        """One turn; its :class:`NavigatedTurn` (as far as planning got when the turn failed
        while planning, none when it failed before the split) joins :meth:`turns`."""
        plans: list[NavPlan] = []
        seen: list[NavigatedTurn] = []

        def build(state: WorkingContext) -> ToolLoop:
            plan = self.plan(session.counter, state, budget, cancel, seen=seen)
            plans.append(plan)
            return plan.loop

        report = session.run_tools(build, budget, policy=self.name, cancel=cancel)
        info = plans[-1].finished() if plans else (seen[-1] if seen else None)
        if info is not None:
            with self._lock:
                self._turns.setdefault(session.scope, []).append(info)
        return report

    def turns(self, scope: Scope) -> tuple[NavigatedTurn, ...]:
        """Per-turn records of ``scope``, oldest first."""
        with self._lock:
            return tuple(self._turns.get(scope, ()))

    def close(self) -> None:
        """Forget every compiled archive and turn record."""
        with self._lock:
            self._compiled.clear()
            self._refused.clear()
            self._turns.clear()

    # -- planning ---------------------------------------------------------------------------
    def _counter(self, counter: TokenCounter) -> TextCounter:
        if self.text_counter is not None:
            return self.text_counter
        return text_meter_for(counter, self.config.counting)

    def plan(
        self,
        counter: TokenCounter,
        state: WorkingContext,
        budget: RunBudget,
        cancel: CancelToken | None = None,
        *,
        seen: list[NavigatedTurn] | None = None,
    ) -> NavPlan:
        """Split, compile (or reuse) and build the turn's :class:`ToolLoop`. ``seen`` gets
        the turn info as soon as the split is known, so a failure later still reports it."""
        cfg = self.config
        budget.validate_ranges()
        check(cancel)
        text_counter = self._counter(counter)
        snapshot = state.snapshot
        spec_json = tools_json(NAV_TOOLS)

        def prepare(view: Snapshot, control: tuple[Record, ...] = ()) -> int:
            return counter.prepare(
                ModelInput(
                    context=view,
                    phase=Phase.TOOLS,
                    control_records=control,
                    tools_json=spec_json,
                    system_text=SYSTEM_TEXT,
                    guidance=GUIDANCE,
                )
            ).token_count

        window = budget.context_window
        steps = cfg.steps_for(window)
        fresh = FreshIds(reserved_ids(state.original.records, snapshot.records))
        index_id = fresh("runtime-history-index")
        empty_index = Record(id=index_id, role=Role.USER, protected=True, body="")
        out = max(budget.edit_output_tokens, budget.completion_output_tokens)
        refusal = text_counter.count(NO_ROOM)
        positions = {r.id: i for i, r in enumerate(snapshot.records, start=1)}
        # The tail yields to the archive when the archive cannot be compiled at the reading
        # budget it leaves: a verbatim record bigger than that budget is paged, but every page
        # also costs an index line, so below some budget no paging makes every page reachable.
        # Showing fewer recent records directly frees reading budget (see tail_ladder).
        ladder = tail_ladder(int(cfg.tail_share * window))
        tried: set[tuple[str, ...]] = set()
        dropped: tuple[str, ...] = ()
        failure: BudgetExceeded | None = None
        refused: _Refused | None = None  # the rung refused at the largest reading budget
        built: tuple[_Compiled, CompileMode, float] | None = None
        for tail_tokens in ladder:
            split = split_history(snapshot, prepare, tail_tokens)
            if split.tail_ids in tried:
                continue  # the same split as a rung already refused
            tried.add(split.tail_ids)
            info = NavigatedTurn(
                scope=str(snapshot.scope),
                counter=text_counter.name,
                view_ids=tuple(r.id for r in split.view.records),
                archived_ids=split.archived_ids,
                tail_tokens=split.tail_tokens,
            )
            if seen is not None:
                seen.append(info)
            if not split.archive:
                # Everything fits: no archive, no tools; the first reply is the answer.
                loop = ToolLoop(
                    mode=RunMode.NAVIGATED,
                    view=split.view,
                    preamble=(),
                    tools=(),
                    execute=lambda name, arguments: ToolResult(False, "There is no archive."),
                    system_text=PLAIN_SYSTEM_TEXT,
                    guidance=PLAIN_GUIDANCE,
                    max_steps=1,
                )
                return NavPlan(loop=loop, info=info)

            indexed = with_index(split.view, empty_index, split.archived_ids, positions)
            fixed = prepare(indexed)
            # priced at the longest receipt ids a turn writes (step 15, call 30)
            probe = sample_receipt(CLOSE_TOOL.name, step=15, index=30)
            per_call = prepare(indexed, probe) - fixed + cfg.call_slack
            room = window - out - fixed - steps * (per_call + refusal)
            cap = _budget_step(int(cfg.nav_share * window), window)
            nav_budget = _budget_step(min(int(cfg.nav_share * window), room), window)
            if nav_budget < cfg.min_nav_tokens:
                short = BudgetExceeded(
                    f"the protected records and recent tail leave {max(nav_budget, 0)} tokens "
                    f"for the archive index (at least {cfg.min_nav_tokens} needed); raise the "
                    "context window or lower tail_share"
                )
                if not split.tail_ids:
                    raise short  # no smaller tail can free anything more
                failure = short  # a smaller tail leaves more of the window for reading
                check(cancel)
                continue
            try:
                built = self._compile(
                    str(snapshot.scope), split.archive, positions, nav_budget, text_counter, cancel
                )
            except SelfCheckFailed as exc:
                if refused is None or nav_budget > refused.nav_budget:
                    refused = _Refused(split, info, nav_budget, per_call, exc)
                if nav_budget < cap:
                    check(cancel)
                    continue  # a smaller tail leaves a larger reading budget
            break
        else:
            if refused is None:
                assert failure is not None  # every rung either returned, raised or failed
                raise failure
        if built is None:
            # No tail leaves a reading budget at which the whole archive compiles: index the
            # newest part of it that does, at the largest budget found, and say what is left out.
            assert refused is not None
            split, info, nav_budget, per_call = (
                refused.split,
                refused.info,
                refused.nav_budget,
                refused.per_call,
            )
            scope = str(snapshot.scope)
            compiled, mode, seconds, kept = newest_that_compiles(
                split.archive,
                lambda units: self._compile(
                    scope, units, positions, nav_budget, text_counter, cancel
                ),
                refused.error,
                cancel,
            )
            dropped = tuple(r.id for u in split.archive[: len(split.archive) - kept] for r in u)
        else:
            compiled, mode, seconds = built
        result = compiled.result
        manifest = result.manifests[compiled.budget]
        leaves = result.leaves[compiled.budget]
        offered = nav_tools(manifest)
        spec_json = tools_json(offered)  # every prompt from here on carries the offered ids
        nav = NavSession(
            manifest,
            budget=nav_budget,
            resolver=dict_resolver(leaves),
            config=ModeConfig(view_level=cfg.view_level, inline_small_leaves=False),
            counter=text_counter,
            protocol=PROTOCOL,
        )
        archived = len(info.archived_ids) - len(dropped)
        index_text = nav.index()
        prefetched: tuple[ToolStep, ...] = ()
        if cfg.navigator is not None:
            navigator = (
                ArchiveNavigator(
                    {**positions, **compiled.order},
                    replies(snapshot.records),
                    asked_before(split.view),
                )
                if cfg.navigator == ARCHIVE_NAVIGATOR
                else make_navigator(cfg.navigator)
            )
            prefetched = prefetch(nav, split.view, navigator, cfg.prefetch_steps)
            index_text = "\n".join([index_text, *(p.result for p in prefetched)])
        body = "\n".join(
            [
                INDEX_HEADER,
                index_text,
                f"({archived} archived records; reading budget {nav_budget} tokens, "
                f"{nav.spent} used by this index.)",
                *([left_out(dropped, positions)] if dropped else []),
            ]
        )
        index_record = Record(id=index_id, role=Role.USER, protected=True, body=body)
        view = with_index(split.view, index_record, split.archived_ids, positions)
        fixed_tools = prepare(view)
        fixed_final = counter.prepare(
            ModelInput(context=view, phase=Phase.COMPLETION, system_text=SYSTEM_TEXT)
        ).token_count
        executor = NavToolExecutor(
            nav,
            text_counter,
            limit=window - out - max(fixed_tools, fixed_final),
            per_call=per_call,
            max_calls=steps,
        )
        info = info.model_copy(
            update={
                "nav_budget": nav_budget,
                "index_tokens": nav.spent,
                "transcript_limit": executor.limit,
                "compiled": mode,
                "engine": result.stats.engine,
                "engine_calls": sum(result.stats.engine_calls.values()) if mode != "reused" else 0,
                "cache_hits": result.stats.cache_hits if mode != "reused" else 0,
                "compile_seconds": seconds,
                "dropped_ids": dropped,
                "manifest": manifest,
                "spent": nav.spent,
                "shown_tokens": nav.shown_tokens,
            }
        )
        loop = ToolLoop(
            mode=RunMode.NAVIGATED,
            view=view,
            preamble=(),
            tools=offered,
            execute=executor,
            system_text=SYSTEM_TEXT,
            guidance=GUIDANCE,
            max_steps=steps,
            prefetched=prefetched,
        )
        return NavPlan(
            loop=loop,
            info=info,
            nav=nav,
            executor=executor,
            leaves=dict(leaves),
            index=index_record,
        )

    # -- compiling --------------------------------------------------------------------------
    def _engine(self) -> DescriptorEngine:
        return LLMEngine(self.describer) if self.describer is not None else OfflineEngine()

    def _compile(
        self,
        scope: str,
        archive: Sequence[Unit],
        positions: dict[str, int],
        nav_budget: int,
        counter: TextCounter,
        cancel: CancelToken | None,
    ) -> tuple[_Compiled, CompileMode, float]:
        cfg = self.config
        sessions = session_tree(archive, positions, cfg.passage_records) if cfg.sessions else None
        tree, order = sessions or (
            archive_tree(archive, positions, cfg.segment_records, cfg.group_width),
            {},
        )
        engine = self._engine()
        key = _archive_key(tree, nav_budget, counter.name, cfg, self.describer)
        with self._lock:
            kept = self._compiled.get(scope, OrderedDict())
            found = kept.get(key)
            previous = next(reversed(kept.values()), None) if kept else None
            if found is not None:
                kept.move_to_end(key)
                self._compiled.move_to_end(scope)
        if found is not None:
            return found, "reused", 0.0
        with self._lock:
            refused = self._refused.get(key)
        if refused is not None:
            raise refused
        leaves = sum(1 for n in tree.root.walk() if n.is_leaf and n is not tree.root)
        incremental = previous is not None and leaves <= previous.idf_leaves * (
            cfg.idf_refresh_growth
        )
        options = BuildOptions(
            budgets=(nav_budget,),
            leaf_share=cfg.leaf_share,
            reveal_share=cfg.reveal_share,
            check_protocol=PROTOCOL,
            check_view=cfg.check_view or cfg.view_level,
        )
        started = time.perf_counter()
        try:
            result = compile_tree(
                tree,
                engine,
                options,
                counter=counter,
                cache=previous.result.cache if incremental and previous is not None else None,
                incremental=incremental,
                cancel=cancel,
            )
        except SelfCheckFailed as exc:
            with self._lock:
                self._refused[key] = exc
                while len(self._refused) > 4 * cfg.cached_scopes:
                    self._refused.popitem(last=False)
            raise
        seconds = time.perf_counter() - started
        check(cancel)
        idf_leaves = previous.idf_leaves if incremental and previous is not None else leaves
        entry = _Compiled(
            key=key, result=result, budget=nav_budget, idf_leaves=idf_leaves, order=order
        )
        with self._lock:
            kept = self._compiled.setdefault(scope, OrderedDict())
            kept[key] = entry
            while len(kept) > BUDGETS_PER_SCOPE:
                kept.popitem(last=False)
            self._compiled.move_to_end(scope)
            while len(self._compiled) > cfg.cached_scopes:
                self._compiled.popitem(last=False)
        return entry, ("incremental" if incremental else "full"), seconds


# Compiles kept per scope: questions over one history alternate between a few reading budgets
# (their lengths cross a budget step, a tail rung yields), and with one kept each switch
# recompiled (40 LoCoMo questions on locomo-47: 2 budgets, 18 recompiles).
BUDGETS_PER_SCOPE = 4


def newest_that_compiles(
    archive: Sequence[Unit],
    compile_: Callable[[Sequence[Unit]], tuple[_Compiled, CompileMode, float]],
    failed: SelfCheckFailed,
    cancel: CancelToken | None,
) -> tuple[_Compiled, CompileMode, float, int]:
    """Compile the newest units of ``archive`` that pass the self-check (``compile_`` raises
    :class:`SelfCheckFailed` when they do not); returns the compile, its mode, the seconds of
    the compiles that passed and how many units it kept. The cut is searched by doubling how
    many oldest units go, then bisecting back, so a long archive costs a few compiles, not
    one per unit. Raises ``failed`` when not even the newest unit alone compiles.

    Before this, such an archive stopped the whole run with the compiler's error (the 1.5B
    pressure run, step 7: 16 of 55 paged leaves unreachable within 1,152 tokens); leaving its
    oldest records out is what a sliding window does, said in the index."""
    seconds = 0.0
    done: dict[int, tuple[_Compiled, CompileMode]] = {}

    def compiles(drop: int) -> bool:
        nonlocal seconds
        check(cancel)
        try:
            compiled, mode, spent = compile_(archive[drop:])
        except SelfCheckFailed:
            return False
        seconds += spent
        done[drop] = (compiled, mode)
        return True

    last = len(archive) - 1  # drop at most this many: one unit stays to index
    failing, drop = 0, 1  # dropping ``failing`` units is known not to compile
    while drop <= last and not compiles(drop):
        failing, drop = drop, (min(2 * drop, last) if drop < last else last + 1)
    if drop > last:
        raise failed
    while drop - failing > 1:
        middle = (failing + drop) // 2
        if compiles(middle):
            drop = middle
        else:
            failing = middle
    compiled, mode = done[drop]
    return compiled, mode, seconds, len(archive) - drop


def left_out(dropped: Sequence[str], positions: dict[str, int]) -> str:
    """The index line naming the oldest records left out of it (:func:`newest_that_compiles`),
    so the model knows the archive is incomplete rather than empty there."""
    first, last = positions[dropped[0]], positions[dropped[-1]]
    where = f"#{first}" if first == last else f"#{first}-#{last}"
    return (
        f"({len(dropped)} oldest records, {where}, are left out of this index: the whole "
        "archive does not fit the reading budget, so they cannot be read.)"
    )


def _budget_step(tokens: int, window: int) -> int:
    """``tokens`` rounded down to a step of 1/128 of the window (at least 16): the reading
    budget depends on the question's length, and the compiled archive is keyed by it, so
    without the step every question over the same history recompiled (25 budgets for 40
    LoCoMo questions, 4,072-4,110); with it they share a compile, for under 1 % of the
    window."""
    step = max(16, window // 128)
    return tokens - tokens % step if tokens > 0 else tokens


def _create(config: NavigatedConfig, context: PolicyContext) -> NavigatedPolicy:
    return NavigatedPolicy(config, name=context.name)


SPEC = PolicySpec(
    name="navigated",
    config=NavigatedConfig,
    factory=_create,
    mode=RunMode.NAVIGATED,
    description=(
        "Older history is compiled into a pcx manifest; the model reads its index and may "
        "open records with index/look/open/close before answering."
    ),
)


def _archive_key(
    tree: SourceTree,
    budget: int,
    counter: str,
    cfg: NavigatedConfig,
    describer: ChatModel | None,
) -> str:
    digest = hashlib.sha256()
    parts = [
        str(budget),
        counter,
        cfg.model_dump_json(),
        describer.model_id if describer is not None else "offline",
    ]
    for node in tree.root.walk():
        parts.extend((node.id, node.title, node.content, str(len(node.children))))
    for part in parts:
        digest.update(part.encode("utf-8", errors="surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()
