"""Compaction: past a threshold, the model summarizes the oldest history into one record.

This is the auto-compact of coding agents and the summarization middleware of agent
frameworks: when the completion prompt grows past ``trigger`` of the room the window leaves
for it, the oldest unprotected history (everything older than a verbatim tail of
``keep_tail`` of the window) is sent to the model with a summary instruction, and the reply
replaces those records in the working context as a single record. A previous summary is part
of the oldest history, so summaries fold recursively. Then the turn answers from the working
context as append-only does.

What holds:

* the summary is model-written (the session's own backend, the same decoding), and its call
  is charged to the turn like every other call (tokens, prefill, the call in the report);
* the edit goes through :meth:`ContextSession.apply`, so it is validated atomically: tool
  groups are folded whole or not at all, protected records are never touched, and the
  preserved transcript keeps every original;
* one edit holds at most 32 operations, so one round folds at most 32 records; up to
  ``max_rounds`` rounds run until the prompt is under the threshold;
* the summary prompt must itself fit the window; the oldest units that fit are summarized.

:meth:`CompactionPolicy.compact` is the maintenance step alone (a conversation runner calls
it when records arrive); :meth:`CompactionPolicy.turn` compacts if needed, then answers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from picocontext.backend import ModelInput, ModelResponse, Phase, PreparedPrompt
from picocontext.budget import RunBudget
from picocontext.cancel import CancelToken, check
from picocontext.edits import Delete, Edit, Operation, Replace, edit_payload
from picocontext.errors import BudgetExceeded, Cancelled, ModelError, PicoContextError
from picocontext.policies.history import Unit, split_history
from picocontext.policies.registry import PolicyContext, PolicySpec
from picocontext.policies.sliding_window import completion_tokens, prompt_room
from picocontext.records import Record, Role, Snapshot
from picocontext.report import EditAttempt, Outcome, RunMode, RunReport
from picocontext.session import ContextSession

NAME = "compaction"
MAX_FOLDED = 32
SUMMARY_MARK = "[summary of earlier conversation]"
SUMMARY_SYSTEM = (
    "You compress conversation history for an assistant with a small context window. "
    "The assistant will see only your summary instead of these messages."
)
SUMMARY_GUIDANCE = (
    "Summarize the conversation above. Keep every name, number, date, decision and fact "
    "that may be asked about later; when a fact changed, keep its latest value. Write short "
    "plain sentences, no preamble."
)


class CompactionSettings(BaseModel):
    """``trigger``: compact when the completion prompt exceeds this share of the prompt room
    (window − answer allowance). ``keep_tail``: newest history kept verbatim, as a share of
    the window. ``summary_tokens``: output allowance of one summary call."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    trigger: float = Field(default=0.75, gt=0.0, le=1.0)
    keep_tail: float = Field(default=0.25, ge=0.0, lt=1.0)
    summary_tokens: int = Field(default=256, ge=16, le=4_096)
    max_rounds: int = Field(default=4, ge=1, le=16)


@dataclass(frozen=True)
class Compaction:
    """One round: the summary call, which records it folded and where the summary lives."""

    prompt: PreparedPrompt
    response: ModelResponse
    folded_ids: tuple[str, ...]
    summary_id: str
    edit: Edit
    seconds: float


def is_summary(record: Record) -> bool:
    return record.body.startswith(SUMMARY_MARK)


def _plain(record: Record) -> bool:
    return (
        record.role in (Role.USER, Role.ASSISTANT)
        and not record.tool_calls
        and record.tool_call_id is None
    )


def _summary_view(snapshot: Snapshot, units: list[Unit]) -> Snapshot:
    """The protected records before the last folded unit, and the folded units, in order."""
    folded = {r.id for u in units for r in u}
    last = max(i for i, r in enumerate(snapshot.records) if r.id in folded)
    records = tuple(
        r for i, r in enumerate(snapshot.records) if r.id in folded or (r.protected and i < last)
    )
    return Snapshot(scope=snapshot.scope, revision=snapshot.revision, records=records)


def _summary_prompt(
    session: ContextSession, snapshot: Snapshot, units: list[Unit]
) -> PreparedPrompt:
    return session.counter.prepare(
        ModelInput(
            context=_summary_view(snapshot, units),
            phase=Phase.COMPLETION,
            system_text=SUMMARY_SYSTEM,
            guidance=SUMMARY_GUIDANCE,
        )
    )


