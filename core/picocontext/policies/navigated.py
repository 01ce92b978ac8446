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
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

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
from picocontext.build.compiler import BuildOptions, BuildResult, compile_tree
from picocontext.build.engines import LLMEngine, OfflineEngine
from picocontext.build.engines.base import DescriptorEngine
from picocontext.build.errors import SelfCheckFailed
from picocontext.build.ir import IdRegistry, SourceNode, SourceTree
from picocontext.cancel import CancelToken, check
from picocontext.errors import BudgetExceeded
from picocontext.manifest.errors import ManifestError
from picocontext.manifest.model import Manifest
from picocontext.manifest.navigator import Navigator
from picocontext.manifest.routing import NAVIGATORS, make_navigator
from picocontext.manifest.runtime import ViewLevel, dict_resolver, render_line
from picocontext.manifest.session import ModeConfig, NavSession
from picocontext.manifest.text import STOPWORDS, stem
from picocontext.manifest.tokens import TextCounter
from picocontext.policies.archive_nav import ArchiveNavigator
from picocontext.policies.history import (
    Counting,
    ToolExecutor,
    Unit,
    split_history,
    text_meter_for,
)
from picocontext.policies.registry import PolicyContext, PolicySpec
from picocontext.prompts import COMPLETION_GUIDANCE, COMPLETION_INSTRUCTIONS
from picocontext.records import Record, Role, Scope, Snapshot
from picocontext.report import RunMode, RunReport, ToolStep
from picocontext.session import (
    ContextSession,
    FreshIds,
    ToolLoop,
    ToolResult,
    reserved_ids,
    sample_receipt,
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

NO_ROOM = "No room left in this turn's window: answer now with what you have read."

ARCHIVE_NAVIGATOR = ArchiveNavigator.name

INDEX_HEADER = "ARCHIVE INDEX - older records of this conversation, readable with the tools."

# -- tools -------------------------------------------------------------------------------------

_ID_SCHEMA: dict[str, Any] = {"type": "string", "minLength": 1}

INDEX_TOOL = ToolSpec(
    name="index",
    description="List the archive lines that can be opened now.",
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
)
LOOK_TOOL = ToolSpec(
    name="look",
    description="Fuller descriptions of listed ids.",
    parameters={
        "type": "object",
        "properties": {
            "ids": {"type": "array", "items": _ID_SCHEMA, "minItems": 1, "maxItems": 16}
        },
        "required": ["ids"],
        "additionalProperties": False,
    },
)


def _one_id_tool(name: str, description: str) -> ToolSpec:
    """A verb whose only argument is one node id."""
    return ToolSpec(
        name=name,
        description=description,
        parameters={
            "type": "object",
            "properties": {"id": _ID_SCHEMA},
            "required": ["id"],
            "additionalProperties": False,
        },
    )


OPEN_TOOL = _one_id_tool(
    "open", "Open a listed id: a branch lists its records, a leaf shows one record verbatim."
)
CLOSE_TOOL = _one_id_tool("close", "Close an open id to free reading budget.")
NAV_TOOLS: tuple[ToolSpec, ...] = (INDEX_TOOL, LOOK_TOOL, OPEN_TOOL, CLOSE_TOOL)


def nav_tools(manifest: Manifest) -> tuple[ToolSpec, ...]:
    """The verbs as offered for one manifest: ``open`` (the verb that discloses) limited to
    its openable node ids (the root is not) when they are few; the runtime judges the rest."""
    ids = [i for i in manifest.nodes if i != manifest.root.id]
    return (INDEX_TOOL, LOOK_TOOL, restrict_ids(OPEN_TOOL, ids, "id"), CLOSE_TOOL)


_STRICT = ConfigDict(frozen=True, extra="forbid", strict=True)


class _NoArgs(BaseModel):
    model_config = _STRICT


class _LookArgs(BaseModel):
    model_config = _STRICT
    ids: list[str] = Field(min_length=1, max_length=16)


class _NodeArgs(BaseModel):
    model_config = _STRICT
    id: str = Field(min_length=1, max_length=512)


_USAGE = {
    "index": "index takes no arguments: {}",
    "look": 'look needs {"ids": ["<id>", ...]} with 1 to 16 ids from the index',
    "open": 'open needs {"id": "<id>"} with an id from the index',
    "close": 'close needs {"id": "<id>"} with an id that is open',
}
_ARG_MODELS: dict[str, type[BaseModel]] = {
    "index": _NoArgs,
    "look": _LookArgs,
    "open": _NodeArgs,
    "close": _NodeArgs,
}


def parse_arguments(name: str, arguments: str) -> BaseModel:
    """Strict parse of one verb's JSON arguments; raises ``ValueError`` with the usage line."""
    usage = _USAGE[name]
    text = arguments.strip() or "{}"
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError(f"Arguments are not valid JSON; {usage}.") from None
    if not isinstance(value, dict):
        raise ValueError(f"Arguments must be a JSON object; {usage}.")
    try:
        return _ARG_MODELS[name].model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "arguments"
        raise ValueError(f"Invalid arguments ({where}: {first['msg']}); {usage}.") from None


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


# -- the archive as a source tree --------------------------------------------------------------

ROOT_ID = "r"


def leaf_text(record: Record) -> str:
    """A record's verbatim body, followed by its tool calls (name, arguments and call id)
    when it made any, since those are part of what the record said."""
    if not record.tool_calls:
        return record.body
    calls = "\n".join(f"-> {c.name}({c.arguments}) [call {c.id}]" for c in record.tool_calls)
    return f"{record.body}\n{calls}" if record.body else calls


def _leaf_title(record: Record, position: int, call_names: dict[str, str]) -> str:
    """Short on purpose: the descriptor engine repeats the title in the line's description."""
    head = f"#{position} {record.role.value}"
    if record.tool_calls:
        return f"{head} calls {', '.join(dict.fromkeys(c.name for c in record.tool_calls))}"
    if record.role is Role.TOOL and record.tool_call_id is not None:
        return f"{head} result of {call_names.get(record.tool_call_id, 'a tool')}"
    return head


def archive_tree(
    archive: Sequence[Unit],
    positions: dict[str, int],
    segment_records: int = 8,
    group_width: int = 5,
) -> SourceTree:
    """Root -> chronological groups -> turns -> one leaf per archived record.

    A turn starts at each user record, or when the next unit would make it longer than
    ``segment_records``. While a level has more than ``group_width`` nodes, consecutive nodes
    are grouped (``Turns a-b``), so the tree stays in conversation order and appending history
    only changes the newest group. Leaves keep their record ids (claimed first); a turn or
    group id yields on a collision. Every title carries its record numbers (#n)."""
    ids = IdRegistry((ROOT_ID,))
    call_names = {c.id: c.name for u in archive for r in u for c in r.tool_calls}
    segments: list[list[Record]] = []
    for unit in archive:
        starts = unit[0].role is Role.USER
        if not segments or starts or len(segments[-1]) + len(unit) > segment_records:
            segments.append([])
        segments[-1].extend(unit)
    leaf_ids = {r.id: ids.claim(r.id) for segment in segments for r in segment}
    level: list[tuple[SourceNode, int, int, int, int]] = []  # node, first/last turn, #first/#last
    for number, segment in enumerate(segments, start=1):
        first, last = positions[segment[0].id], positions[segment[-1].id]
        title = f"Turn {number} {_span(first, last)}"
        branch = SourceNode(id=ids.claim(f"turn-{number}"), title=title, facets={"kind": "turn"})
        for record in segment:
            branch.children.append(
                SourceNode(
                    id=leaf_ids[record.id],
                    title=_leaf_title(record, positions[record.id], call_names),
                    content=leaf_text(record),
                    format="txt",
                    facets={"kind": "record", "role": record.role.value},
                    origin=record.id,
                )
            )
        level.append((branch, number, number, first, last))
    while len(level) > group_width:
        grouped: list[tuple[SourceNode, int, int, int, int]] = []
        for start in range(0, len(level), group_width):
            chunk = level[start : start + group_width]
            if len(chunk) == 1:
                grouped.append(chunk[0])
                continue
            t1, t2 = chunk[0][1], chunk[-1][2]
            p1, p2 = chunk[0][3], chunk[-1][4]
            node = SourceNode(
                id=ids.claim(f"turns-{t1}-{t2}"),
                title=f"Turns {t1}-{t2} {_span(p1, p2)}",
                facets={"kind": "turns"},
                children=[c[0] for c in chunk],
            )
            grouped.append((node, t1, t2, p1, p2))
        level = grouped
    root = SourceNode(
        id=ROOT_ID,
        title="Archived conversation history",
        facets={"kind": "history"},
        children=[c[0] for c in level],
    )
    return SourceTree(source_id="history", kind="history", root=root)


# A record body's leading bracketed tag: a conversation turn's session date
# ("[2026-03-02] Maya: ..."), written by whoever made the records.
_TAG = re.compile(r"^\[([^\]\n]{1,64})\] ")
_WORDS = re.compile(r"[a-z0-9]+")


def split_tag(text: str) -> tuple[str, str]:
    """A text's leading bracketed tag (a turn's session date) and the rest; ``""`` and the
    text when it has none."""
    found = _TAG.match(text)
    return (found.group(1), text[found.end() :]) if found else ("", text)


def sessions_of(archive: Sequence[Unit]) -> list[tuple[str, list[Unit]]]:
    """Consecutive units whose first record carries the same tag, as ``(tag, units)`` runs in
    history order: a dated conversation's sessions. One untagged run when nothing is tagged."""
    runs: list[tuple[str, list[Unit]]] = []
    for unit in archive:
        tag = split_tag(unit[0].body)[0] if unit else ""
        if not runs or runs[-1][0] != tag:
            runs.append((tag, []))
        runs[-1][1].append(unit)
    return runs


# A text that already names its speaker ("Maya: ...") needs no role in front of it.
_SPEAKER = re.compile(r"^[^\s:\[][^:\n]{0,40}: ")


KEY_WORDS = 4  # words in a passage's title


def speaker_line(record: Record) -> tuple[str, str]:
    """A record as an entry of a passage or a block: its tag apart, then its text -- as is
    when it names its speaker (``Maya: ...``), else after a line with its role (``tool:``),
    so every line of the record stays whole and starts where it started (a reader that looks
    for lines like ``FACT k=v`` still finds them)."""
    tag, rest = split_tag(leaf_text(record))
    return tag, rest if _SPEAKER.match(rest) else f"{record.role.value}:\n{rest}"


def session_tree(
    archive: Sequence[Unit], positions: dict[str, int], passage_records: int = 4
) -> tuple[SourceTree, dict[str, int]] | None:
    """Root -> one branch per session -> passages of up to ``passage_records`` consecutive
    records, when every archived unit belongs to a dated session (its first record starts
    with a tag) and there are at least two sessions; None otherwise.

    A session's title carries its date and record numbers, and its description (the
    descriptor engine's digest of its passages) says what was talked about, so the index is
    one dated line per session. A passage is one leaf: its records verbatim, one line each,
    without the date its session line already carries. Opening one passage shows a turn with
    the turns around it (where a reply holds the answer to what matched), and a session lists
    a few passages instead of every turn. Also returns each passage's position (its last
    record's), so a navigator can order passages like records."""
    runs = sessions_of(archive)
    if len(runs) < 2 or any(not tag for tag, _ in runs):
        return None
    parts = [_passages(units, passage_records) for _, units in runs]
    texts = ["\n".join(speaker_line(r)[1] for r in part) for each in parts for part in each]
    words = iter(key_words(texts, KEY_WORDS))
    contents = iter(texts)
    ids = IdRegistry((ROOT_ID,))
    order: dict[str, int] = {}
    children: list[SourceNode] = []
    for number, ((tag, units), passages) in enumerate(zip(runs, parts, strict=True), start=1):
        records = [r for u in units for r in u]
        span = _span(positions[records[0].id], positions[records[-1].id])
        branch = SourceNode(
            id=ids.claim(f"session-{number}"),
            title=f"Session {number} [{tag}] {span}",
            facets={"kind": "session", "date": tag},
        )
        for part in passages:
            first, last = positions[part[0].id], positions[part[-1].id]
            leaf = SourceNode(
                id=ids.claim(f"s{number}-{first}"),
                title=f"{_span(first, last)} {' '.join(next(words))}".rstrip(),
                content=next(contents),
                format="txt",
                facets={"kind": "passage"},
                origin=part[0].id,
            )
            order[leaf.id] = last
            branch.children.append(leaf)
        children.append(branch)
    root = SourceNode(
        id=ROOT_ID,
        title="Archived conversation sessions",
        facets={"kind": "history"},
        children=children,
    )
    return SourceTree(source_id="history", kind="history", root=root), order


def key_words(texts: Sequence[str], count: int) -> list[list[str]]:
    """For each text, the ``count`` words most its own: term frequency there times the log of
    the inverse share of texts that use the word (stemmed), stop words and words of two
    letters or fewer left out; each shown as first written. A passage titled by its key
    words gives its session's line a digest of what was said, and a navigator that ranks
    by descriptors something to match."""
    bags: list[dict[str, tuple[int, str]]] = []
    seen: dict[str, int] = {}
    for text in texts:
        bag: dict[str, tuple[int, str]] = {}
        for word in _WORDS.findall(text.lower()):
            if len(word) <= 2 or word in STOPWORDS:
                continue
            root = stem(word)
            hits, first = bag.get(root, (0, word))
            bag[root] = (hits + 1, first)
        for root in bag:
            seen[root] = seen.get(root, 0) + 1
        bags.append(bag)
    total = len(texts)

    def weight(bag: dict[str, tuple[int, str]], root: str) -> float:
        return bag[root][0] * math.log(total / seen[root])

    return [
        [bag[r][1] for r in sorted(bag, key=lambda r: (-weight(bag, r), r))[:count]] for bag in bags
    ]


def _passages(units: Sequence[Unit], size: int) -> list[list[Record]]:
    """Consecutive units cut into runs of at most ``size`` records (a unit never parts)."""
    out: list[list[Record]] = []
    for unit in units:
        if not out or len(out[-1]) + len(unit) > size:
            out.append([])
        out[-1].extend(unit)
    return out


def _span(first: int, last: int) -> str:
    return f"#{first}" if first == last else f"#{first}-#{last}"


# -- per-turn state ----------------------------------------------------------------------------


class NavigatedTurn(BaseModel):
    """What one navigated turn did besides the report: the split, the compile and the
    reading budget. ``counter`` names the text counter behind every budget number."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    scope: str
    counter: str
    view_ids: tuple[str, ...]
    archived_ids: tuple[str, ...]
    tail_tokens: int
    nav_budget: int = 0
    index_tokens: int = 0
    transcript_limit: int = 0
    compiled: Literal["none", "reused", "incremental", "full"] = "none"
    engine: str = ""
    engine_calls: int = 0
    cache_hits: int = 0
    compile_seconds: float = 0.0
    manifest: Manifest | None = None
    spent: int = 0
    shown_tokens: int = 0
    refused: int = 0


@dataclass
class _Compiled:
    key: str
    result: BuildResult
    budget: int
    idf_leaves: int
    # Positions of leaves that are not records (a session tree's passages).
    order: dict[str, int] = field(default_factory=dict)


@dataclass
class NavPlan:
    """One turn's loop plus the live objects behind it (tests and tools read these)."""

    loop: ToolLoop
    info: NavigatedTurn
    nav: NavSession | None = None
    executor: _Executor | None = None
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
        failure: SelfCheckFailed | BudgetExceeded | None = None
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
                compiled, mode, seconds = self._compile(
                    str(snapshot.scope), split.archive, positions, nav_budget, text_counter, cancel
                )
            except SelfCheckFailed as exc:
                if nav_budget >= cap:
                    raise  # a smaller tail cannot raise the reading budget any further
                failure = exc
                check(cancel)
                continue
            break
        else:
            assert failure is not None  # every rung either returned, raised or failed to fit
            raise failure
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
        archived = len(info.archived_ids)
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
            ]
        )
        index_record = Record(id=index_id, role=Role.USER, protected=True, body=body)
        view = with_index(split.view, index_record, split.archived_ids, positions)
        fixed_tools = prepare(view)
        fixed_final = counter.prepare(
            ModelInput(context=view, phase=Phase.COMPLETION, system_text=SYSTEM_TEXT)
        ).token_count
        executor = _Executor(
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
    ) -> tuple[_Compiled, Literal["reused", "incremental", "full"], float]:
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


