"""The episode runner: one session per episode, the caller owns every append.

For each step, in order: check cancellation; stop with ``episode token allowance exhausted``
if the whole-episode allowance is used up (no generation happens); append the step's records;
run one turn with ``total_tokens = min(turn allowance, what is left of the episode
allowance)``; grade the live context on the run's *revised* snapshot, before the answer is
appended (so a correct answer cannot hide lost context, while earlier answers — already live
history — do count); append the answer explicitly as an unprotected assistant record; publish
exactly one step report to ``on_step``; check cancellation again; stop on any failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from picocontext import (
    BudgetExceeded,
    Cancelled,
    CancelToken,
    ContextSession,
    ModelBackend,
    PicoContextError,
    Record,
    Role,
    RunBudget,
    RunReport,
    Scope,
    Snapshot,
    TokenCounter,
)
from picocontext.policies import ContextPolicy
from picocontext_diagnostics.episodes.episode import MAX_STEPS, Episode, Step
from picocontext_diagnostics.episodes.grading import (
    ContextCheck,
    answer_correct,
    answer_problem,
    context_problem,
    retained_facts,
)
from picocontext_diagnostics.errors import InvalidEpisode
from picocontext_diagnostics.policies import Policy, PolicyRun, TurnRunner, run_turn

DEFAULT_EPISODE_TOKENS = 80_000
MAX_EPISODE_TOKENS = 10_000_000
EPISODE_EXHAUSTED = BudgetExceeded("episode token allowance exhausted").message

_FROZEN = ConfigDict(frozen=True, extra="forbid")


def sequential_budget() -> RunBudget:
    """The budget used for sequential tasks: 4,096 window, 24,000 per turn, 4 decision
    attempts of 1,024 tokens, 512 for the answer."""
    return RunBudget(context_window=4_096, max_edit_attempts=4)


class StepReport(BaseModel):
    """What happened in one step. ``run`` is absent when no turn ran (allowance or append)."""

    model_config = _FROZEN
    step: Step
    run: RunReport | None
    check: ContextCheck
    retained_facts: dict[str, str]
    retained_correct: bool
    answer_correct: bool
    failure: str | None
    context_problem: str | None = None
    answer_problem: str | None = None

    @property
    def input_tokens(self) -> int:
        return self.run.total_input_tokens if self.run else 0

    @property
    def generated_tokens(self) -> int:
        return self.run.total_generated_tokens if self.run else 0

    @property
    def passed(self) -> bool:
        return self.failure is None and self.retained_correct and self.answer_correct


class EpisodeReport(BaseModel):
    """Every step that ran (steps after a failure are absent), and both final views."""

    model_config = _FROZEN
    title: str
    policy: Policy
    planned_steps: int
    steps: tuple[StepReport, ...]
    original: Snapshot
    revised: Snapshot
    failure: str | None
    elapsed_seconds: float

    @property
    def passed(self) -> bool:
        """No failure, every planned step reached, each retained- and answer-correct."""
        return (
            self.failure is None
            and len(self.steps) == self.planned_steps > 0
            and all(s.retained_correct and s.answer_correct for s in self.steps)
        )

    @property
    def total_input_tokens(self) -> int:
        return sum(s.input_tokens for s in self.steps)

    @property
    def total_generated_tokens(self) -> int:
        return sum(s.generated_tokens for s in self.steps)

    @property
    def total_prefill_tokens(self) -> int:
        return sum(s.run.total_prefill_tokens for s in self.steps if s.run)

    @property
    def retained_correct_steps(self) -> int:
        return sum(s.retained_correct for s in self.steps)

    @property
    def answer_correct_steps(self) -> int:
        return sum(s.answer_correct for s in self.steps)


StepCallback = Callable[[StepReport], None]
# A step that ran a turn, the policy object that ran it, and the session's scope.
TurnCallback = Callable[[StepReport, ContextPolicy, Scope], None]


def validate_episode_bounds(episode: Episode, episode_tokens: int) -> None:
    ids = [step.id for step in episode.steps]
    ok = (
        1 <= len(episode.steps) <= MAX_STEPS
        and all(ids)
        and len(set(ids)) == len(ids)
        and 1 <= episode_tokens <= MAX_EPISODE_TOKENS
    )
    if not ok:
        raise InvalidEpisode(
            f"invalid diagnostic episode bounds: 1...{MAX_STEPS} steps with unique non-empty "
            f"ids and an episode allowance of 1...{MAX_EPISODE_TOKENS} tokens"
        )


class EpisodeRunner:
    """Runs episodes against one counter/backend pair (each episode gets a fresh session)."""

    def __init__(
        self,
        counter: TokenCounter,
        backend: ModelBackend,
        turn: TurnRunner = run_turn,
    ) -> None:
        self.counter = counter
        self.backend = backend
        self.turn = turn

    def run(
        self,
        episode: Episode,
        policy: Policy,
        budget: RunBudget | None = None,
        episode_tokens: int = DEFAULT_EPISODE_TOKENS,
        on_step: StepCallback | None = None,
        cancel: CancelToken | None = None,
        on_turn: TurnCallback | None = None,
    ) -> EpisodeReport:
        """Run every step of ``episode`` under ``policy``. Bad bounds raise
        :class:`InvalidEpisode`; cancellation raises :class:`picocontext.Cancelled`; every
        other problem is a reported step failure. ``on_turn`` sees each step that ran a turn
        together with the live policy object, while it still holds that turn's artefacts
        (a navigated policy's manifest, a distilled policy's digest tree)."""
        validate_episode_bounds(episode, episode_tokens)
        budget = budget or sequential_budget()
        started = time.perf_counter()
        session = ContextSession(episode.initial, self.counter, self.backend)
        used = 0
        reports: list[StepReport] = []
        failure: str | None = None
        # The policy object lives exactly as long as its episode.
        with PolicyRun(policy, session) as runs:
            for step in episode.steps:
                _check(cancel)
                report = self._step(runs, episode, step, budget, episode_tokens - used, cancel)
                if report.run is not None:
                    used += report.run.total_input_tokens + report.run.total_generated_tokens
                reports.append(report)
                if on_step is not None:
                    on_step(report)
                if on_turn is not None and report.run is not None:
                    on_turn(report, runs.instance, session.context.scope)
                _check(cancel)
                if report.failure is not None:
                    failure = report.failure
                    break
            _check(cancel)
        return EpisodeReport(
            title=episode.title,
            policy=policy,
            planned_steps=len(episode.steps),
            steps=tuple(reports),
            original=session.original_context,
            revised=session.context,
            failure=failure,
            elapsed_seconds=time.perf_counter() - started,
        )

    def _step(
        self,
        runs: PolicyRun,
        episode: Episode,
        step: Step,
        budget: RunBudget,
        remaining: int,
        cancel: CancelToken | None,
    ) -> StepReport:
        session = runs.session
        expected = step.expected_facts

        def no_run(failure: str) -> StepReport:
            retained = retained_facts(session.context, expected, episode.check)
            return StepReport(
                step=step,
                run=None,
                check=episode.check,
                retained_facts=retained,
                retained_correct=False,
                answer_correct=False,
                failure=failure,
            )

        if remaining <= 0:
            return no_run(EPISODE_EXHAUSTED)
        try:
            if step.records:
                session.append_records(step.records, cancel)
        except Cancelled:
            raise
        except PicoContextError as exc:
            return no_run(exc.message)
        step_budget = budget.model_copy(
            update={"total_tokens": min(budget.total_tokens, remaining)}
        )
        session.answer_schema_json = step.answer_schema_json
        run = runs.turn(step_budget, cancel, self.turn)
        retained = retained_facts(run.revised, expected, episode.check)
        failure = run.failure
        if failure is None and step.answer_record_id is not None:
            answer = Record(id=step.answer_record_id, role=Role.ASSISTANT, body=run.answer)
            try:
                session.append_records((answer,), cancel)
            except Cancelled:
                raise
            except PicoContextError as exc:
                failure = exc.message
        retained_ok = retained == expected
        forbidden = episode.forbidden_terms
        answer_ok = failure is None and answer_correct(
            episode.check, run.answer, expected, forbidden
        )
        return StepReport(
            step=step,
            run=run,
            check=episode.check,
            retained_facts=retained,
            retained_correct=retained_ok,
            answer_correct=answer_ok,
            failure=failure,
            context_problem=None
            if retained_ok
            else context_problem(episode.check, retained, expected),
            answer_problem=None
            if answer_ok
            else answer_problem(
                episode.check, run.answer, expected, forbidden, failed=failure is not None
            ),
        )


def _check(cancel: CancelToken | None) -> None:
    if cancel is not None:
        cancel.check()


def warm_backend(backend: object) -> None:
    """Pay an in-process engine's one-time costs before the first policy or episode runs
    (a backend without any is left alone), so the first column is not charged for them."""
    warm = getattr(backend, "warm_up", None)
    if callable(warm):
        warm()


def cold_cache(backend: object) -> None:
    """Start the next episode or policy from a cold prefix cache (a backend without one is
    left alone), so no run profits from prompts another run left behind."""
    reset = getattr(backend, "reset_cache", None)
    if callable(reset):
        reset()