class CompactionPolicy:
    """Summarize the oldest history past a threshold, then answer append-only."""

    def __init__(self, settings: CompactionSettings | None = None, name: str = NAME) -> None:
        self.settings = settings or CompactionSettings()
        self.name = name
        self.history: list[Compaction] = []

    # -- choosing what to fold ------------------------------------------------------------
    def needs_compaction(self, session: ContextSession, budget: RunBudget) -> bool:
        tokens = completion_tokens(session.counter)(session.context)
        return tokens > self.settings.trigger * prompt_room(budget)

    def plan(self, session: ContextSession, budget: RunBudget) -> list[Unit]:
        """The oldest units one round folds: older than the tail, whole units, at most 32
        records, at least one plain record to hold the summary, and a summary prompt that
        fits the window (empty: nothing to fold)."""
        snapshot = session.context
        tail = int(self.settings.keep_tail * budget.context_window)
        split = split_history(snapshot, completion_tokens(session.counter), tail)
        units: list[Unit] = []
        for unit in split.archive:
            if sum(len(u) for u in units) + len(unit) > MAX_FOLDED:
                break
            units.append(unit)
        if len(units) == 1 and len(units[0]) == 1 and is_summary(units[0][0]):
            return []  # only the previous summary is old: folding it again gains nothing
        limit = budget.context_window - self.settings.summary_tokens
        while units and _summary_prompt(session, snapshot, units).token_count > limit:
            units.pop()
        if not any(_plain(r) for u in units for r in u):
            return []
        return units

    # -- one round ------------------------------------------------------------------------
    def compact_once(
        self, session: ContextSession, budget: RunBudget, cancel: CancelToken | None = None
    ) -> Compaction | None:
        """Fold the oldest history into one summary record, or None when nothing is left to
        fold. Raises :class:`ModelError` when the model writes no summary."""
        started = time.perf_counter()
        units = self.plan(session, budget)
        if not units:
            return None
        snapshot = session.context
        prompt = _summary_prompt(session, snapshot, units)
        response = session.backend.generate(prompt, self.settings.summary_tokens, cancel)
        check(cancel)
        text = response.text.strip()
        if response.tool_calls or not text:
            raise ModelError("the compaction summary call returned no summary text")
        folded = [r for u in units for r in u]
        host = next(r for r in folded if _plain(r))
        operations: list[Operation] = [
            Replace(record_id=host.id, body=f"{SUMMARY_MARK}\n{text}"),
            *(Delete(record_id=r.id) for r in folded if r.id != host.id),
        ]
        edit = Edit(
            scope=snapshot.scope, base_revision=snapshot.revision, operations=tuple(operations)
        )
        session.apply(edit, cancel)
        done = Compaction(
            prompt=prompt,
            response=response,
            folded_ids=tuple(r.id for r in folded),
            summary_id=host.id,
            edit=edit,
            seconds=time.perf_counter() - started,
        )
        self.history.append(done)
        return done

    def compact(
        self, session: ContextSession, budget: RunBudget, cancel: CancelToken | None = None
    ) -> list[Compaction]:
        """Rounds until the prompt is under the threshold, nothing is left to fold, or
        ``max_rounds`` ran. Every round's call stays within ``budget.total_tokens``."""
        rounds: list[Compaction] = []
        used = 0
        while len(rounds) < self.settings.max_rounds and self.needs_compaction(session, budget):
            units = self.plan(session, budget)
            if not units:
                break
            need = _summary_prompt(session, session.context, units).token_count
            if used + need + self.settings.summary_tokens > budget.total_tokens:
                raise BudgetExceeded("total input/output allowance cannot reserve the summary")
            done = self.compact_once(session, budget, cancel)
            if done is None:
                break
            used += done.prompt.token_count + done.response.generated_tokens
            rounds.append(done)
        return rounds

    # -- the turn -------------------------------------------------------------------------
    def turn(
        self, session: ContextSession, budget: RunBudget, cancel: CancelToken | None = None
    ) -> RunReport:
        started = time.perf_counter()
        try:
            rounds = self.compact(session, budget, cancel)
        except Cancelled:
            raise
        except PicoContextError as exc:
            report = session.run(RunMode.APPEND_ONLY, budget, cancel=cancel)
            return report.model_copy(
                update={"policy": self.name, "failure": f"compaction failed: {exc.message}"}
            )
        spent = sum(c.prompt.token_count + c.response.generated_tokens for c in rounds)
        rest = budget.model_copy(update={"total_tokens": max(1, budget.total_tokens - spent)})
        report = session.run(RunMode.APPEND_ONLY, rest, cancel=cancel)
        return merge_rounds(report, rounds, self.name, time.perf_counter() - started)

    def close(self) -> None:
        return None


def merge_rounds(
    report: RunReport,
    rounds: list[Compaction],
    policy: str,
    elapsed: float,
) -> RunReport:
    """The turn's report with the summary calls charged and listed first, each round as an
    edit attempt (its payload and the summary text). ``report.original`` against
    ``report.revised`` shows what the summaries replaced."""
    attempts = tuple(
        EditAttempt(
            arguments=edit_payload(c.edit.base_revision, c.edit.operations),
            model_text=c.response.text,
            outcome=Outcome.EDITED,
            detail=f"compacted {len(c.folded_ids)} records into {c.summary_id}",
        )
        for c in rounds
    )
    prefill = sum(
        c.prompt.token_count if c.response.prefill_tokens is None else c.response.prefill_tokens
        for c in rounds
    )
    return report.model_copy(
        update={
            "policy": policy,
            "calls": (*(c.prompt for c in rounds), *report.calls),
            "attempts": (*attempts, *report.attempts),
            "total_input_tokens": report.total_input_tokens
            + sum(c.prompt.token_count for c in rounds),
            "total_generated_tokens": report.total_generated_tokens
            + sum(c.response.generated_tokens for c in rounds),
            "total_prefill_tokens": report.total_prefill_tokens + prefill,
            "elapsed_seconds": elapsed,
        }
    )


def _create(config: CompactionSettings, context: PolicyContext) -> CompactionPolicy:
    return CompactionPolicy(config, name=context.name)


SPEC = PolicySpec(
    name=NAME,
    config=CompactionSettings,
    factory=_create,
    mode=RunMode.APPEND_ONLY,
    description=(
        "Past 75% of the window the model summarizes the oldest history into one record; "
        "the newest quarter of the window stays verbatim."
    ),
)
