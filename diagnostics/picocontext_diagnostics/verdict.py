"""Who won a side-by-side run, and why: one ranking and one plain sentence.

A comparison shows many numbers per policy; a person wants the conclusion. The rule is fixed
and stated in the sentence so it can be checked: a policy *passes* when every check it was
given passed and it reached its last step; among the passing ones the winner is the one that
made the model do the least work — prefill tokens actually computed plus tokens generated,
the two costs a local model pays — with input tokens and then the name breaking ties. Every
row also carries its difference against the baseline (append-only when it ran), so "−38 %
input" is computed once, here, for the window, the text report and the JSON export alike.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["BASELINE", "PolicyTotals", "Verdict", "VerdictRow", "decide"]

BASELINE = "append-only"
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class PolicyTotals(BaseModel):
    """What one policy did over a whole run (all steps, all episodes)."""

    model_config = _FROZEN
    name: str
    label: str
    checks_passed: int = Field(ge=0)
    checks_total: int = Field(ge=0)
    input_tokens: int = Field(ge=0)
    generated_tokens: int = Field(ge=0)
    prefill_tokens: int = Field(ge=0)
    wall_seconds: float = Field(ge=0)
    tool_calls: int = Field(default=0, ge=0)
    failure: str | None = None

    @property
    def passed(self) -> bool:
        return self.failure is None and self.checks_passed == self.checks_total > 0

    @property
    def model_work(self) -> int:
        """Tokens the model processed: prefill computed plus generated."""
        return self.prefill_tokens + self.generated_tokens


class VerdictRow(BaseModel):
    """One policy's line in the verdict table, with its differences against the baseline."""

    model_config = _FROZEN
    totals: PolicyTotals
    passed: bool
    rank: int
    input_change: float | None = None
    work_change: float | None = None

    @property
    def input_change_text(self) -> str:
        return _percent(self.input_change)

    @property
    def work_change_text(self) -> str:
        return _percent(self.work_change)


class Verdict(BaseModel):
    """The ranked rows, the winner (``None`` when nothing passed) and the sentence."""

    model_config = _FROZEN
    rows: tuple[VerdictRow, ...]
    winner: str | None
    baseline: str | None
    sentence: str
    token_unit: str = "tokens"


def _percent(change: float | None) -> str:
    if change is None:
        return ""
    return f"{change * 100:+.0f} %".replace("-", "−")


def _change(value: int, base: int) -> float | None:
    return None if base <= 0 else (value - base) / base


def _order_key(totals: PolicyTotals) -> tuple[int, float, int, int, str]:
    share = totals.checks_passed / totals.checks_total if totals.checks_total else 0.0
    return (0 if totals.passed else 1, -share, totals.model_work, totals.input_tokens, totals.name)


def decide(
    policies: Sequence[PolicyTotals], *, baseline: str = BASELINE, token_unit: str = "tokens"
) -> Verdict:
    """Rank ``policies`` and say who won; ``baseline`` names the reference column if present."""
    base = next((p for p in policies if p.name == baseline), None)
    ordered = sorted(policies, key=_order_key)
    rows = tuple(
        VerdictRow(
            totals=p,
            passed=p.passed,
            rank=i + 1,
            input_change=None
            if base is None or p is base
            else _change(p.input_tokens, base.input_tokens),
            work_change=None
            if base is None or p is base
            else _change(p.model_work, base.model_work),
        )
        for i, p in enumerate(ordered)
    )
    winner = rows[0] if rows and rows[0].passed else None
    return Verdict(
        rows=rows,
        winner=winner.totals.name if winner else None,
        baseline=base.name if base else None,
        sentence=_sentence(rows, winner, base, token_unit),
        token_unit=token_unit,
    )


def _sentence(
    rows: Sequence[VerdictRow],
    winner: VerdictRow | None,
    base: PolicyTotals | None,
    unit: str,
) -> str:
    if not rows:
        return "No policy ran."
    if winner is None:
        reasons = "; ".join(f"{r.totals.label}: {_first_reason(r.totals)}" for r in rows)
        return f"No policy passed every check. {reasons}."
    t = winner.totals
    passing = [r for r in rows if r.passed]
    # "the least model work" only where another policy also passed: a sole passer may cost
    # more than the policies that failed, and the sentence says so.
    how = (
        "it was the only policy to pass every check"
        if len(passing) == 1 and len(rows) > 1
        else "it passed every check with the least model work"
    )
    text = f"{t.label} won: {how} ({t.checks_total} of {t.checks_total}; {t.model_work:,} {unit} "
    text += "prefilled and generated"
    if base is not None and base is not t and winner.work_change is not None:
        text += f", {winner.work_change_text} against {base.label}"
        if not base.passed:
            text += ", which did not pass"
    text += ")"
    if len(passing) > 1:
        runner_up = passing[1].totals
        text += f"; {runner_up.label} also passed, at {runner_up.model_work:,}"
    failed = [r for r in rows if not r.passed]
    if failed:
        text += ". " + "; ".join(f"{r.totals.label}: {_first_reason(r.totals)}" for r in failed)
    return text + "."


def _first_reason(totals: PolicyTotals) -> str:
    if totals.failure:
        return totals.failure.rstrip(".")
    return f"{totals.checks_passed}/{totals.checks_total} checks passed"
