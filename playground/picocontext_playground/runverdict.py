"""The verdict of one comparison run, and the table that shows it, free of Qt.

:func:`picocontext_diagnostics.verdict.decide` ranks policy totals; this module turns a
:class:`ComparisonResult` into those totals (two checks per planned step: the retained context
and the answer) and defines the verdict table's columns once — header, text and sort key —
so the window, the text report and the HTML page show the same numbers in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from picocontext.models import BYTE_UNIT
from picocontext_diagnostics.verdict import PolicyTotals, Verdict, VerdictRow, decide
from picocontext_playground.results import ComparisonResult, PolicyOutcome, StepView

CHECKS_PER_STEP = 2  # the retained context and the answer


def short_unit(token_unit: str) -> str:
    """``bytes`` for the scripted byte counter, else ``tokens`` (for sentences)."""
    return "bytes" if token_unit == BYTE_UNIT else "tokens"


def _step_reason(step: StepView) -> str | None:
    if step.context_passed and step.answer_passed:
        return None
    if step.failure:
        return step.failure
    if not step.context_passed:
        return f"context check failed ({step.context_problem or 'facts not retained'})"
    return f"answer check failed ({step.answer_problem or 'wrong answer'})"


def first_reason(outcome: PolicyOutcome) -> str | None:
    """Why a policy did not pass, in plain words with the step it happened at; ``None``
    when it passed every check."""
    for step in outcome.steps:
        reason = _step_reason(step)
        if reason is not None:
            return f"at {step.step_id}, {reason[:1].lower()}{reason[1:]}"
    if outcome.failure:
        return outcome.failure
    missing = outcome.planned_steps - len(outcome.steps)
    return f"{missing} step(s) did not run" if missing > 0 else None


def tool_calls(outcome: PolicyOutcome) -> int:
    """Every tool call the model made: navigation/digest verbs plus edit/keep decisions."""
    return len(outcome.tool_steps) + outcome.edit_calls + outcome.keep_calls


def policy_totals(outcome: PolicyOutcome) -> PolicyTotals:
    return PolicyTotals(
        name=outcome.policy.name,
        label=outcome.label,
        checks_passed=outcome.context_passed + outcome.answers_passed,
        checks_total=CHECKS_PER_STEP * outcome.planned_steps,
        input_tokens=outcome.total_input,
        generated_tokens=outcome.total_generated,
        prefill_tokens=outcome.total_prefill,
        wall_seconds=outcome.elapsed_seconds,
        tool_calls=tool_calls(outcome),
        failure=first_reason(outcome),
    )


def result_verdict(result: ComparisonResult) -> Verdict:
    """Rank the policies that finished in ``result``."""
    totals = [policy_totals(o) for o in result.outcomes]
    return decide(totals, token_unit=short_unit(result.token_unit))


def edit_balance(outcome: PolicyOutcome, unit: str) -> str | None:
    """Whether editing paid for itself: the window tokens the accepted edits saved against
    the prefill they cost beyond keeps (the cache restarts at the first changed record)."""
    runs = [s.run for s in outcome.steps if s.run is not None]
    edits = sum(r.edit_call_count for r in runs)
    saved = sum(r.edit_window_saved_tokens for r in runs)
    cost = sum(r.edit_prefill_cost_tokens for r in runs)
    if not saved and not cost:
        return None
    plural = "s" if edits != 1 else ""
    return (
        f"{outcome.label}'s {edits} accepted edit{plural} saved {saved:,} window {unit} "
        f"and cost {cost:,} extra prefill {unit}."
    )


def headline(result: ComparisonResult, verdict: Verdict) -> str:
    """The verdict sentence (with each policy's edit balance), qualified when the run was
    stopped before the end."""
    unit = short_unit(result.token_unit)
    balances = [b for o in result.outcomes if (b := edit_balance(o, unit)) is not None]
    sentence = " ".join([verdict.sentence, *balances])
    if not result.cancelled:
        return sentence
    if not result.outcomes:
        return "Stopped before any policy finished, so there is no verdict."
    return f"Stopped before the end; among the policies that finished: {sentence}"


@dataclass(frozen=True)
class Cell:
    text: str
    key: float | str


@dataclass(frozen=True)
class Column:
    """One verdict-table column: header, tooltip and how a row fills it."""

    header: str
    tip: str
    cell: Callable[[VerdictRow], Cell]
    numeric: bool = True


def _count(value: int) -> Cell:
    return Cell(f"{value:,}", value)


def _change_cell(row: VerdictRow, baseline: str | None) -> Cell:
    if baseline is None:
        return Cell("", 0.0)
    if row.totals.name == baseline:
        return Cell("baseline", 0.0)
    if row.input_change is None:
        return Cell("n/a", float("inf"))
    return Cell(f"{row.input_change_text} input · {row.work_change_text} work", row.input_change)


def _result_cell(row: VerdictRow) -> Cell:
    if row.passed:
        return Cell("passed", 0)
    return Cell(row.totals.failure or "failed", 1)


def columns(verdict: Verdict) -> tuple[Column, ...]:
    """The table's columns; the change column names the baseline it compares against."""
    unit = verdict.token_unit
    base = verdict.baseline
    base_label = next((r.totals.label for r in verdict.rows if r.totals.name == base), base)
    return (
        Column("#", "rank: passing policies first, then least model work", lambda r: _rank(r)),
        Column(
            "Policy", "the context policy", lambda r: Cell(r.totals.label, r.totals.label), False
        ),
        Column("Checks", "checks passed: context and answer per step", _checks),
        Column(
            "Input",
            f"prompt {unit} sent over the whole run",
            lambda r: _count(r.totals.input_tokens),
        ),
        Column(
            "Generated", f"{unit} the model generated", lambda r: _count(r.totals.generated_tokens)
        ),
        Column(
            "Prefill",
            f"prompt {unit} actually computed (a reused prefix cache computes fewer)",
            lambda r: _count(r.totals.prefill_tokens),
        ),
        Column(
            "Model work",
            f"prefill plus generated {unit}: what the winner is chosen by",
            lambda r: _count(r.totals.model_work),
        ),
        Column(
            "Wall time",
            "seconds from the first step to the last",
            lambda r: Cell(seconds_text(r.totals.wall_seconds), r.totals.wall_seconds),
        ),
        Column(
            "Tool calls",
            "navigation, digest and edit/keep calls the model made",
            lambda r: _count(r.totals.tool_calls),
        ),
        Column(
            f"vs {base_label}" if base_label else "vs baseline",
            "change in input and in model work against the baseline",
            lambda r: _change_cell(r, base),
        ),
        Column("Result", "passed, or the first reason it failed", _result_cell, False),
    )


def seconds_text(value: float) -> str:
    """Two decimals from one second up, three below (scripted runs take milliseconds)."""
    return f"{value:.2f} s" if value >= 1 else f"{value:.3f} s"


def _rank(row: VerdictRow) -> Cell:
    return Cell(str(row.rank), row.rank)


def _checks(row: VerdictRow) -> Cell:
    t = row.totals
    share = t.checks_passed / t.checks_total if t.checks_total else 0.0
    return Cell(f"{t.checks_passed}/{t.checks_total}", share)


def table(verdict: Verdict) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """Headers and rows of cell texts, ranked (for the plain-text report)."""
    cols = columns(verdict)
    return tuple(c.header for c in cols), [
        tuple(c.cell(row).text for c in cols) for row in verdict.rows
    ]


__all__ = [
    "Cell",
    "Column",
    "columns",
    "first_reason",
    "headline",
    "policy_totals",
    "result_verdict",
    "short_unit",
    "table",
    "tool_calls",
]
