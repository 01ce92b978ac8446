"""Conversation episodes, per-question metrics and the report of ``picocontext-eval
--conversation``.

An episode starts from a protected system record and a protected task record that says who
is talking. Sessions then arrive in order, each as one update step of incoming records (turns
become records whose body is ``[date] speaker: text``; role speakers keep their role); a
policy with a maintenance step (compaction's ``compact``) runs it after every update, and its
calls are charged to that step. After the last session every question is asked on an
isolated copy of the final state: a fresh session over the same working context with the
question appended as a protected user record, so no question sees another's answer. Every
policy gets the same counter, backend, budget and records.

Per question: ``evidence_recall`` is the share of evidence turns whose text occurs verbatim in
the exact prompt the answer was generated from (the rendered final prompt, tool results read
in that step included); exact match and token F1 compare the answer with the reference after
lower-casing and removing punctuation and articles. A miss says where the evidence went:
folded into a summary or edited away (no longer in the working context), dropped by the
window, not retrieved, not opened (navigated), not recalled (distilled). The ``oracle``
policy shows only the evidence turns and the question, which bounds what any policy can reach
with this model.

Aggregates per policy and per category (the question's kind): mean recall and F1 with
percentile bootstrap intervals (seeded, so a report is reproducible), exact-match rate with
the Wilson interval, token totals, wall time and the facts lost (per question, the evidence
turns its prompt lacked). The questions of one conversation are not independent draws, so
the intervals describe this batch.

Every report also scores the reference line, :class:`Bm25Packer` (plain BM25 over every turn,
packed until the window is full), on the same budget, so a reader sees whether a policy beats
the obvious baseline. Budgets are in the counter's units; :func:`conversation_budget` scales a
token budget for a byte counter.
"""

from __future__ import annotations

import random
import re
import string
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from picocontext import (
    Cancelled,
    CancelToken,
    ContextSession,
    ModelBackend,
    ModelInput,
    Phase,
    PicoContextError,
    Record,
    Role,
    RunBudget,
    RunReport,
    Scope,
    Snapshot,
    TokenCounter,
    WorkingContext,
)
from picocontext.policies import Compaction, ContextPolicy
from picocontext_diagnostics.conversations.format import ROLE_SPEAKERS, Conversation, Question
from picocontext_diagnostics.conversations.format import Session as ChatSession
from picocontext_diagnostics.evaluation import Provenance, Rate
from picocontext_diagnostics.policies import Policy, create_policy_object

REPORT_KIND = "picocontext-conversation-evaluation"
MAX_APPEND = 64
MAX_APPEND_BYTES = 100_000
MAX_BODY_CHARS = 60_000
BOOTSTRAP_RESAMPLES = 2_000
BOOTSTRAP_SEED = 20_250_917
SYSTEM_ID = "conversation-system"
TASK_ID = "conversation-task"
SYSTEM_TEXT = "You answer questions about a conversation from what you are shown. Be brief."

# Not a registered policy: it knows the evidence ids, which is fixture knowledge. Its kind is
# append-only (the mode its reports carry); the runner replaces it by OraclePolicy.
ORACLE = Policy(
    name="oracle",
    kind="append-only",
    description="Only the evidence turns and the question (an upper bound, not a strategy).",
)

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)

# Not a registered policy either: the obvious baseline every report carries as its reference
# line, so a reader sees at once whether a policy beats it. The runner uses Bm25Packer.
REFERENCE = Policy(
    name="bm25-packer",
    kind="append-only",
    description=(
        "plain BM25 over every turn (bm25s, English stop words, no stemming), "
        "packed by score until the window is full, shown in history order."
    ),
)

# Where a policy's missing evidence went, when it is still in the working context.
MISS_REASONS = {
    "sliding-window": "dropped by the window",
    "retrieval": "not retrieved",
    "compaction": "dropped by the window",
    "navigated": "not opened",
    "distilled": "not recalled",
    "oracle": "not shown",
    "bm25-packer": "not packed",
}


# -- episodes --------------------------------------------------------------------------------


def conversation_scope(conversation: Conversation) -> Scope:
    return Scope(user_id="conversation", conversation_id=conversation.id, branch_id="main")


def speaker_role(conversation: Conversation, speaker: str) -> Role:
    """Role speakers keep their role; otherwise the first speaker is the user, the rest
    assistants (what a chat template can show)."""
    if speaker in ROLE_SPEAKERS:
        return Role(speaker)
    return Role.USER if speaker == conversation.speakers[0] else Role.ASSISTANT


def turn_body(session: ChatSession, speaker: str, text: str) -> str:
    date = f"[{session.date}] " if session.date else ""
    who = "" if speaker in ROLE_SPEAKERS else f"{speaker}: "
    return f"{date}{who}{text}"[:MAX_BODY_CHARS]


