"""Deterministic clustering of sibling nodes into balanced groups.

Used by the ``files`` adapter for flat folders (structure the source does not have) and by
per-budget shaping for branches whose reveal does not fit (B4). The method is recursive
balanced bisection over TF-IDF vectors: split the largest group in two along the axis between
its two most distant members, cutting at the widest score gap near the middle, until every
group fits ``max_size``; then group the groups the same way until at most ``max_width``
remain. It needs no model, is stable under input order ties, and costs O(n log n) vector ops.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from picocontext.build.ir import IdRegistry, SourceNode, slug
from picocontext.build.signals import Signals, Vector, dot, normalize


def _centroid(vectors: Sequence[Vector]) -> Vector:
    acc: dict[str, float] = {}
    for v in vectors:
        for t, w in v.items():
            acc[t] = acc.get(t, 0.0) + w
    return normalize(acc, 96)


def _bisect(idx: list[int], vecs: Sequence[Vector]) -> tuple[list[int], list[int]]:
    m = len(idx)
    c = _centroid([vecs[i] for i in idx])
    p1 = min(idx, key=lambda i: (dot(vecs[i], c), i))
    p2 = min(idx, key=lambda i: (dot(vecs[i], vecs[p1]), i))
    a, b = vecs[p1], vecs[p2]
    left: list[int] = []
    right: list[int] = []
    for _ in range(2):
        score = {i: dot(vecs[i], b) - dot(vecs[i], a) for i in idx}
        scored = sorted(idx, key=lambda i: (score[i], i))
        values = [score[i] for i in scored]
        lo, hi = max(1, m // 4), min(m - 1, max(1, (3 * m) // 4))
        cut = max(range(lo, hi + 1), key=lambda k: (values[k] - values[k - 1], -abs(k - m // 2)))
        left, right = scored[:cut], scored[cut:]
        a, b = _centroid([vecs[i] for i in left]), _centroid([vecs[i] for i in right])
    return sorted(left), sorted(right)


def partition(vecs: Sequence[Vector], max_size: int) -> list[list[int]]:
    """Index groups of at most ``max_size`` (>= 1), each sorted, ordered by first index."""
    if max_size < 1:
        raise ValueError("max_size must be >= 1")
    groups = [list(range(len(vecs)))]
    while True:
        big = max(groups, key=len)
        if len(big) <= max_size:
            break
        groups.remove(big)
        groups.extend(_bisect(big, vecs))
    return sorted((g for g in groups if g), key=lambda g: g[0])


def label_terms(
    vec: Vector, others: Sequence[Vector], surf: dict[str, str], n: int = 3
) -> list[str]:
    """Surface words that characterize ``vec`` against ``others``."""
    mean: dict[str, float] = {}
    for o in others:
        for t, w in o.items():
            mean[t] = mean.get(t, 0.0) + w / max(len(others), 1)
    ranked = sorted(vec.items(), key=lambda kv: (-(kv[1] - mean.get(kv[0], 0.0)), kv[0]))
    out: list[str] = []
    for t, _ in ranked:
        word = surf.get(t, t)
        if word not in out:
            out.append(word)
        if len(out) == n:
            break
    return out


def group_children(
    parent: SourceNode,
    max_width: int,
    signals: Signals,
    ids: IdRegistry,
    make_hint: Callable[[list[SourceNode]], str] | None = None,
) -> int:
    """Regroup ``parent.children`` so there are at most ``max_width`` of them, nesting
    synthetic cluster branches as deep as needed. Returns the number of branches created."""
    if max_width < 2:
        raise ValueError("max_width must be >= 2")
    items: list[SourceNode] = list(parent.children)
    created = 0
    base = "" if parent.id == "r" else parent.id.rstrip("/") + "/"
    while len(items) > max_width:
        vecs = [signals.vector(n) for n in items]
        # Aim for about sqrt(n) groups (never more than fit): a few wide groups would leave
        # the level above with little to tell them apart.
        n = len(items)
        k = min(max_width, max(math.ceil(n / max_width), round(math.sqrt(n))))
        groups = partition(vecs, min(max_width, math.ceil(n / k)))
        if len(groups) == len(items):  # cannot happen with max_width >= 2, but never loop
            break
        cents = [_centroid([vecs[i] for i in g]) for g in groups]
        new_items: list[SourceNode] = []
        for gi, g in enumerate(groups):
            members = [items[i] for i in g]
            if len(members) == 1:
                new_items.append(members[0])
                continue
            surf: dict[str, str] = {}
            for m in members:
                for t, w in signals.info(m)[1].items():
                    surf.setdefault(t, w)
            others = [c for j, c in enumerate(cents) if j != gi]
            words = label_terms(cents[gi], others, surf)
            title = " / ".join(words) if words else f"group {gi + 1}"
            node = SourceNode(
                id=ids.claim(f"{base}@{slug('-'.join(words[:2]) or 'group')}/"),
                title=title,
                hint=make_hint(members) if make_hint else "",
                facets={"kind": "cluster"},
                children=members,
                synthetic=True,
            )
            created += 1
            new_items.append(node)
        items = new_items
    parent.children = items
    return created
