"""The conversation runner: every policy over the same conversation, then every question.

Sessions arrive in order as update steps (:mod:`.feed`); a policy with a maintenance step
(compaction's ``compact``) runs it after every update, and its calls are charged to that step.
After the last session every question is asked on an isolated copy of the final state: a
fresh session over the same working context with the question appended as a protected user
record, so no question sees another's answer. Every policy gets the same counter, backend,
budget and records; each answer is scored by :mod:`.scores`.

A miss says where the evidence went: folded into a summary or edited away (no longer in the
working context), dropped by the window, not retrieved, not opened (navigated), not recalled
(distilled). The ``oracle`` policy shows only the evidence turns and the question, which
bounds what any policy can reach with this model.

Every report also scores the reference line, :class:`Bm25Packer` (plain BM25 over every turn,
packed until the window is full), on the same budget, so a reader sees whether a policy beats
the obvious baseline. Budgets are in the counter's units; :func:`conversation_budget` scales a
token budget for a byte counter.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

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
    Snapshot,
    TokenCounter,
    WorkingContext,
)
from picocontext.policies import Compaction, ContextPolicy
from picocontext_diagnostics.conversations.feed import (
    append_chunked,
    initial_snapshot,
    question_record,
    session_records,
)
from picocontext_diagnostics.conversations.format import Conversation, Question
from picocontext_diagnostics.conversations.format import Session as ChatSession
from picocontext_diagnostics.conversations.scores import (
    ConversationReport,
    EvidenceMiss,
    PolicyScores,
    QuestionResult,
    Scores,
    UpdateStep,
    exact_match,
    token_f1,
)
from picocontext_diagnostics.evaluation import Provenance
from picocontext_diagnostics.policies import Policy, create_policy_object

# Not a registered policy: it knows the evidence ids, which is fixture knowledge. Its kind is
# append-only (the mode its reports carry); the runner replaces it by OraclePolicy.
ORACLE = Policy(
    name="oracle",
    kind="append-only",
    description="Only the evidence turns and the question (an upper bound, not a strategy).",
)

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