def with_index(
    view: Snapshot, index: Record, archived: Sequence[str], positions: dict[str, int]
) -> Snapshot:
    """``view`` with the archive index standing where the archive ends: before the first
    shown record newer than the newest archived one, so the prompt stays in time order and
    protected records older than that (earlier requests kept in view) come before it.

    Measured on the 0.5B model, one prompt per placement (docs/results/qwen-four-policies.md):
    on a long-history step (unprotected requests) with the index after the latest request it
    gave ``cell1`` the value of ``cell0``; in its place in time it answered right. On a state
    step whose earlier requests are protected, the index before all of them (where the
    archive *begins*) made it copy the requests' ``<current value>`` placeholder; after them,
    where the archive ends, it answered right."""
    last = max((positions[r] for r in archived), default=0)
    records = list(view.records)
    at = next((i for i, r in enumerate(records) if positions.get(r.id, 0) > last), len(records))
    records.insert(at, index)
    return view.model_copy(update={"records": tuple(records)})


def asked_before(view: Snapshot) -> dict[str, str]:
    """Id -> text of the user records in ``view`` other than the latest one (the question
    a prefetch answers)."""
    users = [r for r in view.records if r.role is Role.USER]
    return {r.id: r.body for r in users[:-1]}


def replies(history: Sequence[Record]) -> dict[str, str]:
    """User record id -> the assistant record that answered it: the first plain assistant
    reply (text, no tool call) after it and before the next user record."""
    out: dict[str, str] = {}
    asking: str | None = None
    for record in history:
        if record.role is Role.USER:
            asking = record.id
        elif (
            asking is not None
            and record.role is Role.ASSISTANT
            and record.body.strip()
            and not record.tool_calls
        ):
            out[asking] = record.id
            asking = None
    return out


