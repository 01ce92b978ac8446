"""Deterministic fakes mirroring the reference's test doubles (spec §5), for tests, benchmarks
and demos. They are real implementations of the seams, just not language models."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from picocontext.distill.config import DistillConfig
from picocontext.distill.data import GuardInput, GuardResult, SummaryInput, Unit
from picocontext.distill.distiller import Distiller
from picocontext.distill.embedder import Embedder
from picocontext.distill.errors import SummarizerError
from picocontext.distill.guard import Guard
from picocontext.distill.ids import ROOT_ID
from picocontext.distill.summarizer import Summarizer


def truncate_words(text: str, budget: int) -> str:
    words = text.split()
    return " ".join(words[:budget]) if budget > 0 and len(words) > budget else text


class FakeSummarizer:
    """``l0(raw)`` for leaves, ``rollup(a|b|...)`` for internal nodes, truncated to ``budget``
    whitespace words. Counts calls; ``delay`` simulates a slow model; ``fail_on`` raises."""

    def __init__(self, delay: float = 0.0, fail_on: str | None = None, tag: str = "") -> None:
        self.calls = 0
        self.inputs: list[SummaryInput] = []
        self._delay = delay
        self._fail_on = fail_on
        self._tag = tag
        self._lock = threading.Lock()

    @property
    def summarizer_id(self) -> str:
        return f"fake-summarizer{self._tag}"

    @property
    def prompt_digest(self) -> str:
        return "fake-v1"

    def summarize(self, request: SummaryInput) -> str:
        with self._lock:
            self.calls += 1
            self.inputs.append(request)
        if self._delay:
            time.sleep(self._delay)
        if request.level == 0:
            text = f"l0({request.raw})"
        else:
            text = "rollup(" + "|".join(c.summary for c in request.children) + ")"
        if self._fail_on is not None and self._fail_on in text:
            raise SummarizerError(f"fake summarizer refuses {self._fail_on!r}")
        return truncate_words(text, request.budget)


class FakeGuard:
    """Blocks text containing ``SECRET``; replaces runs of 3+ digits with ``[REDACTED]``."""

    def __init__(self, raise_error: bool = False) -> None:
        self.calls: list[GuardInput] = []
        self._raise = raise_error

    @property
    def version(self) -> str:
        return "fake-guard-v1"

    def guard(self, request: GuardInput) -> GuardResult:
        self.calls.append(request)
        if self._raise:
            raise RuntimeError("guard service unavailable")
        if "SECRET" in request.text:
            return GuardResult(blocked=True, reason="contains SECRET")
        return GuardResult(text=re.sub(r"\d{3,}", "[REDACTED]", request.text))


class ConstantEmbedder:
    """Always ``[1, 0, 0]``: every SemHash is identical, so all leaves share one cluster."""

    def __init__(self) -> None:
        self.calls = 0
        self.batches: list[int] = []

    @property
    def embedder_id(self) -> str:
        return "constant-3"

    @property
    def dims(self) -> int:
        return 3

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls += 1
        self.batches.append(len(texts))
        return np.tile(np.array([1.0, 0.0, 0.0], dtype=np.float32), (len(texts), 1))


class VariedEmbedder:
    """An FNV-1a seed per text fed through an LCG: distinct texts get distinct vectors."""

    def __init__(self, dims: int = 8) -> None:
        self._dims = dims
        self.calls = 0
        self.batches: list[int] = []

    @property
    def embedder_id(self) -> str:
        return f"varied-fnv-{self._dims}"

    @property
    def dims(self) -> int:
        return self._dims

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls += 1
        self.batches.append(len(texts))
        out = np.zeros((len(texts), self._dims), dtype=np.float32)
        for row, text in enumerate(texts):
            h = 0xCBF29CE484222325
            for byte in text.encode("utf-8"):
                h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
            for col in range(self._dims):
                h = (h * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
                out[row, col] = ((h >> 11) / float(1 << 53)) * 2.0 - 1.0
        return out


def note(unit_id: str, body: str, site: str = "", title: str = "", kind: str = "note") -> Unit:
    """The reference's fixture shape: a note whose text is title + body, in a ``site`` scope."""
    text = f"{title} {body}".strip() if title else body
    return Unit(source_kind=kind, unit_id=unit_id, text=text, scopes=(("site", site),))


def seven_node_units() -> list[Unit]:
    """n1, n2 in site s1 and n3 in s2: with :class:`ConstantEmbedder` that is 3 leaves,
    2 scopes, 1 cluster of 3 and the root — the reference's 7-node tree."""
    return [
        note("n1", "vibration high", "s1", title="Pump"),
        note("n2", "pressure nominal", "s1", title="Valve"),
        note("n3", "bearing worn", "s2", title="Motor"),
    ]


def build(
    root: str | Path,
    summarizer: Summarizer | None = None,
    embedder: Embedder | None = None,
    guard: Guard | None = None,
    **config: Any,
) -> Distiller:
    """A corpus with the deterministic fakes in the reference's setup: recipe "v1", SemHash
    splits and eager views (every level-1 node under the root, every summary written in the
    sweep), so the reference's fixtures keep their shapes. Pass ``views="deferred"`` and
    ``split_key="id"`` for the library defaults."""
    config.setdefault("recipe_version", "v1")
    config.setdefault("split_key", "semhash")
    config.setdefault("views", "eager")
    return Distiller.open(
        root,
        summarizer or FakeSummarizer(),
        embedder or ConstantEmbedder(),
        guard=guard,
        config=DistillConfig(**config),
    )


MakeDistiller = Callable[..., Distiller]


def ancestors(d: Distiller, node_id: str) -> set[str]:
    """Every node above ``node_id`` through child links (all parent chains, views included):
    what the locality invariants compare an edit's summarizer calls against."""
    parents: dict[str, set[str]] = {}
    for n in d.store.nodes():
        for c in n.child_ids:
            parents.setdefault(c, set()).add(n.id)
    out: set[str] = set()
    stack = [node_id]
    while stack:
        for p in parents.get(stack.pop(), ()):
            if p not in out:
                out.add(p)
                stack.append(p)
    return out


def depth_to(d: Distiller, target: str) -> int:
    """Longest root-to-``target`` path, in edges, through child_ids (-1: not under the root):
    the "depth" of the ≤ depth + 1 edit bound."""
    nodes = {n.id: n for n in d.store.nodes()}
    memo: dict[str, int] = {}

    def longest(node_id: str) -> int:
        if node_id == target:
            return 0
        if node_id not in memo:
            subs = [longest(c) for c in nodes[node_id].child_ids if c in nodes]
            memo[node_id] = max((s + 1 for s in subs if s >= 0), default=-1)
        return memo[node_id]

    return longest(ROOT_ID) if ROOT_ID in nodes else -1
