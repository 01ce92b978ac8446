"""Retrieval: the question pulls the best-matching older turns into the window.

The memory layer of agent frameworks, without a model call: the working history is cut as the
sliding window cuts it (protected records, the latest user request, a verbatim tail of
``tail_share`` of the window), and every older unit (a record, or a tool group as one unit)
is indexed with BM25. The latest user request is the query. Units are then **packed by score
until the prompt room is full** -- a fixed number of hits would leave most of a window empty --
and a hit's neighbours (the units up to ``neighbour_span`` before and after it) compete for
the same room at ``neighbour_weight`` (per step) of the hit's score, because an answer often
sits in the reply to the turn that matched. ``top_k`` optionally caps the number of hits. The
working context is not changed.

General rankers help BM25 where a question and its answer share few words. None knows a
file format or a benchmark; each reads only what a record's body says, and each is off at 0:

* **pseudo-relevance feedback** (``expand``): the terms that weigh most in the best hits are
  a second query, added at ``expand_weight``;
* **the adjacent turns** (``context_weight``): a unit's score gains that share of the better
  of its two neighbours' scores in the same session, because a reply rarely repeats the
  words of the turn it answers ("What got you into running?" -- "I've been running farther
  to de-stress");
* **the named speaker** (``speaker_weight``): when the request names some (not all) of the
  speakers that units name (``Maya: ...``), their units gain that share of the best score:
  a question about Maya is answered mostly by what Maya said, not by turns that merely
  address her;
* **the session** (``session_weight``): a unit's score (over the best) plus that share of its
  session's score (over the best session), a session being the run of units whose bodies
  start with the same bracketed tag -- a conversation turn's date (``[2026-03-02] Maya:
  ...``). A turn of the session the question is about outranks an equal turn elsewhere, and
  its unmatched turns come along as candidates;
* **the named date** (``date_weight``): when the request names a month (``in June``, ``on
  3 May 2023``, ``2023-05-08``), units whose tag is a date in it gain that share of the best
  score (a named day: less the further the tag is from it).

The model reads what was packed in history order, so a newer statement of a fact still comes
after an older one. By default (``shown_as="block"``) the packed turns are one protected
runtime record where the archive ends (before the tail): each turn on its own line after its
speaker, a session's date written once above the run of its turns, and ``...`` where turns
that were apart in the history meet -- one record instead of one per turn, and one date per
session instead of one per turn, so more turns fit in the same window. ``"records"`` shows
each turn as its own record, its date in its body.

Packing prices each unit once, fills greedily, then checks the exact prompt and drops the
lowest-scored units while it does not fit, so a turn costs one exact rendering instead of one
per candidate.

BM25 is `bm25s <https://github.com/xhluo/bm25s>`_ (numpy only, maintained), with English
stop words and a small suffix-stripping stemmer of ours so ``moved`` matches ``move``; each
history's index is built once and reused by every request over it (:func:`lexical_index`). An
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
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from picocontext.backend import TokenCounter
from picocontext.budget import RunBudget
from picocontext.cancel import CancelToken
from picocontext.distill.embedder import Embedder, HiddenStateModel, ModelEmbedder
from picocontext.errors import InvalidContext
from picocontext.manifest.tokens import TextCounter
from picocontext.policies.history import Unit, split_history, text_meter_for
from picocontext.policies.lexical import (
    FEEDBACK_DOCS,
    bm25_scores,
)
from picocontext.policies.navigated import speaker_line, with_index
from picocontext.policies.registry import PolicyContext, PolicySpec
from picocontext.policies.retrieval_signals import (
    date_match,
    date_mentions,
    named_speakers,
    session_scores,
    speaker_of,
    unit_tags,
    unit_text,
    with_context,
)
from picocontext.policies.sliding_window import completion_tokens, latest_request, prompt_room
from picocontext.records import Record, Role, Snapshot
from picocontext.report import RunMode, RunReport
from picocontext.session import ContextSession, FreshIds, reserved_ids
from picocontext.working import WorkingContext

NAME = "retrieval"
RRF_K = 60
DEFAULT_NEIGHBOUR_WEIGHT = 0.5
DEFAULT_SESSION_WEIGHT = 0.2
DEFAULT_CONTEXT_WEIGHT = 0.2
DEFAULT_SPEAKER_WEIGHT = 0.5
DEFAULT_DATE_WEIGHT = 0.2
DEFAULT_EXPAND = 10
DEFAULT_EXPAND_WEIGHT = 0.3
MAX_TOP_K = 100_000
Presentation = Literal["block", "records"]
BLOCK_ID = "runtime-retrieved"
BLOCK_HEADER = "EARLIER IN THIS CONVERSATION - retrieved for the latest request, oldest first:"
GAP = "..."


def block_text(records: Sequence[Record], positions: dict[str, int]) -> str:
    """Retrieved records as one text, in history order: a tag (a session's date) written once
    for the run of records that share it, and :data:`GAP` where records that were next to
    each other in the history are not. One record instead of one per turn, and one date per
    session instead of one per turn, leave room for more turns in the same window."""
    lines = [BLOCK_HEADER]
    tag: str | None = None
    last: int | None = None
    for record in records:
        own, line = speaker_line(record)
        at = positions[record.id]
        if last is not None and at != last + 1:
            lines.append(GAP)
        if own and own != tag:
            lines.append(f"[{own}]")
        tag, last = own, at
        lines.append(line)
    return "\n".join(lines)


class RetrievalSettings(BaseModel):
    """``tail_share``: newest history always shown, as a share of the window; ``top_k``: an
    optional cap on the number of hits (``None``: pack until the window is full);
    ``neighbour_weight``: a hit's neighbouring units rank at this share of its score (0 turns
    neighbours off); ``k1``/``b``: BM25 parameters; ``embeddings``: add the dense ranking of
    the session's own model; ``shown_as``: how the packed turns are shown (see
    :func:`block_text`); ``neighbour_span``: how far neighbours reach; ``session_weight``,
    ``expand``, ``expand_weight``, ``feedback_docs``, ``context_weight``,
    ``speaker_weight``, ``date_weight``: the general rankers (module docs; the feedback's
    terms come from the ``feedback_docs`` best hits)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    tail_share: float = Field(default=0.25, ge=0.0, lt=1.0)
    top_k: int | None = Field(default=None, ge=1, le=MAX_TOP_K)
    neighbour_weight: float = Field(default=DEFAULT_NEIGHBOUR_WEIGHT, ge=0.0, le=1.0)
    neighbour_span: int = Field(default=1, ge=1, le=8)
    # Chosen on two LoCoMo conversations (26, 44) and checked on the other eight
    # (docs/conversations.md, docs/results/locomo-retrieval.md); 0 turns a ranker off.
    session_weight: float = Field(default=DEFAULT_SESSION_WEIGHT, ge=0.0, le=10.0)
    expand: int = Field(default=DEFAULT_EXPAND, ge=0, le=64)
    expand_weight: float = Field(default=DEFAULT_EXPAND_WEIGHT, ge=0.0, le=1.0)
    feedback_docs: int = Field(default=FEEDBACK_DOCS, ge=1, le=100)
    context_weight: float = Field(default=DEFAULT_CONTEXT_WEIGHT, ge=0.0, le=1.0)
    speaker_weight: float = Field(default=DEFAULT_SPEAKER_WEIGHT, ge=0.0, le=10.0)
    date_weight: float = Field(default=DEFAULT_DATE_WEIGHT, ge=0.0, le=10.0)
    k1: float = Field(default=1.5, gt=0.0, le=10.0)
    b: float = Field(default=0.75, ge=0.0, le=1.0)
    # Also rank by the session model's mean-pooled hidden states (needs a backend that has
    # them, as the MLX models do); fused with BM25 by reciprocal rank.
    embeddings: bool = False
    # "block": the packed older turns as one runtime record where the archive ends, a session
    # date once per run of turns that share it; "records": each turn as its own record.
    shown_as: Presentation = "block"


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
    # The runtime record that holds the packed turns (``shown_as="block"``; None otherwise or
    # when nothing was packed).
    block: Record | None = None


