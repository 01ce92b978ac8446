"""Retrieval: the question pulls the best-matching older turns into the window.

The memory layer of agent frameworks, without a model call: the working history is cut as the
sliding window cuts it (protected records, the latest user request, a verbatim tail of
``tail_share`` of the window), and every older unit (a record, or a tool group as one unit)
is indexed with BM25. The latest user request is the query. Units are then **packed by score
until the prompt room is full** -- a fixed number of hits would leave most of a window empty --
and a hit's neighbours (the unit just before and just after it in the history) compete for the
same room at ``neighbour_weight`` of the hit's score, because an answer often sits in the reply
to the turn that matched. ``top_k`` optionally caps the number of hits. The model reads what
was packed in the original (chronological) order, so a newer statement of a fact still comes
after an older one, and every record keeps its own body: a conversation turn carries its
session date there (``[2026-03-02] Maya: ...``), so dates travel with the turns. The working
context is not changed.

Packing prices each unit once (what it adds to the rendered prompt, memoized per unit), fills
greedily, then checks the exact prompt once and drops the lowest-scored units while it does not
fit, so a turn costs one exact rendering instead of one per candidate.

BM25 is `bm25s <https://github.com/xhluo/bm25s>`_ (numpy only, maintained), with English
stop words and a small suffix-stripping stemmer of ours so ``moved`` matches ``move``. An
optional :class:`picocontext.distill.Embedder` (for example
:class:`picocontext.distill.ModelEmbedder` over the loaded model's hidden states) adds a
dense ranking (``RetrievalSettings(embeddings=True)`` builds it from the session's own model);
the two rankings are fused by reciprocal rank, and embeddings are cached per text, so each
older turn is embedded once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from picocontext.backend import TokenCounter
from picocontext.budget import RunBudget
from picocontext.cancel import CancelToken
from picocontext.distill.embedder import Embedder, HiddenStateModel, ModelEmbedder
from picocontext.errors import InvalidContext
from picocontext.policies.history import Unit, split_history
from picocontext.policies.navigated import leaf_text
from picocontext.policies.registry import PolicyContext, PolicySpec
from picocontext.policies.sliding_window import completion_tokens, latest_request, prompt_room
from picocontext.records import Snapshot
from picocontext.report import RunMode, RunReport
from picocontext.session import ContextSession
from picocontext.working import WorkingContext

NAME = "retrieval"
RRF_K = 60
DEFAULT_NEIGHBOUR_WEIGHT = 0.5
MAX_TOP_K = 100_000
_SUFFIXES = ("ies", "ing", "ed", "es", "s")


def stem(word: str) -> str:
    """Strip one common English suffix when at least three letters remain."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def _stem_all(words: list[str]) -> list[str]:
    return [stem(w) for w in words]


def _tokens(texts: Sequence[str]) -> list[list[str]]:
    import bm25s

    tokenized = bm25s.tokenize(
        list(texts), stopwords="en", stemmer=_stem_all, show_progress=False, return_ids=False
    )
    return [list(t) for t in tokenized]


def bm25_scores(documents: Sequence[str], query: str, k1: float, b: float) -> list[float]:
    """BM25 score of every document for ``query`` (0.0 where no query term occurs)."""
    import bm25s

    if not documents:
        return []
    retriever = bm25s.BM25(k1=k1, b=b)
    retriever.index(_tokens(documents), show_progress=False)
    terms = [t for t in _tokens([query])[0] if t in retriever.vocab_dict]
    if not terms:
        return [0.0] * len(documents)
    return [float(s) for s in retriever.get_scores(terms)]


def unit_text(unit: Unit) -> str:
    """What a unit says: each record's body and its tool calls."""
    return "\n".join(leaf_text(r) for r in unit)


