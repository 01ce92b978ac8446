"""The one history view shared by every policy that splits the working history.

A policy that shows the model only part of the history (the navigated and distilled policies,
and whatever later policies cut the window the same way) needs the same four things, and they
live here once so every such policy cuts and measures the history identically:

* **units** -- a record and the tool results that answer it never part
  (:func:`history_units`);
* **the split** into what the model reads directly (protected units, the latest request and
  the newest tail that fits a share of the window) and what is archived
  (:func:`split_history`);
* **one text meter** (:class:`TextMeter`): the cost of a piece of text in the window's own
  units, from the counter's tokenizer when it has one or by rendering it through the counter;
  non-empty text always costs at least one token, and one cache size holds for every policy;
* **one executor base** (:class:`ToolExecutor`): a ledger of how much this turn's prompt may
  still grow, which keeps room for a short refusal on every call that may still come.

The receipt records a tool call adds to the prompt are the session's
(:func:`picocontext.receipts.sample_receipt`); a policy prices them, it never spells them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from picocontext.backend import ModelInput, Phase, TokenCounter
from picocontext.manifest.tokens import (
    ChatModelCounter,
    HeuristicCounter,
    TextCounter,
    Tokenizes,
)
from picocontext.records import Record, Role, Scope, Snapshot
from picocontext.session import ToolResult, object_text

Unit = tuple[Record, ...]
Counting = Literal["auto", "tokenizer", "rendered", "heuristic"]

METER_CACHE = 65_536
_PROBE_SCOPE = Scope(user_id="count", conversation_id="count", branch_id="count")


# -- units and the split -------------------------------------------------------------------


def history_units(records: Sequence[Record]) -> list[Unit]:
    """Consecutive records that must stay together: a record and the tool results that follow
    it form one unit; every other record is a unit of its own."""
    units: list[list[Record]] = []
    for record in records:
        if record.role is Role.TOOL and units:
            units[-1].append(record)
        else:
            units.append([record])
    return [tuple(u) for u in units]


@dataclass(frozen=True)
class HistorySplit:
    """``view`` is what the model reads directly, in history order; ``archive`` the older
    unprotected units kept out of it. ``pinned_ids`` are the latest request and what follows
    it (always shown), ``tail_ids`` the other unprotected records shown, and ``tail_tokens``
    what the tail adds to the view."""

    view: Snapshot
    archive: tuple[Unit, ...]
    tail_ids: tuple[str, ...]
    pinned_ids: tuple[str, ...]
    tail_tokens: int

    @property
    def archived_records(self) -> int:
        return sum(len(u) for u in self.archive)

    @property
    def archived_ids(self) -> tuple[str, ...]:
        return tuple(r.id for u in self.archive for r in u)


def split_history(
    snapshot: Snapshot,
    measure: Callable[[Snapshot], int],
    tail_tokens: int,
    *,
    charge_request: bool = False,
) -> HistorySplit:
    """Show every protected unit, the latest unprotected user request with everything after
    it, and the longest run of newer unprotected units whose cost (growth of
    ``measure(view)``) stays within ``tail_tokens``; archive the older unprotected units.

    The archive is always older than every unprotected record shown. ``charge_request``
    counts the pinned request against ``tail_tokens`` too (the tail is then whatever is left
    of the share); by default the request is free and the share is all tail."""
    units = history_units(snapshot.records)
    protected = {i for i, u in enumerate(units) if any(r.protected for r in u)}
    request = next(
        (
            i
            for i in reversed(range(len(units)))
            if units[i][0].role is Role.USER and i not in protected
        ),
        len(units),
    )

    def shown(boundary: int) -> set[int]:
        return protected | set(range(boundary, len(units)))

    def view_of(indices: set[int]) -> Snapshot:
        records = tuple(r for i, u in enumerate(units) if i in indices for r in u)
        return Snapshot(scope=snapshot.scope, revision=snapshot.revision, records=records)

    pinned = shown(request)
    base = measure(view_of(protected if charge_request else pinned))
    costs: dict[int, int] = {}

    def cost(boundary: int) -> int:
        if boundary not in costs:
            costs[boundary] = measure(view_of(shown(boundary))) - base
        return costs[boundary]

    # A view grows with every unit added, so bisect for the earliest boundary that fits.
    lo, hi = 0, request
    while lo < hi:
        mid = (lo + hi) // 2
        if cost(mid) <= tail_tokens:
            hi = mid
        else:
            lo = mid + 1
    visible = shown(lo)
    tail = sorted(visible - pinned)
    used = cost(lo) - (cost(request) if charge_request else 0)
    return HistorySplit(
        view=view_of(visible),
        archive=tuple(units[i] for i in range(len(units)) if i not in visible),
        tail_ids=tuple(r.id for i in tail for r in units[i]),
        pinned_ids=tuple(r.id for i in sorted(pinned - protected) for r in units[i]),
        tail_tokens=used if tail else 0,
    )


# -- the text meter ------------------------------------------------------------------------


class TextMeter:
    """The cost of a piece of text in the window's units, memoized: rendered through
    ``counter`` as the body of one protected user record, minus the empty rendering, which is
    exact for byte counters and within a token or two of the tokenizer's count for chat
    templates. Non-empty text costs at least 1. A counter with a tokenizer is counted directly
    by :meth:`tokenizer` (the manifest runtime's :class:`ChatModelCounter`, same rule)."""

    def __init__(self, counter: TokenCounter, name: str | None = None) -> None:
        self._counter = counter
        self._name = name or f"rendered:{type(counter).__name__}"
        self._cache: dict[str, int] = {}
        self._base = self._render("")

    @staticmethod
    def tokenizer(counter: TokenCounter) -> TextCounter:
        """Count with ``counter.count_tokens`` (named after its ``model_id`` when it has one)."""
        if not isinstance(counter, Tokenizes):
            raise ValueError(f"{type(counter).__name__} has no count_tokens; use 'rendered'")
        ident = getattr(counter, "model_id", None)
        label = ident if isinstance(ident, str) else type(counter).__name__
        return ChatModelCounter(counter, METER_CACHE, name=f"tokenizer:{label}")

    @property
    def name(self) -> str:
        return self._name

    def _render(self, text: str) -> int:
        record = Record(id="probe", role=Role.USER, protected=True, body=text)
        model_input = ModelInput(
            context=Snapshot(scope=_PROBE_SCOPE, records=(record,)),
            phase=Phase.COMPLETION,
            system_text="",
            guidance="",
        )
        return self._counter.prepare(model_input).token_count

    def count(self, text: str) -> int:
        if not text:
            return 0
        hit = self._cache.get(text)
        if hit is None:
            hit = max(1, self._render(text) - self._base)
            if len(self._cache) >= METER_CACHE:
                self._cache.clear()
            self._cache[text] = hit
        return hit


def has_tokenizer(counter: TokenCounter) -> bool:
    return callable(getattr(counter, "count_tokens", None))


def text_meter_for(counter: TokenCounter, counting: Counting = "auto") -> TextCounter:
    """The text counter a turn budgets with: ``auto`` uses the counter's tokenizer when it
    has ``count_tokens`` and renders through the counter otherwise; ``heuristic`` is 4
    characters per token."""
    if counting == "heuristic":
        return HeuristicCounter()
    if counting == "tokenizer" or (counting == "auto" and has_tokenizer(counter)):
        if not has_tokenizer(counter):
            raise ValueError(f"{type(counter).__name__} has no count_tokens; use 'rendered'")
        return TextMeter.tokenizer(counter)
    return TextMeter(counter)


# -- the executor base ---------------------------------------------------------------------


class ToolExecutor(ABC):
    """Runs one tool call of a policy's loop and charges it to this turn's window.

    Every exchange stays in the turn's prompt, so the ledger starts at ``limit`` (what the
    prompt may still grow by) and each call costs ``per_call`` (its receipt records), its
    echoed arguments and its result. A result is granted only if it leaves ``refusal`` tokens
    for each call that may still come (``max_calls`` in all), so a model that keeps calling is
    refused with a short message, never pushed past the window."""

    def __init__(
        self, meter: TextCounter, limit: int, per_call: int, max_calls: int, refusal: int
    ) -> None:
        self.meter = meter
        self.limit = limit
        self.per_call = per_call
        self.max_calls = max_calls
        self.refusal = refusal
        self.used = 0
        self.calls = 0
        self.refused = 0

    @abstractmethod
    def __call__(self, name: str, arguments: str) -> ToolResult:
        """One call: a result the ledger can afford, or a refusal saying why."""

    @property
    def reserve(self) -> int:
        """Room kept for a short refusal on every call that may still follow this one."""
        return max(self.max_calls - self.calls - 1, 0) * self.refusal

    @property
    def remaining(self) -> int:
        return self.limit - self.used

    def call_cost(self, arguments: str) -> int:
        """What a call adds besides its result: the receipt and the echoed arguments."""
        return self.per_call + self.meter.count(object_text(arguments))

    def fits(self, arguments: str, tokens: int) -> bool:
        """Whether a result of ``tokens`` leaves the reserve for later calls."""
        return self.used + self.call_cost(arguments) + tokens + self.reserve <= self.limit

    def charge(self, arguments: str, text: str) -> None:
        self.used += self.call_cost(arguments) + self.meter.count(text)
        self.calls += 1

    def grant(self, arguments: str, text: str) -> ToolResult:
        self.charge(arguments, text)
        return ToolResult(ok=True, text=text)

    def refuse(self, arguments: str, message: str, short: str) -> ToolResult:
        """A refusal; ``short`` instead when even ``message`` would crowd the window."""
        if not self.fits(arguments, self.meter.count(message)):
            message = short
        self.refused += 1
        self.charge(arguments, message)
        return ToolResult(ok=False, text=message)