def prefetch(
    nav: NavSession, view: Snapshot, navigator: Navigator, steps: int
) -> tuple[ToolStep, ...]:
    """Let ``navigator`` take up to ``steps`` steps for the latest user request before the
    model reads the archive: ``open``, ``search`` and ``related`` are carried out through the
    session (charged like the model's own calls). A document navigator stops after opening a
    leaf (it looks for one page); the archive navigator goes on to its next target. A
    ``close`` ends the prefetch instead of being carried out: what was shown stays in the
    prompt, so its tokens stay charged. Returns each call carried out, with what it showed."""
    query = next((r.body for r in reversed(view.records) if r.role == Role.USER), "")
    navigator.prepare(nav.manifest)
    one_leaf = not isinstance(navigator, ArchiveNavigator)
    done: list[ToolStep] = []
    for step in range(steps if query.strip() else 0):
        action = navigator.decide(query, nav.runtime.peek(), nav.budget_remaining)
        if action.verb == "search":
            arguments: dict[str, object] = {"query": action.query or query, "k": action.k}
        elif action.verb in ("open", "related"):
            arguments = {"id": action.ids[0]}
        else:
            break
        try:
            if action.verb == "search":
                shown = nav.search(action.query or query, action.k)
            elif action.verb == "related":
                shown = nav.related(action.ids[0])
            else:
                shown = nav.open(action.ids[0])
        except ManifestError:
            break
        done.append(
            ToolStep(
                step=step,
                name=action.verb,
                arguments=json.dumps(arguments, ensure_ascii=False),
                ok=True,
                result=shown,
                model_text=f"{navigator.name}: {action.reason}" if action.reason else "",
            )
        )
        if action.verb == "open" and one_leaf and nav.manifest.get(action.ids[0]).is_leaf:
            break
    return tuple(done)


