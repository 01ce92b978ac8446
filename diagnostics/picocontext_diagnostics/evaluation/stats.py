"""The summary of an evaluation: per-policy pass rates with Wilson 95% intervals and a paired
comparison (difference interval, exact McNemar p) of every two policies on the same episodes."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from picocontext_diagnostics.evaluation.proportions import (
    mcnemar_exact_p,
    paired_difference_interval,
)
from picocontext_diagnostics.evaluation.report import (
    EvaluationResult,
    EvaluationSummary,
    PairedComparison,
    PolicySummary,
    Rate,
)


def summarize(results: Sequence[EvaluationResult], policies: Sequence[str]) -> EvaluationSummary:
    """Per-policy rates and paired comparisons, in configuration order."""
    per_policy: list[PolicySummary] = []
    for name in policies:
        mine = [r for r in results if r.policy.name == name]
        planned = sum(r.planned_steps for r in mine)
        count = len(mine) or 1
        per_policy.append(
            PolicySummary(
                policy=name,
                episodes=Rate.of(sum(r.passed for r in mine), len(mine)),
                retained_steps=Rate.of(sum(r.retained_correct_steps for r in mine), planned),
                answer_steps=Rate.of(sum(r.answer_correct_steps for r in mine), planned),
                mean_input_tokens=sum(r.input_tokens for r in mine) / count,
                mean_generated_tokens=sum(r.generated_tokens for r in mine) / count,
                mean_elapsed_seconds=sum(r.elapsed_seconds for r in mine) / count,
                total_input_tokens=sum(r.input_tokens for r in mine),
                total_prefill_tokens=sum(r.prefill_tokens for r in mine),
                mean_prefill_tokens=sum(r.prefill_tokens for r in mine) / count,
                total_elapsed_seconds=sum(r.elapsed_seconds for r in mine),
                tool_calls=sum(len(st.tool_steps) for r in mine for st in r.steps),
            )
        )
    comparisons: list[PairedComparison] = []
    for a, b in combinations(policies, 2):
        outcome_a = {(r.seed, r.repetition): r.passed for r in results if r.policy.name == a}
        outcome_b = {(r.seed, r.repetition): r.passed for r in results if r.policy.name == b}
        keys = sorted(set(outcome_a) & set(outcome_b))
        both = sum(outcome_a[k] and outcome_b[k] for k in keys)
        only_a = sum(outcome_a[k] and not outcome_b[k] for k in keys)
        only_b = sum(outcome_b[k] and not outcome_a[k] for k in keys)
        neither = len(keys) - both - only_a - only_b
        low, high = paired_difference_interval(both, only_a, only_b, neither)
        comparisons.append(
            PairedComparison(
                policy_a=a,
                policy_b=b,
                pairs=len(keys),
                both_passed=both,
                only_a_passed=only_a,
                only_b_passed=only_b,
                neither_passed=neither,
                difference=(only_a - only_b) / len(keys) if keys else None,
                difference_ci95_low=low,
                difference_ci95_high=high,
                mcnemar_exact_p=mcnemar_exact_p(only_a, only_b),
            )
        )
    return EvaluationSummary(
        all_passed=bool(results) and all(r.passed for r in results),
        policies=tuple(per_policy),
        comparisons=tuple(comparisons),
    )