def with_neighbours(
    ranked: Sequence[tuple[int, float]], count: int, weight: float, span: int = 1
) -> list[tuple[int, float, bool]]:
    """``(unit index, score, is_neighbour)`` best first: every hit, and each hit's
    neighbours (index ± d for d up to ``span``, within ``count`` units) at ``weight ** d`` of
    its score unless they rank higher on their own."""
    best: dict[int, tuple[float, bool]] = {i: (score, False) for i, score in ranked}
    if weight > 0:
        for i, score in ranked:
            for d in range(1, span + 1):
                near = score * weight**d
                for j in (i - d, i + d):
                    if 0 <= j < count and best.get(j, (0.0, True))[0] < near:
                        best[j] = (near, True)
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
        self._meter: TextCounter | None = None

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
        lexical = self._lexical(units, texts, query)
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

    def _lexical(self, units: Sequence[Unit], texts: Sequence[str], query: str) -> list[float]:
        """BM25 with feedback, then the general rankers in turn (module docs): the adjacent
        turns' scores, the named speaker, the session, the named date."""
        cfg = self.settings
        scores = bm25_scores(
            texts, query, cfg.k1, cfg.b, cfg.expand, cfg.expand_weight, cfg.feedback_docs
        )
        if not units:
            return scores
        tags = unit_tags(units)
        if cfg.context_weight > 0:
            scores = with_context(scores, tags, cfg.context_weight)
        top = max(scores, default=0.0)
        named = named_speakers(units, query) if cfg.speaker_weight > 0 else set()
        if top > 0 and named:
            scores = [
                s + cfg.speaker_weight * top * (speaker_of(u) in named)
                for s, u in zip(scores, units, strict=True)
            ]
        if cfg.session_weight > 0:
            top = max(scores, default=0.0)
            boost = session_scores(units, query, cfg.k1, cfg.b)
            scores = [
                (s / top if top > 0 else 0.0) + cfg.session_weight * boost[i]
                for i, s in enumerate(scores)
            ]
        mentions = date_mentions(query) if cfg.date_weight > 0 else []
        if mentions:
            top = max(scores, default=0.0)
            scores = [
                s + cfg.date_weight * max(top, 1.0) * date_match(t, mentions)
                for s, t in zip(scores, tags, strict=True)
            ]
        return scores

    def select(
        self,
        snapshot: Snapshot,
        counter: TokenCounter,
        budget: RunBudget,
        reserved: set[str] | None = None,
    ) -> Retrieval:
        """What this policy shows for ``snapshot`` under ``budget``; ``reserved`` are ids the
        block record must not take (deleted history, say) besides the snapshot's own."""
        if counter is not self._costs_counter:
            self._costs.clear()
            self._costs_counter = counter
            self._meter = text_meter_for(counter)
        measure = completion_tokens(counter)
        split = split_history(
            snapshot, measure, int(self.settings.tail_share * budget.context_window)
        )
        archive = list(split.archive)
        query = latest_request(snapshot)
        ranked = self.rank(archive, query)[: self.settings.top_k]
        candidates = with_neighbours(
            ranked, len(archive), self.settings.neighbour_weight, self.settings.neighbour_span
        )
        room = prompt_room(budget)
        block: Record | None = None
        if self.settings.shown_as == "block":
            ids = FreshIds(reserved_ids(snapshot.records) | (reserved or set()))(BLOCK_ID)
            chosen, view, block = self._pack_block(
                snapshot, split.view, archive, candidates, measure, room, ids
            )
        else:
            chosen = self._pack(snapshot, split.view, archive, candidates, measure, room)
            view = _view(snapshot, {r.id for r in split.view.records} | _ids(archive, chosen))
        packed = _ids(archive, chosen)
        retrieved = tuple(r.id for i in sorted(i for i, _, _ in chosen) for r in archive[i])
        return Retrieval(
            view=view,
            query=query,
            retrieved_ids=retrieved,
            skipped_ids=tuple(r.id for u in archive for r in u if r.id not in packed),
            tail_ids=split.tail_ids,
            scores={archive[i][0].id: score for i, score, _ in chosen},
            neighbour_ids=tuple(r.id for i, _, near in chosen if near for r in archive[i]),
            block=block,
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

        def price(unit: Unit) -> int:
            cost = self._costs.get(unit)
            if cost is None:
                cost = max(
                    0, measure(_view(snapshot, base_ids | {r.id for r in unit})) - base_tokens
                )
                self._costs[unit] = cost
            return cost

        def exact(items: Sequence[tuple[int, float, bool]]) -> int:
            return measure(_view(snapshot, base_ids | _ids(archive, items)))

        return self._fill(archive, candidates, base_tokens, room, price, exact)

    def _pack_block(
        self,
        snapshot: Snapshot,
        base: Snapshot,
        archive: Sequence[Unit],
        candidates: Sequence[tuple[int, float, bool]],
        measure: Callable[[Snapshot], int],
        room: int,
        block_id: str,
    ) -> tuple[list[tuple[int, float, bool]], Snapshot, Record | None]:
        """Like :meth:`_pack`, the chosen units shown as one block record: a unit costs its
        lines, one gap mark and, for the first unit of its tag, the tag's line."""
        positions = {r.id: i for i, r in enumerate(snapshot.records)}
        archived = [r.id for u in archive for r in u]
        meter = self._meter
        assert meter is not None
        tags: set[str] = set()

        def block(items: Sequence[tuple[int, float, bool]]) -> tuple[Snapshot, Record]:
            records = [r for i in sorted(i for i, _, _ in items) for r in archive[i]]
            body = block_text(records, positions)
            record = Record(id=block_id, role=Role.USER, protected=True, body=body)
            return with_index(base, record, archived, positions), record

        empty = measure(block(())[0])
        gap = meter.count(GAP) + 1

        def price(unit: Unit) -> int:
            cost = self._costs.get(unit)
            if cost is None:
                cost = sum(meter.count(speaker_line(r)[1]) + 1 for r in unit)
                self._costs[unit] = cost
            fresh = {speaker_line(r)[0] for r in unit} - tags - {""}
            return cost + gap + sum(meter.count(f"[{t}]") + 1 for t in fresh)

        def chosen_one(unit: Unit) -> None:
            tags.update(speaker_line(r)[0] for r in unit)

        def exact(items: Sequence[tuple[int, float, bool]]) -> int:
            return measure(block(items)[0])

        chosen = self._fill(archive, candidates, empty, room, price, exact, chosen_one)
        if not chosen:
            return [], base, None
        view, record = block(chosen)
        return chosen, view, record

    def _fill(
        self,
        archive: Sequence[Unit],
        candidates: Sequence[tuple[int, float, bool]],
        used: int,
        room: int,
        price: Callable[[Unit], int],
        exact: Callable[[Sequence[tuple[int, float, bool]]], int],
        taken: Callable[[Unit], None] | None = None,
    ) -> list[tuple[int, float, bool]]:
        """Greedy by score while the priced cost fits (``taken`` hears of each unit packed),
        then the lowest-scored dropped while the exact prompt does not fit."""
        chosen: list[tuple[int, float, bool]] = []
        for candidate in candidates:
            unit = archive[candidate[0]]
            cost = price(unit)
            if used + cost <= room:
                chosen.append(candidate)
                used += cost
                if taken is not None:
                    taken(unit)
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
            reserved = reserved_ids(state.original.records)
            self.last = self.select(state.snapshot, session.counter, budget, reserved)
            return self.last.view

        return session.run_view(build, budget, self.name, cancel)

    def close(self) -> None:
        self._vectors.clear()
        self._costs.clear()


def _ids(archive: Sequence[Unit], items: Sequence[tuple[int, float, bool]]) -> set[str]:
    return {r.id for i, _, _ in items for r in archive[i]}


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
