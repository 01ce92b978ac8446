"""The evaluation runner: policies × seeds × repetitions on generated episodes.

Every policy meets the same generated episode, model, sampling and budgets, each in an isolated
session. Policy order is rotated per repetition (start = seed index + repetition), so no policy
always runs first; order is recorded, not hidden.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial

from picocontext import (
    Cancelled,
    CancelToken,
    ModelBackend,
    ModelInput,
    Phase,
    PicoContextError,
    RunBudget,
    Scope,
    TokenCounter,
)
from picocontext_diagnostics.episodes.episode import Episode, generated_episode
from picocontext_diagnostics.episodes.episode_runner import (
    EpisodeReport,
    EpisodeRunner,
    StepCallback,
    StepReport,
    cold_cache,
    warm_backend,
)
from picocontext_diagnostics.episodes.fixtures import (
    Scenario,
)
from picocontext_diagnostics.errors import InvalidConfiguration
from picocontext_diagnostics.evaluation.config import EvaluationConfig
from picocontext_diagnostics.evaluation.report import (
    EvaluationReport,
    EvaluationResult,
    EvaluationStep,
    Provenance,
)
from picocontext_diagnostics.evaluation.stats import summarize
from picocontext_diagnostics.parallel import run_ordered
from picocontext_diagnostics.policies import (
    BUILTIN_POLICIES,
    Policy,
    TurnRunner,
    resolve_policies,
    run_turn,
)

ResultCallback = Callable[[EvaluationResult], None]


def rotation(policies: Sequence[Policy], seed_index: int, repetition: int) -> list[Policy]:
    """The policy order of one (seed, repetition): start at ``(seed_index + repetition) % n``."""
    start = (seed_index + repetition) % len(policies)
    return [*policies[start:], *policies[:start]]


def evaluation_scope(scenario: Scenario) -> Scope:
    return Scope(user_id="evaluation", conversation_id=scenario.value, branch_id="comparison")


class EvaluationRunner:
    """Runs one configuration against one counter/backend pair (or a pool of them)."""

    def __init__(
        self,
        config: EvaluationConfig,
        counter: TokenCounter,
        backend: ModelBackend,
        provenance: Provenance,
        registry: dict[str, Policy] | None = None,
        turn: TurnRunner = run_turn,
        workers: int = 1,
        pool: Sequence[tuple[TokenCounter, ModelBackend]] = (),
        traces: bool = True,
    ) -> None:
        """``workers`` > 1 runs independent episodes concurrently (results stay in plan
        order); ``pool`` spreads them over several counter/backend pairs (episode k uses
        ``pool[k % len(pool)]``), defaulting to ``(counter, backend)``. ``traces: False``
        keeps each call's counts but not its context, text and token ids
        (:class:`~picocontext_diagnostics.evaluation.report.CallTrace`)."""
        if workers < 1:
            raise InvalidConfiguration("workers must be at least 1")
        self.config = config
        known = {**(registry or BUILTIN_POLICIES), **{v.name: v for v in config.variants}}
        self.policies = resolve_policies(config.policies, known)
        self.counter = counter
        self.backend = backend
        self.provenance = provenance
        self.turn = turn
        self.workers = workers
        self.pool = tuple(pool) or ((counter, backend),)
        self.traces = traces
        # Pool members whose one-time engine costs are paid (by id): the first episode on
        # each would otherwise carry them.
        self._warmed: set[int] = set()

    def episodes(self) -> list[Episode]:
        """The generated episode of every seed, in configuration order."""
        c = self.config
        return [
            generated_episode(
                c.scenario,
                seed,
                c.step_count,
                c.noise_lines,
                evaluation_scope(c.scenario),
                protect_requests=c.protect_requests,
            )
            for seed in c.seeds
        ]

    def environment_tokens(self, episode: Episode) -> tuple[int | None, str | None]:
        """Completion-prompt size of initial + all incoming records (measured, not sent)."""
        try:
            prepared = self.counter.prepare(
                ModelInput(context=episode.environment(), phase=Phase.COMPLETION)
            )
        except Cancelled:
            raise
        except PicoContextError as exc:
            return None, exc.message
        return prepared.token_count, None

    def run(
        self,
        on_result: ResultCallback | None = None,
        on_step: StepCallback | None = None,
        cancel: CancelToken | None = None,
        reuse: Mapping[int, EvaluationResult] | None = None,
    ) -> EvaluationReport:
        """Run the plan; ``reuse`` holds results already finished (by plan order, read back
        from a journal): they are not run again, and the report is the one an uninterrupted
        run writes apart from timings. ``on_result`` sees only the results run now."""
        started = time.perf_counter()
        reuse = dict(reuse or {})  # a copy: the journal behind it grows as results finish
        created = datetime.now(UTC)
        budget = self.config.limits.run_budget()
        episodes = self.episodes()
        environment = [self.environment_tokens(episode) for episode in episodes]
        if on_step is not None and self.workers > 1:
            on_step = _serialized(on_step)
        run_one = partial(self._run_one, budget=budget, on_step=on_step)
        plan = list(enumerate(self._plan(len(episodes)), 1))
        for order, (_, _, policy) in plan:
            if order in reuse and reuse[order].policy.name != policy.name:
                raise InvalidConfiguration(
                    f"result {order} of the journal is {reuse[order].policy.name}, the plan runs "
                    f"{policy.name} there — the journal belongs to another plan"
                )
        tasks = [
            partial(run_one, order, episodes[s], repetition, policy, environment[s])
            for order, (s, repetition, policy) in plan
            if order not in reuse
        ]
        fresh = run_ordered(tasks, self.workers, on_result, cancel)
        results = sorted([*reuse.values(), *fresh], key=lambda r: r.order)
        if len(results) != len(plan) or any(r.order not in dict(plan) for r in results):
            raise InvalidConfiguration("the journal holds results outside this plan")
        return EvaluationReport(
            created_at=created,
            configuration=self.config,
            provenance=self.provenance,
            results=tuple(results),
            summary=summarize(results, [p.name for p in self.policies]),
            elapsed_seconds=time.perf_counter() - started,
        )

    def _plan(self, episode_count: int) -> list[tuple[int, int, Policy]]:
        """(seed index, repetition, policy) of every run, in report order."""
        return [
            (seed_index, repetition, policy)
            for seed_index in range(episode_count)
            for repetition in range(self.config.repetitions)
            for policy in rotation(self.policies, seed_index, repetition)
        ]

    def _run_one(
        self,
        order: int,
        episode: Episode,
        repetition: int,
        policy: Policy,
        environment: tuple[int | None, str | None],
        cancel: CancelToken | None,
        *,
        budget: RunBudget,
        on_step: StepCallback | None,
    ) -> EvaluationResult:
        """One isolated episode on its pool member, from a cold prefix cache."""
        counter, backend = self.pool[(order - 1) % len(self.pool)]
        if id(backend) not in self._warmed:
            self._warmed.add(id(backend))
            warm_backend(backend)
        cold_cache(backend)
        limits = self.config.limits
        report = EpisodeRunner(counter, backend, self.turn).run(
            episode, policy, budget, limits.episode_tokens, on_step, cancel
        )
        return _result(
            order, episode, repetition, report, *environment, limits.context_window, self.traces
        )


def _serialized(callback: StepCallback) -> StepCallback:
    """``callback`` behind a lock, for step reports arriving from several workers."""
    lock = threading.Lock()

    def call(step: StepReport) -> None:
        with lock:
            callback(step)

    return call


def _result(
    order: int,
    episode: Episode,
    repetition: int,
    report: EpisodeReport,
    env_tokens: int | None,
    env_failure: str | None,
    window: int,
    traces: bool = True,
) -> EvaluationResult:
    steps = tuple(EvaluationStep.from_step(s, traces) for s in report.steps)
    return EvaluationResult(
        order=order,
        seed=episode.seed if episode.seed is not None else 0,
        repetition=repetition,
        policy=report.policy,
        planned_steps=report.planned_steps,
        environment_prompt_tokens=env_tokens,
        environment_prompt_failure=env_failure,
        context_window=window,
        environment_pressure=None if env_tokens is None else env_tokens / window,
        steps=steps,
        passed=report.passed,
        failure=report.failure,
        retained_correct_steps=report.retained_correct_steps,
        answer_correct_steps=report.answer_correct_steps,
        input_tokens=report.total_input_tokens,
        generated_tokens=report.total_generated_tokens,
        prefill_tokens=report.total_prefill_tokens,
        elapsed_seconds=report.elapsed_seconds,
        original=report.original if traces else None,
        revised=report.revised,
    )