class RetrievalSettings(BaseModel):
    """``tail_share``: newest history always shown, as a share of the window; ``top_k``: an
    optional cap on the number of hits (``None``: pack until the window is full);
    ``neighbour_weight``: a hit's neighbouring units rank at this share of its score (0 turns
    neighbours off); ``k1``/``b``: BM25 parameters; ``embeddings``: add the dense ranking of
    the session's own model."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    tail_share: float = Field(default=0.25, ge=0.0, lt=1.0)
    top_k: int | None = Field(default=None, ge=1, le=MAX_TOP_K)
    neighbour_weight: float = Field(default=DEFAULT_NEIGHBOUR_WEIGHT, ge=0.0, le=1.0)
    k1: float = Field(default=1.5, gt=0.0, le=10.0)
    b: float = Field(default=0.75, ge=0.0, le=1.0)
    # Also rank by the session model's mean-pooled hidden states (needs a backend that has
    # them, as the MLX models do); fused with BM25 by reciprocal rank.
    embeddings: bool = False


@dataclass(frozen=True)
class Retrieval:
    """One turn's choice: the view, the retrieved ids (hits and neighbours, history order),
    the neighbours among them, the older-but-not-shown ids and each packed unit's score
    (keyed by its first record id)."""

    view: Snapshot
    query: str
    retrieved_ids: tuple[str, ...]
    skipped_ids: tuple[str, ...]
    tail_ids: tuple[str, ...]
    scores: dict[str, float] = field(default_factory=dict)
    neighbour_ids: tuple[str, ...] = ()


def with_neighbours(
    ranked: Sequence[tuple[int, float]], count: int, weight: float
) -> list[tuple[int, float, bool]]:
    """``(unit index, score, is_neighbour)`` best first: every hit, and each hit's
    neighbours (index ± 1 within ``count`` units) at ``weight`` of its score unless they rank
    higher on their own."""
    best: dict[int, tuple[float, bool]] = {i: (score, False) for i, score in ranked}
    if weight > 0:
        for i, score in ranked:
            for j in (i - 1, i + 1):
                if 0 <= j < count and best.get(j, (0.0, True))[0] < score * weight:
                    best[j] = (score * weight, True)
    order = sorted(best, key=lambda i: (-best[i][0], best[i][1], -i))
    return [(i, best[i][0], best[i][1]) for i in order]


class RetrievalPolicy:
    """BM25 (optionally fused with embeddings) over older units; the question is the query."""

    def __init__(
        self,
        settings: RetrievalSettings | None = None,
        embedder: Embedder | None = None,
        name: str = NAME,
    ) -> None:
        self.settings = settings or RetrievalSettings()
        self.embedder = embedder
        self.name = name
        self.last: Retrieval | None = None
        self._vectors: dict[str, np.ndarray] = {}
        # What each unit adds to the prompt, priced by one counter (reset when it changes).
        self._costs: dict[Unit, int] = {}
        self._costs_counter: TokenCounter | None = None

    def _dense(self, texts: Sequence[str], query: str) -> list[float]:
        assert self.embedder is not None
        missing = [t for t in dict.fromkeys([*texts, query]) if t not in self._vectors]
        if missing:
            for text, row in zip(missing, self.embedder.embed(missing), strict=True):
                norm = float(np.linalg.norm(row))
                self._vectors[text] = row / norm if norm > 0 else row
        q = self._vectors[query]
        return [float(np.dot(self._vectors[t], q)) for t in texts]

    def rank(self, units: Sequence[Unit], query: str) -> list[tuple[int, float]]:
        """(unit index, score), best first; only units with a positive lexical score, or
        any unit when an embedder ranks them (scores are then fused reciprocal ranks)."""
        texts = [unit_text(u) for u in units]
        lexical = bm25_scores(texts, query, self.settings.k1, self.settings.b)
        ranked = sorted(
            (i for i, s in enumerate(lexical) if s > 0), key=lambda i: (-lexical[i], -i)
        )
        if self.embedder is None or not units:
            return [(i, lexical[i]) for i in ranked]
        dense = self._dense(texts, query)
        by_dense = sorted(range(len(units)), key=lambda i: (-dense[i], -i))
        fused = [0.0] * len(units)
        for rank, i in enumerate(ranked):
            fused[i] += 1.0 / (RRF_K + rank + 1)
        for rank, i in enumerate(by_dense):
            fused[i] += 1.0 / (RRF_K + rank + 1)
        order = sorted(range(len(units)), key=lambda i: (-fused[i], -i))
        return [(i, fused[i]) for i in order if not math.isclose(fused[i], 0.0)]

    def select(self, snapshot: Snapshot, counter: TokenCounter, budget: RunBudget) -> Retrieval:
        """What this policy shows for ``snapshot`` under ``budget``."""
        if counter is not self._costs_counter:
            self._costs.clear()
            self._costs_counter = counter
        measure = completion_tokens(counter)
        split = split_history(
            snapshot, measure, int(self.settings.tail_share * budget.context_window)
        )
        archive = list(split.archive)
        query = latest_request(snapshot)
        ranked = self.rank(archive, query)[: self.settings.top_k]
        candidates = with_neighbours(ranked, len(archive), self.settings.neighbour_weight)
        chosen = self._pack(snapshot, split.view, archive, candidates, measure, prompt_room(budget))
        shown = {r.id for r in split.view.records} | {
            r.id for i, _, _ in chosen for r in archive[i]
        }
        retrieved = tuple(r.id for i in sorted(i for i, _, _ in chosen) for r in archive[i])
        return Retrieval(
            view=_view(snapshot, shown),
            query=query,
            retrieved_ids=retrieved,
            skipped_ids=tuple(r.id for u in archive for r in u if r.id not in shown),
            tail_ids=split.tail_ids,
            scores={archive[i][0].id: score for i, score, _ in chosen},
            neighbour_ids=tuple(r.id for i, _, near in chosen if near for r in archive[i]),
        )

    def _pack(
        self,
        snapshot: Snapshot,
        base: Snapshot,
        archive: Sequence[Unit],
        candidates: Sequence[tuple[int, float, bool]],
        measure: Callable[[Snapshot], int],
        room: int,
    ) -> list[tuple[int, float, bool]]:
        """Candidates, best first, while their priced cost fits ``room``; then, checked on the
        exact prompt, the lowest-scored dropped until it fits."""
        base_ids = {r.id for r in base.records}
        base_tokens = measure(base)
        used = base_tokens
        chosen: list[tuple[int, float, bool]] = []
        for candidate in candidates:
            unit = archive[candidate[0]]
            cost = self._costs.get(unit)
            if cost is None:
                cost = max(
                    0, measure(_view(snapshot, base_ids | {r.id for r in unit})) - base_tokens
                )
                self._costs[unit] = cost
            if used + cost <= room:
                chosen.append(candidate)
                used += cost

        def exact(items: Sequence[tuple[int, float, bool]]) -> int:
            return measure(
                _view(snapshot, base_ids | {r.id for i, _, _ in items for r in archive[i]})
            )

        while chosen and exact(chosen) > room:
            chosen.pop()
        return chosen

    def _embedder_for(self, backend: object) -> None:
        if self.embedder is None and self.settings.embeddings:
            if not isinstance(backend, HiddenStateModel):
                raise InvalidContext(
                    "retrieval embeddings need a model with hidden states (an MLX model); "
                    "turn embeddings off for this backend"
                )
            self.embedder = ModelEmbedder(backend)

    def turn(
        self, session: ContextSession, budget: RunBudget, cancel: CancelToken | None = None
    ) -> RunReport:
        def build(state: WorkingContext) -> Snapshot:
            self._embedder_for(session.backend)
            self.last = self.select(state.snapshot, session.counter, budget)
            return self.last.view

        return session.run_view(build, budget, self.name, cancel)

    def close(self) -> None:
        self._vectors.clear()
        self._costs.clear()


def _view(snapshot: Snapshot, ids: set[str]) -> Snapshot:
    records = tuple(r for r in snapshot.records if r.id in ids)
    return Snapshot(scope=snapshot.scope, revision=snapshot.revision, records=records)


def _create(config: RetrievalSettings, context: PolicyContext) -> RetrievalPolicy:
    return RetrievalPolicy(config, name=context.name)


SPEC = PolicySpec(
    name=NAME,
    config=RetrievalSettings,
    factory=_create,
    mode=RunMode.APPEND_ONLY,
    description="BM25 over older turns; the question pulls the best matches into the window.",
)