def session_records(conversation: Conversation, session: ChatSession) -> tuple[Record, ...]:
    return tuple(
        Record(
            id=turn.id,
            role=speaker_role(conversation, turn.speaker),
            body=turn_body(session, turn.speaker, turn.text),
        )
        for turn in session.turns
    )


def initial_snapshot(conversation: Conversation) -> Snapshot:
    names = ", ".join(conversation.speakers)
    task = (
        f"This is a conversation between {names} in {len(conversation.sessions)} sessions. "
        "Later you will be asked questions about it; answer each with a short phrase."
    )
    return Snapshot(
        scope=conversation_scope(conversation),
        records=(
            Record(id=SYSTEM_ID, role=Role.SYSTEM, body=SYSTEM_TEXT),
            Record(id=TASK_ID, role=Role.USER, body=task, protected=True),
        ),
    )


def question_record(question: Question) -> Record:
    return Record(
        id=f"question:{question.id}", role=Role.USER, body=question.question, protected=True
    )


def _wire_bytes(records: Sequence[Record]) -> int:
    """An upper bound of the append payload: every record as its JSON."""
    return sum(len(r.model_dump_json().encode()) + 64 for r in records)


def append_chunked(session: ContextSession, records: Sequence[Record]) -> None:
    """Append in transactions within the core limits (64 records, payload bytes)."""
    chunk: list[Record] = []
    for record in records:
        trial = [*chunk, record]
        if chunk and (len(trial) > MAX_APPEND or _wire_bytes(trial) > MAX_APPEND_BYTES):
            session.append_records(chunk)
            trial = [record]
        chunk = trial
    if chunk:
        session.append_records(chunk)


# -- metrics ---------------------------------------------------------------------------------


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


# -- running ---------------------------------------------------------------------------------


class OraclePolicy:
    """Shows only protected records, the evidence turns and the question."""

    def __init__(self, evidence: Sequence[str], name: str = ORACLE.name) -> None:
        self.evidence = frozenset(evidence)
        self.name = name

    def turn(
        self, session: ContextSession, budget: RunBudget, cancel: CancelToken | None = None
    ) -> RunReport:
        def build(state: WorkingContext) -> Snapshot:
            snapshot = state.snapshot
            records = tuple(r for r in snapshot.records if r.protected or r.id in self.evidence)
            return snapshot.model_copy(update={"records": records})

        return session.run_view(build, budget, self.name, cancel)

    def close(self) -> None:
        return None


class Bm25Packer:
    """The reference line: every unprotected record ranked by plain BM25 against the
    question, packed best first while the completion prompt fits the room the window leaves,
    shown in history order. Deliberately simple and independent of the retrieval policy's
    code, so that a bug there cannot flatter it; record costs are priced once per record."""

    def __init__(self, name: str = REFERENCE.name) -> None:
        self.name = name
        self._costs: dict[str, int] = {}
        self._index: tuple[tuple[str, ...], Any] | None = None

    def turn(
        self, session: ContextSession, budget: RunBudget, cancel: CancelToken | None = None
    ) -> RunReport:
        def build(state: WorkingContext) -> Snapshot:
            return self.pack(state.snapshot, session.counter, budget)

        return session.run_view(build, budget, self.name, cancel)

    def scores(self, pool: Sequence[Record], query: str) -> list[float]:
        import bm25s

        ids = tuple(r.id for r in pool)
        if self._index is None or self._index[0] != ids:
            retriever = bm25s.BM25()
            words = bm25s.tokenize(
                [r.body for r in pool], stopwords="en", show_progress=False, return_ids=False
            )
            retriever.index([list(w) for w in words], show_progress=False)
            self._index = (ids, retriever)
        retriever = self._index[1]
        asked = bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)
        terms = [t for t in asked[0] if t in retriever.vocab_dict]
        return [float(x) for x in retriever.get_scores(terms)] if terms else [0.0] * len(pool)

    def pack(self, snapshot: Snapshot, counter: TokenCounter, budget: RunBudget) -> Snapshot:
        def view(ids: set[str]) -> Snapshot:
            records = tuple(r for r in snapshot.records if r.protected or r.id in ids)
            return snapshot.model_copy(update={"records": records})

        def measure(ids: set[str]) -> int:
            prompt = ModelInput(context=view(ids), phase=Phase.COMPLETION)
            return counter.prepare(prompt).token_count

        pool = [r for r in snapshot.records if not r.protected]
        query = next((r.body for r in reversed(snapshot.records) if r.role is Role.USER), "")
        scores = self.scores(pool, query) if pool else []
        room = budget.context_window - budget.completion_output_tokens
        used = base = measure(set())
        chosen: list[str] = []
        for i in sorted(range(len(pool)), key=lambda i: (-scores[i], -i)):
            if scores[i] <= 0:
                break
            record = pool[i]
            if record.id not in self._costs:
                self._costs[record.id] = max(0, measure({record.id}) - base)
            if used + self._costs[record.id] <= room:
                chosen.append(record.id)
                used += self._costs[record.id]
        while chosen and measure(set(chosen)) > room:
            chosen.pop()
        return view(set(chosen))

    def close(self) -> None:
        self._costs.clear()
        self._index = None


