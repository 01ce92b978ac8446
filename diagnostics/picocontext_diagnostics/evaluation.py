"""The evaluation runner: policies × seeds × repetitions on generated episodes.

Every policy meets the same generated episode, model, sampling and budgets, each in an isolated
session. Policy order is rotated per repetition (start = seed index + repetition), so no policy
always runs first; order is recorded, not hidden. The report keeps every dispatched prompt —
token ids and rendered text — with its context and control records, the usage of every step,
the provenance of the run, and per-policy pass rates with Wilson 95% intervals plus a paired
comparison of every two policies on the same episodes.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from itertools import combinations
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from picocontext import (
    Cancelled,
    CancelToken,
    EditStyle,
    ModelBackend,
    ModelInput,
    Outcome,
    Phase,
    PicoContextError,
    Record,
    RunBudget,
    Scope,
    Snapshot,
    TokenCounter,
)
from picocontext.report import ToolStep
from picocontext_diagnostics.episodes import MAX_STEPS, Episode, generated_episode
from picocontext_diagnostics.errors import InvalidConfiguration
from picocontext_diagnostics.fixtures import (
    MAX_NOISE_LINES,
    Scenario,
    describe_validation_error,
    load_json_model,
)
from picocontext_diagnostics.policies import (
    BUILTIN_POLICIES,
    DEFAULT_POLICIES,
    Policy,
    TurnRunner,
    resolve_policies,
    session_turn,
)
from picocontext_diagnostics.runner import (
    EpisodeReport,
    EpisodeRunner,
    StepCallback,
    StepReport,
    cold_cache,
)
from picocontext_diagnostics.stats import (
    mcnemar_exact_p,
    paired_difference_interval,
    wilson_interval,
)

SCHEMA: Literal["picocontext-evaluation"] = "picocontext-evaluation"
SCHEMA_VERSION: Literal[1] = 1
MAX_PLANNED_STEPS = 512
MAX_SEEDS = 16
MAX_REPETITIONS = 4
MAX_CONFIG_BYTES = 1_000_000

_FROZEN = ConfigDict(frozen=True, extra="forbid")


_STRICT = ConfigDict(frozen=True, extra="forbid", strict=True)


class EvaluationLimits(BaseModel):
    """Token limits shared by every policy (defaults = the sequential app budget)."""

    model_config = _STRICT
    context_window: int = Field(default=4_096, ge=1, le=32_768)
    turn_tokens: int = Field(default=24_000, ge=1, le=10_000_000)
    episode_tokens: int = Field(default=80_000, ge=1, le=10_000_000)
    decision_output_tokens: int = Field(default=1_024, ge=1, le=4_096)
    completion_output_tokens: int = Field(default=512, ge=1, le=4_096)
    decision_attempts: int = Field(default=4, ge=1, le=4)

    def scaled(self, factor: int) -> EvaluationLimits:
        """Every token limit times ``factor`` (attempts unchanged): a token budget expressed in
        a finer unit, e.g. UTF-8 bytes at about 4 per token. Out-of-range results fail
        clearly."""
        if factor < 1:
            raise InvalidConfiguration("the scale factor must be a positive integer")
        data = self.model_dump()
        for key in data:
            if key != "decision_attempts":
                data[key] *= factor
        try:
            return EvaluationLimits.model_validate(data)
        except ValidationError as exc:
            raise InvalidConfiguration(
                f"limits × {factor}: {describe_validation_error(exc)}"
            ) from None

    def run_budget(self) -> RunBudget:
        return RunBudget(
            context_window=self.context_window,
            total_tokens=self.turn_tokens,
            edit_output_tokens=self.decision_output_tokens,
            completion_output_tokens=self.completion_output_tokens,
            max_edit_attempts=self.decision_attempts,
        )


class EvaluationConfig(BaseModel):
    """What to run. At most 512 planned steps (seeds × repetitions × policies × steps)."""

    model_config = _STRICT
    schema_version: Literal[1] = 1
    description: str = ""
    scenario: Scenario = Scenario.RETENTION
    seeds: tuple[int, ...] = Field(default=(17, 29), min_length=1, max_length=MAX_SEEDS)
    repetitions: int = Field(default=3, ge=1, le=MAX_REPETITIONS)
    step_count: int = Field(default=4, ge=1, le=MAX_STEPS)
    noise_lines: int = Field(default=12, ge=0, le=MAX_NOISE_LINES)
    # False: answered requests are ordinary history a policy may drop or archive.
    protect_requests: bool = True
    policies: tuple[str, ...] = Field(default=DEFAULT_POLICIES, min_length=1)
    limits: EvaluationLimits = Field(default_factory=EvaluationLimits)

    @model_validator(mode="after")
    def _bounded_plan(self) -> EvaluationConfig:
        if any(not 0 <= s < 2**64 for s in self.seeds):
            raise ValueError("seeds must be integers in 0...2^64-1")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError("seeds must be unique")
        if len(set(self.policies)) != len(self.policies):
            raise ValueError("policies must be unique")
        if self.planned_steps > MAX_PLANNED_STEPS:
            raise ValueError(
                f"the plan has {self.planned_steps} steps (seeds × repetitions × policies × "
                f"steps); at most {MAX_PLANNED_STEPS} are allowed"
            )
        return self

    @property
    def planned_steps(self) -> int:
        return len(self.seeds) * self.repetitions * len(self.policies) * self.step_count

    @classmethod
    def parse(cls, text: str | bytes, source: str = "configuration") -> EvaluationConfig:
        """Validate JSON text; problems become one readable :class:`InvalidConfiguration`."""
        if len(text) > MAX_CONFIG_BYTES:
            raise InvalidConfiguration(f"{source}: larger than {MAX_CONFIG_BYTES} bytes")
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise InvalidConfiguration(f"{source}: {describe_validation_error(exc)}") from None


def load_config(path: str) -> EvaluationConfig:
    """Read and validate a configuration file (at most 1 MB)."""
    from pathlib import Path

    from picocontext_diagnostics.errors import FixtureError

    try:
        return load_json_model(EvaluationConfig, Path(path), MAX_CONFIG_BYTES)
    except FixtureError as exc:
        raise InvalidConfiguration(exc.message) from None


# -- report models ----------------------------------------------------------------------------


class CallTrace(BaseModel):
    """One dispatched prompt exactly as the backend consumed it."""

    model_config = _FROZEN
    phase: Phase
    edit_style: EditStyle
    context: Snapshot
    control_records: tuple[Record, ...]
    token_count: int
    token_ids: tuple[int, ...]
    rendered_prompt: str
    notes: tuple[str, ...] = ()


class AttemptTrace(BaseModel):
    model_config = _FROZEN
    arguments: str
    model_text: str
    outcome: Outcome
    detail: str


class EvaluationStep(BaseModel):
    """One step of one result: inputs, grades, usage and the full call trace."""

    model_config = _FROZEN
    id: str
    incoming: tuple[Record, ...]
    expected_facts: dict[str, str]
    retained_facts: dict[str, str]
    retained_correct: bool
    answer_correct: bool
    answer: str | None
    failure: str | None
    context_problem: str | None
    answer_problem: str | None
    original: Snapshot | None
    run_start: Snapshot | None
    revised: Snapshot | None
    original_prompt_tokens: int | None
    original_prompt_failure: str | None
    run_start_prompt_tokens: int | None
    final_prompt_tokens: int | None
    input_tokens: int
    generated_tokens: int
    prefill_tokens: int
    edit_calls: int
    keep_calls: int
    elapsed_seconds: float
    attempts: tuple[AttemptTrace, ...]
    calls: tuple[CallTrace, ...]
    # Every navigation or digest tool call of a navigated/distilled turn, with its result.
    tool_steps: tuple[ToolStep, ...] = ()

    @classmethod
    def from_step(cls, report: StepReport) -> EvaluationStep:
        run = report.run
        calls = tuple(
            CallTrace(
                phase=p.input.phase,
                edit_style=p.input.edit_style,
                context=p.input.context,
                control_records=p.input.control_records,
                token_count=p.token_count,
                token_ids=p.token_ids,
                rendered_prompt=p.rendered,
                notes=p.notes,
            )
            for p in (run.calls if run else ())
        )
        attempts = tuple(
            AttemptTrace(
                arguments=a.arguments, model_text=a.model_text, outcome=a.outcome, detail=a.detail
            )
            for a in (run.attempts if run else ())
        )
        return cls(
            id=report.step.id,
            incoming=report.step.records,
            expected_facts=report.step.expected_facts,
            retained_facts=report.retained_facts,
            retained_correct=report.retained_correct,
            answer_correct=report.answer_correct,
            answer=run.answer if run else None,
            failure=report.failure,
            context_problem=report.context_problem,
            answer_problem=report.answer_problem,
            original=run.original if run else None,
            run_start=run.run_start if run else None,
            revised=run.revised if run else None,
            original_prompt_tokens=run.original_prompt_tokens if run else None,
            original_prompt_failure=run.original_prompt_failure if run else None,
            run_start_prompt_tokens=run.run_start_prompt_tokens if run else None,
            final_prompt_tokens=run.final_prompt.token_count if run and run.final_prompt else None,
            input_tokens=run.total_input_tokens if run else 0,
            generated_tokens=run.total_generated_tokens if run else 0,
            prefill_tokens=run.total_prefill_tokens if run else 0,
            edit_calls=run.edit_call_count if run else 0,
            keep_calls=run.keep_call_count if run else 0,
            elapsed_seconds=run.elapsed_seconds if run else 0.0,
            attempts=attempts,
            calls=calls,
            tool_steps=run.tool_steps if run else (),
        )


class EvaluationResult(BaseModel):
    """One policy on one seed in one repetition. Unreached steps count as failures."""

    model_config = _FROZEN
    order: int
    seed: int
    repetition: int
    policy: Policy
    planned_steps: int
    environment_prompt_tokens: int | None
    environment_prompt_failure: str | None = None
    context_window: int
    environment_pressure: float | None
    steps: tuple[EvaluationStep, ...]
    passed: bool
    failure: str | None
    retained_correct_steps: int
    answer_correct_steps: int
    input_tokens: int
    generated_tokens: int
    prefill_tokens: int
    elapsed_seconds: float
    original: Snapshot
    revised: Snapshot

    @model_validator(mode="after")
    def _consistent(self) -> EvaluationResult:
        if self.retained_correct_steps != sum(s.retained_correct for s in self.steps):
            raise ValueError("retained_correct_steps disagrees with steps")
        if self.answer_correct_steps != sum(s.answer_correct for s in self.steps):
            raise ValueError("answer_correct_steps disagrees with steps")
        if self.input_tokens != sum(s.input_tokens for s in self.steps):
            raise ValueError("input_tokens disagrees with steps")
        if self.generated_tokens != sum(s.generated_tokens for s in self.steps):
            raise ValueError("generated_tokens disagrees with steps")
        return self


class Provenance(BaseModel):
    """Where the numbers came from, enough to rerun them."""

    model_config = _FROZEN
    backend: str
    model: str
    model_revision: str
    token_unit: str
    sampling: str
    prefix_cache: str
    constrained_decisions: str
    picocontext_version: str
    source_revision: str
    python_version: str
    operating_system: str
    machine: str
    model_notes: tuple[str, ...] = ()
    # "constrained" or "free" for real models (every protocol action, not only decisions);
    # reports written before decoding modes existed say "not recorded".
    decoding: str = "not recorded"


class Rate(BaseModel):
    """k of n with the Wilson 95% interval."""

    model_config = _FROZEN
    successes: int
    trials: int
    rate: float | None
    ci95_low: float
    ci95_high: float

    @classmethod
    def of(cls, successes: int, trials: int) -> Rate:
        low, high = wilson_interval(successes, trials)
        return cls(
            successes=successes,
            trials=trials,
            rate=successes / trials if trials else None,
            ci95_low=low,
            ci95_high=high,
        )

    def text(self) -> str:
        if self.rate is None:
            return "n/a"
        return (
            f"{self.successes}/{self.trials} = {self.rate:.0%} "
            f"[95% CI {self.ci95_low:.0%}–{self.ci95_high:.0%}]"
        )


class PolicySummary(BaseModel):
    model_config = _FROZEN
    policy: str
    episodes: Rate
    retained_steps: Rate
    answer_steps: Rate
    mean_input_tokens: float
    mean_generated_tokens: float
    mean_elapsed_seconds: float
    # Totals over the batch and prefill work (what was computed, less with a prefix cache).
    total_input_tokens: int = 0
    total_prefill_tokens: int = 0
    mean_prefill_tokens: float = 0.0
    total_elapsed_seconds: float = 0.0
    tool_calls: int = 0


class PairedComparison(BaseModel):
    """Policy A against policy B on the same (seed, repetition) episodes."""

    model_config = _FROZEN
    policy_a: str
    policy_b: str
    pairs: int
    both_passed: int
    only_a_passed: int
    only_b_passed: int
    neither_passed: int
    difference: float | None
    difference_ci95_low: float
    difference_ci95_high: float
    mcnemar_exact_p: float


class EvaluationSummary(BaseModel):
    model_config = _FROZEN
    all_passed: bool
    policies: tuple[PolicySummary, ...]
    comparisons: tuple[PairedComparison, ...]
    note: str = (
        "Intervals are Wilson 95% over the episodes (or steps) of this batch; steps of one "
        "episode are not independent, and repetitions with a deterministic backend repeat the "
        "same outcome, so intervals describe this batch, not a task distribution."
    )


class EvaluationReport(BaseModel):
    """The versioned JSON report of one evaluation."""

    model_config = _FROZEN
    kind: Literal["picocontext-evaluation"] = SCHEMA
    schema_version: Literal[1] = SCHEMA_VERSION
    created_at: datetime
    configuration: EvaluationConfig
    provenance: Provenance
    results: tuple[EvaluationResult, ...]
    summary: EvaluationSummary
    elapsed_seconds: float

    @property
    def passed(self) -> bool:
        return self.summary.all_passed

    def to_json(self) -> str:
        """Pretty, sorted-key JSON with unescaped non-ASCII and slashes; token-id arrays stay
        on one line each (one id per line would multiply the file size several times)."""
        return pretty_json(self.model_dump(mode="json"))

    @classmethod
    def from_json(cls, text: str | bytes) -> EvaluationReport:
        return cls.model_validate_json(text)


def pretty_json(data: object, compact_keys: frozenset[str] = frozenset({"token_ids"})) -> str:
    """``json.dumps(indent=2, sort_keys=True)`` except that lists under ``compact_keys`` are
    written on one line. A per-call random nonce keeps the placeholders collision-free."""
    nonce = uuid.uuid4().hex
    compact: list[str] = []

    def swap(value: object) -> object:
        if isinstance(value, dict):
            out: dict[str, object] = {}
            for key, item in value.items():
                if key in compact_keys and isinstance(item, list):
                    compact.append(json.dumps(item, separators=(",", ":")))
                    out[key] = f"{nonce}:{len(compact) - 1}"
                else:
                    out[key] = swap(item)
            return out
        if isinstance(value, list):
            return [swap(item) for item in value]
        return value

    text = json.dumps(swap(data), indent=2, sort_keys=True, ensure_ascii=False)
    pattern = re.compile(f'"{nonce}:([0-9]+)"')
    return pattern.sub(lambda m: compact[int(m.group(1))], text) + "\n"


# -- statistics -------------------------------------------------------------------------------


def summarize(results: Sequence[EvaluationResult], policies: Sequence[str]) -> EvaluationSummary:
    """Per-policy rates and paired comparisons, in configuration order."""
    per_policy: list[PolicySummary] = []
    for name in policies:
        mine = [r for r in results if r.policy.name == name]
        planned = sum(r.planned_steps for r in mine)
        count = len(mine) or 1
        per_policy.append(
            PolicySummary(
                policy=name,
                episodes=Rate.of(sum(r.passed for r in mine), len(mine)),
                retained_steps=Rate.of(sum(r.retained_correct_steps for r in mine), planned),
                answer_steps=Rate.of(sum(r.answer_correct_steps for r in mine), planned),
                mean_input_tokens=sum(r.input_tokens for r in mine) / count,
                mean_generated_tokens=sum(r.generated_tokens for r in mine) / count,
                mean_elapsed_seconds=sum(r.elapsed_seconds for r in mine) / count,
                total_input_tokens=sum(r.input_tokens for r in mine),
                total_prefill_tokens=sum(r.prefill_tokens for r in mine),
                mean_prefill_tokens=sum(r.prefill_tokens for r in mine) / count,
                total_elapsed_seconds=sum(r.elapsed_seconds for r in mine),
                tool_calls=sum(len(st.tool_steps) for r in mine for st in r.steps),
            )
        )
    comparisons: list[PairedComparison] = []
    for a, b in combinations(policies, 2):
        outcome_a = {(r.seed, r.repetition): r.passed for r in results if r.policy.name == a}
        outcome_b = {(r.seed, r.repetition): r.passed for r in results if r.policy.name == b}
        keys = sorted(set(outcome_a) & set(outcome_b))
        both = sum(outcome_a[k] and outcome_b[k] for k in keys)
        only_a = sum(outcome_a[k] and not outcome_b[k] for k in keys)
        only_b = sum(outcome_b[k] and not outcome_a[k] for k in keys)
        neither = len(keys) - both - only_a - only_b
        low, high = paired_difference_interval(both, only_a, only_b, neither)
        comparisons.append(
            PairedComparison(
                policy_a=a,
                policy_b=b,
                pairs=len(keys),
                both_passed=both,
                only_a_passed=only_a,
                only_b_passed=only_b,
                neither_passed=neither,
                difference=(only_a - only_b) / len(keys) if keys else None,
                difference_ci95_low=low,
                difference_ci95_high=high,
                mcnemar_exact_p=mcnemar_exact_p(only_a, only_b),
            )
        )
    return EvaluationSummary(
        all_passed=bool(results) and all(r.passed for r in results),
        policies=tuple(per_policy),
        comparisons=tuple(comparisons),
    )


# -- the runner -------------------------------------------------------------------------------

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
        turn: TurnRunner = session_turn,
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
