"""Per-question metrics, their aggregates and the report of ``picocontext-eval --conversation``.

Per question: ``evidence_recall`` is the share of evidence turns whose text occurs verbatim in
the exact prompt the answer was generated from (the rendered final prompt, tool results read
in that step included); exact match and token F1 compare the answer with the reference after
lower-casing and removing punctuation and articles.

Aggregates per policy and per category (the question's kind): mean recall and F1 with
percentile bootstrap intervals (seeded, so a report is reproducible), exact-match rate with
the Wilson interval, token totals, wall time and the facts lost (per question, the evidence
turns its prompt lacked). The questions of one conversation are not independent draws, so
the intervals describe this batch.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from picocontext import (
    RunBudget,
)
from picocontext_diagnostics.evaluation import Provenance, Rate

REPORT_KIND = "picocontext-conversation-evaluation"
BOOTSTRAP_RESAMPLES = 2_000
BOOTSTRAP_SEED = 20_250_917

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-cased, punctuation and articles removed, whitespace collapsed."""
    lowered = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", lowered).split())


def exact_match(prediction: str, reference: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(reference)


def token_f1(prediction: str, reference: str) -> float:
    """Harmonic mean of token precision and recall of the normalized texts."""
    predicted = normalize_answer(prediction).split()
    expected = normalize_answer(reference).split()
    if not predicted or not expected:
        return float(predicted == expected)
    pool = list(expected)
    common = 0
    for token in predicted:
        if token in pool:
            pool.remove(token)
            common += 1
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def bootstrap_interval(values: Sequence[float]) -> tuple[float, float]:
    """95% percentile bootstrap of the mean (seeded); ``(0, 1)`` with no values."""
    if not values:
        return 0.0, 1.0
    rng = random.Random(BOOTSTRAP_SEED)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(BOOTSTRAP_RESAMPLES))
    return means[int(0.025 * BOOTSTRAP_RESAMPLES)], means[int(0.975 * BOOTSTRAP_RESAMPLES) - 1]


class Mean(BaseModel):
    model_config = _FROZEN
    mean: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Mean:
        low, high = bootstrap_interval(values)
        mean = sum(values) / len(values) if values else 0.0
        return cls(mean=mean, low=low, high=high, n=len(values))


class EvidenceMiss(BaseModel):
    model_config = _FROZEN
    turn_id: str
    reason: str


class QuestionResult(BaseModel):
    """One question under one policy: what the model read, what it said, how it scored."""

    model_config = _FROZEN
    policy: str
    question_id: str
    category: str | None
    question: str
    reference: str
    answer: str
    failure: str | None
    # What the model wrote even when the turn failed (for example past the output limit);
    # a failed turn is scored with an empty answer.
    model_text: str = ""
    evidence: tuple[str, ...]
    evidence_present: tuple[str, ...]
    evidence_recall: float
    misses: tuple[EvidenceMiss, ...]
    exact_match: bool
    answer_f1: float
    prompt_tokens: int
    input_tokens: int
    prefill_tokens: int
    generated_tokens: int
    tool_calls: int
    elapsed_seconds: float
    prompt: str


class UpdateStep(BaseModel):
    """One session arriving: records appended and any maintenance the policy ran."""

    model_config = _FROZEN
    session_id: str
    records: int
    working_records: int
    maintenance_calls: int
    input_tokens: int
    prefill_tokens: int
    generated_tokens: int
    elapsed_seconds: float
    failure: str | None = None


class Scores(BaseModel):
    """Aggregates over a set of question results."""

    model_config = _FROZEN
    questions: int
    failures: int
    evidence_recall: Mean
    answer_f1: Mean
    exact_match: Rate
    input_tokens: int
    prefill_tokens: int
    generated_tokens: int
    elapsed_seconds: float

    @classmethod
    def of(cls, results: Sequence[QuestionResult]) -> Scores:
        hits = sum(r.exact_match for r in results)
        return cls(
            questions=len(results),
            failures=sum(r.failure is not None for r in results),
            evidence_recall=Mean.of([r.evidence_recall for r in results]),
            answer_f1=Mean.of([r.answer_f1 for r in results]),
            exact_match=Rate.of(hits, len(results)),
            input_tokens=sum(r.input_tokens for r in results),
            prefill_tokens=sum(r.prefill_tokens for r in results),
            generated_tokens=sum(r.generated_tokens for r in results),
            elapsed_seconds=sum(r.elapsed_seconds for r in results),
        )


class PolicyScores(BaseModel):
    model_config = _FROZEN
    policy: str
    description: str
    overall: Scores
    by_category: dict[str, Scores]
    update_input_tokens: int
    update_generated_tokens: int
    update_prefill_tokens: int
    # The facts-lost view: question id -> the evidence turn ids its prompt lacked (only
    # questions that lacked some).
    facts_lost: dict[str, tuple[str, ...]] = Field(default_factory=dict)


class ConversationReport(BaseModel):
    """The JSON report: configuration, provenance, every question result and the scores."""

    model_config = _FROZEN
    kind: str = REPORT_KIND
    schema_version: int = 1
    created_at: str
    conversation_id: str
    source: str
    budget: RunBudget
    policies: tuple[str, ...]
    questions_asked: int
    provenance: Provenance | None = None
    updates: dict[str, tuple[UpdateStep, ...]]
    results: tuple[QuestionResult, ...]
    summary: tuple[PolicyScores, ...]
    elapsed_seconds: float
    notes: tuple[str, ...] = Field(default_factory=tuple)
    # The plain budget-filling BM25 packer at the same budget (REFERENCE), scored alike.
    reference: PolicyScores | None = None
    reference_results: tuple[QuestionResult, ...] = ()
    # --window in model tokens, and the bytes per token a byte counter was given (None when
    # the counter counts model tokens, so the budget is already in tokens).
    window_tokens: int | None = None
    bytes_per_token: int | None = None

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> ConversationReport:
        return cls.model_validate_json(text)