def _miss_reason(policy: Policy, report: RunReport, turn_id: str) -> str:
    if report.final_prompt is None or report.final_prompt not in report.calls:
        return f"no prompt was sent ({report.failure or 'failed'})"
    if report.revised.record(turn_id) is None:
        return "summarized away" if policy.kind == "compaction" else "edited away"
    if policy in (ORACLE, REFERENCE):
        return MISS_REASONS[policy.name]
    return MISS_REASONS.get(policy.kind, MISS_REASONS.get(policy.mode.value, "not in the prompt"))


def score_question(
    conversation: Conversation, question: Question, policy: Policy, report: RunReport
) -> QuestionResult:
    sent = report.final_prompt is not None and report.final_prompt in report.calls
    prompt = report.final_prompt.rendered if sent and report.final_prompt else ""
    present = tuple(e for e in question.evidence if conversation.turn(e).text in prompt)
    misses = tuple(
        EvidenceMiss(turn_id=e, reason=_miss_reason(policy, report, e))
        for e in question.evidence
        if e not in present
    )
    answer = report.answer if report.failure is None else ""
    return QuestionResult(
        policy=policy.name,
        question_id=question.id,
        category=question.category,
        question=question.question,
        reference=question.answer,
        answer=answer,
        failure=report.failure,
        model_text=report.answer,
        evidence=question.evidence,
        evidence_present=present,
        evidence_recall=len(present) / len(question.evidence),
        misses=misses,
        exact_match=exact_match(answer, question.answer),
        answer_f1=token_f1(answer, question.answer),
        prompt_tokens=report.final_prompt.token_count if sent and report.final_prompt else 0,
        input_tokens=report.total_input_tokens,
        prefill_tokens=report.total_prefill_tokens,
        generated_tokens=report.total_generated_tokens,
        tool_calls=len(report.tool_steps),
        elapsed_seconds=report.elapsed_seconds,
        prompt=prompt,
    )


ResultCallback = Callable[[QuestionResult], None]
PolicyFactory = Callable[[Policy, ModelBackend], ContextPolicy]


@runtime_checkable
class MaintainedPolicy(Protocol):
    """A policy with a maintenance step that runs when records arrive (compaction)."""

    def compact(
        self, session: ContextSession, budget: RunBudget, cancel: CancelToken | None = None
    ) -> list[Compaction]: ...


