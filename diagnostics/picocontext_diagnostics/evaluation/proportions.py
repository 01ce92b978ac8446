"""Small, dependency-free statistics for pass rates.

* :func:`wilson_interval` — the Wilson score interval for a binomial proportion; unlike the
  normal approximation it stays inside [0, 1] and behaves at 0/n and n/n, which is what small
  evaluation batches produce.
* :func:`paired_difference_interval` — Newcombe's hybrid score interval (1998) for the
  difference of two paired proportions, built from the two Wilson intervals and the phi
  correlation, with the continuity-corrected phi so fully concordant pairs keep a real width.
* :func:`mcnemar_exact_p` — the exact two-sided McNemar test on the discordant pairs.

Episodes that share a seed are not independent draws of a task distribution; with a
deterministic backend the repetitions are identical. The intervals describe the batch that was
run, and reports say so.
"""

from __future__ import annotations

import math

Z95 = 1.959963984540054


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval; ``(0.0, 1.0)`` when there are no trials."""
    if trials < 0 or not 0 <= successes <= max(trials, 0):
        raise ValueError(f"need 0 <= successes <= trials, got {successes}/{trials}")
    if trials == 0:
        return 0.0, 1.0
    n = float(trials)
    p = successes / n
    z2 = z * z
    denominator = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denominator
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n)) / denominator
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def paired_difference_interval(
    both: int, only_a: int, only_b: int, neither: int, z: float = Z95
) -> tuple[float, float]:
    """Newcombe's hybrid score interval for ``rate(A) - rate(B)`` over paired outcomes."""
    counts = (both, only_a, only_b, neither)
    if any(c < 0 for c in counts):
        raise ValueError("pair counts must be non-negative")
    n = sum(counts)
    if n == 0:
        return -1.0, 1.0
    p1 = (both + only_a) / n
    p2 = (both + only_b) / n
    l1, u1 = wilson_interval(both + only_a, n, z)
    l2, u2 = wilson_interval(both + only_b, n, z)
    product = (both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither)
    concordance = float(both * neither - only_a * only_b)
    if concordance > 0:
        # Continuity-corrected phi: without it a perfectly concordant batch (typical of a
        # deterministic backend) gets a zero-width interval, claiming certainty it lacks.
        concordance = max(concordance - n / 2.0, 0.0)
    phi = 0.0 if product == 0 else concordance / math.sqrt(product)
    delta = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2.0 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    epsilon = math.sqrt(
        max(0.0, (u1 - p1) ** 2 - 2.0 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2)
    )
    diff = p1 - p2
    return max(-1.0, diff - delta), min(1.0, diff + epsilon)


def mcnemar_exact_p(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts (1.0 when there are none)."""
    if only_a < 0 or only_b < 0:
        raise ValueError("discordant counts must be non-negative")
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)
