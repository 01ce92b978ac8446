"""What an evaluation runs: the plan (scenario, seeds, repetitions, policies) and the token
limits every policy shares, validated strictly and bounded so a plan cannot explode."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from picocontext import RunBudget, scale_tokens
from picocontext_diagnostics.episodes.episode import MAX_STEPS
from picocontext_diagnostics.episodes.fixtures import (
    MAX_NOISE_LINES,
    Scenario,
    describe_validation_error,
    load_json_model,
)
from picocontext_diagnostics.errors import InvalidConfiguration
from picocontext_diagnostics.policies import (
    BUILTIN_POLICIES,
    DEFAULT_POLICIES,
    Policy,
)

# The plan's size is a guard a user raises (``max_planned_steps`` in the configuration), not
# a limit of memory: results stream to the journal, reports keep counts rather than traces,
# so what bounds a plan is disk and time. The default still stops a typo (a seed list of a
# million) from starting a run that would not end today.
DEFAULT_MAX_PLANNED_STEPS = 20_000
MAX_PLANNED_STEPS = 10_000_000
MAX_SEEDS = 100_000
MAX_REPETITIONS = 1_000
MAX_CONFIG_BYTES = 1_000_000

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
        try:
            return scale_tokens(self, factor, keep=("decision_attempts",))
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
    """What to run. At most ``max_planned_steps`` planned steps (seeds × repetitions ×
    policies × steps; 20,000 unless raised)."""

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
    # Named settings of a registered policy that ``policies`` may list beside the built-ins,
    # e.g. {"name": "navigated-alone", "kind": "navigated", "config": {"navigator": null}}:
    # two configurations of one policy compared in one run.
    variants: tuple[Policy, ...] = Field(default=(), max_length=16)
    limits: EvaluationLimits = Field(default_factory=EvaluationLimits)
    max_planned_steps: int = Field(default=DEFAULT_MAX_PLANNED_STEPS, ge=1, le=MAX_PLANNED_STEPS)

    @model_validator(mode="after")
    def _bounded_plan(self) -> EvaluationConfig:
        if any(not 0 <= s < 2**64 for s in self.seeds):
            raise ValueError("seeds must be integers in 0...2^64-1")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError("seeds must be unique")
        if len(set(self.policies)) != len(self.policies):
            raise ValueError("policies must be unique")
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError("variant names must be unique")
        shadowing = sorted(set(names) & set(BUILTIN_POLICIES))
        if shadowing:
            raise ValueError(f"variant names must differ from the built-in policies: {shadowing}")
        if self.planned_steps > self.max_planned_steps:
            raise ValueError(
                f"the plan has {self.planned_steps:,} steps (seeds × repetitions × policies × "
                f"steps), above the guard max_planned_steps {self.max_planned_steps:,} — set "
                '"max_planned_steps" higher in the configuration if the time and disk allow it'
            )
        return self

    @property
    def planned_steps(self) -> int:
        return len(self.seeds) * self.repetitions * len(self.policies) * self.step_count

    def planned_runs(self) -> int:
        """Results the plan produces: seeds × repetitions × policies."""
        return len(self.seeds) * self.repetitions * len(self.policies)

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
