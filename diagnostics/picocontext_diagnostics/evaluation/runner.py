"""The evaluation runner: policies × seeds × repetitions on generated episodes.

Every policy meets the same generated episode, model, sampling and budgets, each in an isolated
session. Policy order is rotated per repetition (start = seed index + repetition), so no policy
always runs first; order is recorded, not hidden.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from picocontext import (
    Cancelled,
    CancelToken,
    ModelBackend,
    ModelInput,
    Phase,
    PicoContextError,
    Scope,
    TokenCounter,
)
from picocontext_diagnostics.episodes import Episode, generated_episode
from picocontext_diagnostics.evaluation.config import EvaluationConfig
from picocontext_diagnostics.evaluation.report import (
    EvaluationReport,
    EvaluationResult,
    EvaluationStep,
    Provenance,
)
from picocontext_diagnostics.evaluation.stats import summarize
from picocontext_diagnostics.fixtures import (
    Scenario,
)
from picocontext_diagnostics.policies import (
    BUILTIN_POLICIES,
    Policy,
    TurnRunner,
    resolve_policies,
    run_turn,
)
from picocontext_diagnostics.runner import (
    EpisodeReport,
    EpisodeRunner,
    StepCallback,
    cold_cache,
)

ResultCallback = Callable[[EvaluationResult], None]


def rotation(policies: Sequence[Policy], seed_index: int, repetition: int) -> list[Policy]:
    """The policy order of one (seed, repetition): start at ``(seed_index + repetition) % n``."""
    start = (seed_index + repetition) % len(policies)
    return [*policies[start:], *policies[:start]]


def evaluation_scope(scenario: Scenario) -> Scope:
    return Scope(user_id="evaluation", conversation_id=scenario.value, branch_id="comparison")


class EvaluationRunner:
    """Runs one configuration against one counter/backend pair."""

    def __init__(
        self,
        config: EvaluationConfig,
        counter: TokenCounter,
        backend: ModelBackend,
        provenance: Provenance,
        registry: dict[str, Policy] | None = None,
        turn: TurnRunner = run_turn,
    ) -> None:
        self.config = config
        self.policies = resolve_policies(config.policies, registry or BUILTIN_POLICIES)
        self.counter = counter
        self.backend = backend
        self.provenance = provenance
        self.turn = turn

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
    ) -> EvaluationReport:
        started = time.perf_counter()
        created = datetime.now(UTC)
        limits = self.config.limits
        budget = limits.run_budget()
        runner = EpisodeRunner(self.counter, self.backend, self.turn)
        results: list[EvaluationResult] = []
        for seed_index, episode in enumerate(self.episodes()):
            env_tokens, env_failure = self.environment_tokens(episode)
            for repetition in range(self.config.repetitions):
                for policy in rotation(self.policies, seed_index, repetition):
                    if cancel is not None:
                        cancel.check()
                    cold_cache(self.backend)
                    report = runner.run(
                        episode, policy, budget, limits.episode_tokens, on_step, cancel
                    )
                    result = _result(
                        len(results) + 1,
                        episode,
                        repetition,
                        report,
                        env_tokens,
                        env_failure,
                        limits.context_window,
                    )
                    results.append(result)
                    if on_result is not None:
                        on_result(result)
        return EvaluationReport(
            created_at=created,
            configuration=self.config,
            provenance=self.provenance,
            results=tuple(results),
            summary=summarize(results, [p.name for p in self.policies]),
            elapsed_seconds=time.perf_counter() - started,
        )


def _result(
    order: int,
    episode: Episode,
    repetition: int,
    report: EpisodeReport,
    env_tokens: int | None,
    env_failure: str | None,
    window: int,
) -> EvaluationResult:
    steps = tuple(EvaluationStep.from_step(s) for s in report.steps)
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
        original=report.original,
        revised=report.revised,
    )