class _Executor(ToolExecutor):
    """Runs one verb: strict arguments, node ids checked by the runtime, the transcript
    guard, and a clear message for every refusal (the model may retry)."""

    def __init__(
        self, nav: NavSession, meter: TextCounter, limit: int, per_call: int, max_calls: int
    ) -> None:
        super().__init__(meter, limit, per_call, max_calls, per_call + meter.count(NO_ROOM))
        self.nav = nav

    def __call__(self, name: str, arguments: str) -> ToolResult:
        try:
            args = parse_arguments(name, arguments)
        except ValueError as exc:
            return self.refuse(arguments, str(exc), NO_ROOM)
        try:
            if name == "index":
                cost = self.meter.count(self.nav.runtime.frontier_view())
                return self._checked(arguments, cost, "the index", self.nav.index)
            if name == "look":
                assert isinstance(args, _LookArgs)
                return self._look(arguments, args.ids)
            assert isinstance(args, _NodeArgs)
            if name == "open":
                return self._open(arguments, args.id)
            freed = self.nav.close(args.id)
            text = (
                f"Closed {args.id}: {freed} tokens freed, {self.nav.budget_remaining} left."
                if freed
                else f"{args.id} was not open; nothing to close."
            )
            return self._note(arguments, text)
        except ManifestError as exc:
            return self.refuse(arguments, _explain(exc.message), NO_ROOM)

    def _note(self, arguments: str, text: str) -> ToolResult:
        """A short confirmation (the short refusal's room is always kept for it)."""
        if not self.fits(arguments, self.meter.count(text)):
            text = NO_ROOM
        return self.grant(arguments, text)

    def _checked(self, arguments: str, cost: int, what: str, act: Callable[[], str]) -> ToolResult:
        """Check the predicted cost first, so a refused disclosure changes nothing."""
        if not self.fits(arguments, cost):
            return self.refuse(
                arguments,
                f"Refused: {what} would not fit in the context window for this turn. Answer "
                "now with what you have read, or pick something smaller.",
                NO_ROOM,
            )
        return self.grant(arguments, act())

    def _visible_or_raise(self, node_id: str) -> None:
        """Unknown ids, the root and ids not on the frontier are refused by the runtime's own
        checks, which raise before anything changes."""
        if not self.nav.runtime.is_visible(node_id):
            self.nav.runtime.look([node_id])
            raise ManifestError(f"{node_id!r} cannot be read now.")

    def _look(self, arguments: str, ids: Sequence[str]) -> ToolResult:
        unique = list(dict.fromkeys(ids))
        for nid in unique:
            self._visible_or_raise(nid)
        runtime = self.nav.runtime
        preview = "\n".join(render_line(n, runtime.manifest.get(n), "full") for n in unique)
        cost = self.meter.count(preview)
        return self._checked(arguments, cost, "these descriptions", lambda: self.nav.look(unique))

    def _open(self, arguments: str, node_id: str) -> ToolResult:
        self._visible_or_raise(node_id)
        runtime = self.nav.runtime
        if runtime.is_spliced(node_id) or runtime.is_revealed(node_id):
            return self._note(arguments, f"{node_id} is already open; see above.")
        node = runtime.manifest.get(node_id)
        if node.is_leaf:
            # In resolver mode the splice cost is the count of exactly the text returned.
            cost = runtime.expand_cost(node_id)
        else:
            children = [c for c in node.children or () if runtime.manifest.has(c)]
            cost = self.meter.count("\n".join(runtime.entry(c).text for c in children))
        what = "this record" if node.is_leaf else "this branch"
        return self._checked(arguments, cost, what, lambda: self.nav.open(node_id))


def _explain(message: str) -> str:
    """Runtime refusals, plus where valid ids come from."""
    message = message.rstrip()
    if not message.endswith((".", "!", "?")):
        message += "."
    return f"{message} Ids are the first word of an index line (call index to list them)."
