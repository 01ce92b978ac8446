"""The verdict: the cheapest policy that passed every check wins, and the sentence says why."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from picocontext_diagnostics.verdict import PolicyTotals, decide


def totals(name: str, passed: int = 4, work: int = 1000, **extra: object) -> PolicyTotals:
    fields: dict[str, object] = {
        "name": name,
        "label": name.capitalize(),
        "checks_passed": passed,
        "checks_total": 4,
        "input_tokens": work,
        "generated_tokens": work // 10,
        "prefill_tokens": work,
        "wall_seconds": 1.0,
    }
    fields.update(extra)
    return PolicyTotals.model_validate(fields)


def test_the_cheapest_passing_policy_wins_and_changes_are_against_append_only() -> None:
    verdict = decide([totals("append-only", work=2000), totals("editable", work=1000)])
    assert verdict.winner == "editable"
    assert [r.totals.name for r in verdict.rows] == ["editable", "append-only"]
    editable = verdict.rows[0]
    assert editable.input_change == -0.5
    assert editable.input_change_text == "−50 %"
    assert verdict.rows[1].input_change is None  # the baseline has no change against itself
    assert verdict.sentence.startswith(
        "Editable won: it passed every check with the least model work (4 of 4;"
    )
    assert "−50 % against Append-only" in verdict.sentence
    assert "Append-only also passed, at 2,200" in verdict.sentence


def test_a_cheaper_policy_that_failed_a_check_does_not_win() -> None:
    verdict = decide([totals("append-only", work=2000), totals("navigated", passed=3, work=10)])
    assert verdict.winner == "append-only"
    # The sole passer is not called the cheapest: it did more work than the one that failed.
    assert verdict.sentence.startswith("Append-only won: it was the only policy to pass every")
    assert "least model work" not in verdict.sentence
    assert "Navigated: 3/4 checks passed" in verdict.sentence


def test_a_failure_reason_keeps_a_policy_from_passing() -> None:
    failed = totals("append-only", failure="Token budget exceeded at step-4.")
    verdict = decide([failed])
    assert verdict.winner is None
    assert verdict.sentence == (
        "No policy passed every check. Append-only: Token budget exceeded at step-4."
    )


def test_no_policy_is_said_plainly() -> None:
    assert decide([]).sentence == "No policy ran."
    assert decide([]).winner is None


@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 10_000), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    st.randoms(),
)
def test_the_winner_passed_and_did_the_least_work_whatever_the_order(
    specs: list[tuple[int, int, bool]], rng: random.Random
) -> None:
    policies = [
        totals(f"p{i}", passed, work, failure="stopped" if broke else None)
        for i, (passed, work, broke) in enumerate(specs)
    ]
    verdict = decide(policies)
    shuffled = list(policies)
    rng.shuffle(shuffled)
    assert decide(shuffled) == verdict
    passing = [p for p in policies if p.passed]
    if not passing:
        assert verdict.winner is None
        return
    winner = next(p for p in policies if p.name == verdict.winner)
    assert winner.passed
    assert winner.model_work == min(p.model_work for p in passing)
    assert [r.rank for r in verdict.rows] == list(range(1, len(policies) + 1))


def test_a_winner_dearer_than_a_failed_baseline_says_the_baseline_did_not_pass() -> None:
    failed = totals("append-only", passed=3, work=1000)
    verdict = decide([failed, totals("editable", work=1500)])
    assert verdict.winner == "editable"
    assert "+50 % against Append-only, which did not pass)" in verdict.sentence
    passing = decide([totals("append-only", work=2000), totals("editable", work=1000)])
    assert "which did not pass" not in passing.sentence