class ConversationRunner:
    """Runs every policy over one conversation on one counter/backend pair."""

    def __init__(
        self,
        counter: TokenCounter,
        backend: ModelBackend,
        create: PolicyFactory = create_policy_object,
    ) -> None:
        """``create`` makes each policy's object (default: from the registry); a study can
        hand one in that builds, say, retrieval with an embedder from another model."""
        self.counter = counter
        self.backend = backend
        self.create = create

    def _update(
        self,
        conversation: Conversation,
        session: ContextSession,
        chat: ChatSession,
        policy: ContextPolicy,
        budget: RunBudget,
        cancel: CancelToken | None,
    ) -> UpdateStep:
        started = time.perf_counter()
        records = session_records(conversation, chat)
        append_chunked(session, records)
        rounds: list[Compaction] = []
        failure: str | None = None
        if isinstance(policy, MaintainedPolicy):
            try:
                rounds = policy.compact(session, budget, cancel)
            except Cancelled:
                raise
            except PicoContextError as exc:
                failure = exc.message
        return UpdateStep(
            session_id=chat.id,
            records=len(records),
            working_records=len(session.context.records),
            maintenance_calls=len(rounds),
            input_tokens=sum(c.prompt.token_count for c in rounds),
            prefill_tokens=sum(
                c.prompt.token_count
                if c.response.prefill_tokens is None
                else c.response.prefill_tokens
                for c in rounds
            ),
            generated_tokens=sum(c.response.generated_tokens for c in rounds),
            elapsed_seconds=time.perf_counter() - started,
            failure=failure,
        )

    def run_policy(
        self,
        conversation: Conversation,
        policy: Policy,
        budget: RunBudget,
        questions: Sequence[Question],
        on_result: ResultCallback | None = None,
        cancel: CancelToken | None = None,
    ) -> tuple[tuple[UpdateStep, ...], list[QuestionResult]]:
        session = ContextSession(initial_snapshot(conversation), self.counter, self.backend)
        obj: ContextPolicy = (
            Bm25Packer() if policy == REFERENCE else self.create(policy, self.backend)
        )
        try:
            updates = tuple(
                self._update(conversation, session, chat, obj, budget, cancel)
                for chat in conversation.sessions
            )
            final = session.state
            results = []
            for question in questions:
                report = self._ask(final, policy, obj, question, budget, cancel)
                result = score_question(conversation, question, policy, report)
                results.append(result)
                if on_result is not None:
                    on_result(result)
            return updates, results
        finally:
            obj.close()

    def _ask(
        self,
        final: WorkingContext,
        policy: Policy,
        obj: ContextPolicy,
        question: Question,
        budget: RunBudget,
        cancel: CancelToken | None,
    ) -> RunReport:
        copy = ContextSession(final, self.counter, self.backend)
        copy.append_records([question_record(question)])
        turn = OraclePolicy(question.evidence) if policy == ORACLE else obj
        report = turn.turn(copy, budget, cancel)
        return (
            report
            if report.policy == policy.name
            else report.model_copy(update={"policy": policy.name})
        )

    def run(
        self,
        conversation: Conversation,
        policies: Sequence[Policy],
        budget: RunBudget,
        questions: int | None = None,
        source: str = "",
        provenance: Provenance | None = None,
        on_result: ResultCallback | None = None,
        cancel: CancelToken | None = None,
        reference: bool = True,
        bytes_per_token: int | None = None,
    ) -> ConversationReport:
        """Every policy over ``conversation`` (then the reference packer unless
        ``reference`` is off); ``bytes_per_token`` says the budget was scaled from tokens to
        a byte counter's units by that factor."""
        started = time.perf_counter()
        asked = conversation.questions[:questions] if questions else conversation.questions
        updates: dict[str, tuple[UpdateStep, ...]] = {}
        results: list[QuestionResult] = []
        summary: list[PolicyScores] = []
        for policy in policies:
            steps, got = self.run_policy(conversation, policy, budget, asked, on_result, cancel)
            updates[policy.name] = steps
            results.extend(got)
            summary.append(policy_scores(policy, steps, got))
        ref_scores: PolicyScores | None = None
        ref_results: tuple[QuestionResult, ...] = ()
        if reference:
            steps, ref_list = self.run_policy(conversation, REFERENCE, budget, asked, None, cancel)
            ref_scores, ref_results = policy_scores(REFERENCE, steps, ref_list), tuple(ref_list)
        scale = bytes_per_token or 1
        return ConversationReport(
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            conversation_id=conversation.id,
            source=source,
            budget=budget,
            policies=tuple(p.name for p in policies),
            questions_asked=len(asked),
            provenance=provenance,
            updates=updates,
            results=tuple(results),
            summary=tuple(summary),
            elapsed_seconds=time.perf_counter() - started,
            reference=ref_scores,
            reference_results=ref_results,
            window_tokens=budget.context_window // scale,
            bytes_per_token=bytes_per_token,
            notes=_scale_notes(budget, bytes_per_token),
        )


def _scale_notes(budget: RunBudget, bytes_per_token: int | None) -> tuple[str, ...]:
    if bytes_per_token is None:
        return ()
    tokens = budget.context_window // bytes_per_token
    return (
        f"the deterministic backend counts UTF-8 bytes: a {tokens:,}-token window is "
        f"{budget.context_window:,} bytes at {bytes_per_token} bytes per token "
        "(--bytes-per-token), and every other token limit is scaled alike",
    )


def policy_scores(
    policy: Policy, updates: Sequence[UpdateStep], results: Sequence[QuestionResult]
) -> PolicyScores:
    categories = sorted({r.category or "uncategorized" for r in results})
    return PolicyScores(
        policy=policy.name,
        description=policy.description,
        overall=Scores.of(results),
        by_category={
            c: Scores.of([r for r in results if (r.category or "uncategorized") == c])
            for c in categories
        },
        update_input_tokens=sum(u.input_tokens for u in updates),
        update_generated_tokens=sum(u.generated_tokens for u in updates),
        update_prefill_tokens=sum(u.prefill_tokens for u in updates),
        facts_lost={r.question_id: tuple(m.turn_id for m in r.misses) for r in results if r.misses},
    )


def conversation_budget(window: int, bytes_per_token: int = 1) -> RunBudget:
    """The budget of one question: ``window`` tokens, an eighth of it (at most 512) for each
    output, two decision attempts, and 50 windows of total allowance; every limit multiplied
    by ``bytes_per_token`` for a counter of UTF-8 bytes (the deterministic backend), so that
    ``window`` means model tokens on every backend."""
    output = max(16, min(512, window // 8)) * bytes_per_token
    return RunBudget(
        context_window=window * bytes_per_token,
        total_tokens=min(10_000_000, 50 * window * bytes_per_token),
        edit_output_tokens=output,
        completion_output_tokens=output,
        max_edit_attempts=2,
    )
