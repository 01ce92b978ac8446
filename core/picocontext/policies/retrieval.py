"""Retrieval: the question pulls the best-matching older turns into the window.

The memory layer of agent frameworks, without a model call: the working history is cut as the
sliding window cuts it (protected records, the latest user request, a verbatim tail of
``tail_share`` of the window), and every older unit (a record, or a tool group as one unit)
is indexed with BM25. The latest user request is the query; the ``top_k`` best-scoring units
with a positive score are added, best first, while the completion prompt still fits the room
the window leaves for it. The model reads them in their original order, so a newer statement
of a fact still comes after an older one. The working context is not changed.

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
from collections.abc import Sequence
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
    """``tail_share``: newest history always shown, as a share of the window; ``top_k``:
    at most this many older units are retrieved; ``k1``/``b``: BM25 parameters;
    ``embeddings``: add the dense ranking of the session's own model."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    tail_share: float = Field(default=0.25, ge=0.0, lt=1.0)
    top_k: int = Field(default=8, ge=1, le=64)
    k1: float = Field(default=1.5, gt=0.0, le=10.0)
    b: float = Field(default=0.75, ge=0.0, le=1.0)
    # Also rank by the session model's mean-pooled hidden states (needs a backend that has
    # them, as the MLX models do); fused with BM25 by reciprocal rank.
    embeddings: bool = False


@dataclass(frozen=True)
class Retrieval:
    """One turn's choice: the view, the retrieved and the older-but-not-retrieved ids."""

    view: Snapshot
    query: str
    retrieved_ids: tuple[str, ...]
    skipped_ids: tuple[str, ...]
    tail_ids: tuple[str, ...]
    scores: dict[str, float] = field(default_factory=dict)


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
        measure = completion_tokens(counter)
        split = split_history(
            snapshot, measure, int(self.settings.tail_share * budget.context_window)
        )
        archive = list(split.archive)
        query = latest_request(snapshot)
        room = prompt_room(budget)
        shown = {r.id for r in split.view.records}
        chosen: list[int] = []
        scores: dict[str, float] = {}
        for index, score in self.rank(archive, query)[: self.settings.top_k]:
            trial = shown | {r.id for r in archive[index]}
            if measure(_view(snapshot, trial)) <= room:
                shown = trial
                chosen.append(index)
                scores[archive[index][0].id] = score
        retrieved = tuple(r.id for i in sorted(chosen) for r in archive[i])
        skipped = tuple(r.id for u in archive for r in u if r.id not in shown)
        return Retrieval(
            view=_view(snapshot, shown),
            query=query,
            retrieved_ids=retrieved,
            skipped_ids=skipped,
            tail_ids=split.tail_ids,
            scores=scores,
        )

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
