"""The versioned JSON report of an evaluation: every step with its grades, usage and the full
call trace (each dispatched prompt, token ids and rendered text), the provenance of the run and
its summary. Decision attempts are core's :class:`picocontext.report.EditAttempt`."""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from picocontext import (
    EditAttempt,
    EditStyle,
    Phase,
    PreparedPrompt,
    Record,
    Snapshot,
    ToolStep,
)
from picocontext_diagnostics.episodes.episode_runner import (
    StepReport,
)
from picocontext_diagnostics.evaluation.config import EvaluationConfig
from picocontext_diagnostics.evaluation.proportions import (
    wilson_interval,
)
from picocontext_diagnostics.policies import (
    Policy,
)

SCHEMA: Literal["picocontext-evaluation"] = "picocontext-evaluation"
SCHEMA_VERSION: Literal[1] = 1

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class CallTrace(BaseModel):
    """One dispatched prompt exactly as the backend consumed it. Without traces (the
    default of ``picocontext eval``; ``--traces`` keeps them) only its phase, style, token
    count and notes are kept: the context, rendered text and token ids of every call were
    most of a report's bytes (26 MB for an 8 s deterministic run)."""

    model_config = _FROZEN
    phase: Phase
    edit_style: EditStyle
    context: Snapshot | None = None
    control_records: tuple[Record, ...] = ()
    token_count: int
    token_ids: tuple[int, ...] = ()
    rendered_prompt: str = ""
    notes: tuple[str, ...] = ()

    @classmethod
    def of(cls, prompt: PreparedPrompt, traces: bool) -> CallTrace:
        counts = cls(
            phase=prompt.input.phase,
            edit_style=prompt.input.edit_style,
            token_count=prompt.token_count,
            notes=prompt.notes,
        )
        if not traces:
            return counts
        return counts.model_copy(
            update={
                "context": prompt.input.context,
                "control_records": prompt.input.control_records,
                "token_ids": prompt.token_ids,
                "rendered_prompt": prompt.rendered,
            }
        )


class EvaluationStep(BaseModel):
    """One step of one result: inputs, grades, usage and the full call trace."""

    model_config = _FROZEN
    id: str
    # The records the step delivered (regenerated from the seed; kept with traces).
    incoming: tuple[Record, ...] = ()
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
    attempts: tuple[EditAttempt, ...]
    calls: tuple[CallTrace, ...]
    # Every navigation or digest tool call of a navigated/distilled turn, with its result.
    tool_steps: tuple[ToolStep, ...] = ()
    # What the navigated policy's runtime opened for the model before it read (charged).
    prefetch_steps: tuple[ToolStep, ...] = ()

    @classmethod
    def from_step(cls, report: StepReport, traces: bool = True) -> EvaluationStep:
        run = report.run
        calls = tuple(CallTrace.of(p, traces) for p in (run.calls if run else ()))
        attempts = run.attempts if run else ()
        return cls(
            id=report.step.id,
            incoming=report.step.records if traces else (),
            expected_facts=report.step.expected_facts,
            retained_facts=report.retained_facts,
            retained_correct=report.retained_correct,
            answer_correct=report.answer_correct,
            answer=run.answer if run else None,
            failure=report.failure,
            context_problem=report.context_problem,
            answer_problem=report.answer_problem,
            # Each step's three snapshots repeat the history; without traces a step keeps
            # its grades and counts, and the result keeps the transcript and the final context.
            original=run.original if run and traces else None,
            run_start=run.run_start if run and traces else None,
            revised=run.revised if run and traces else None,
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
            prefetch_steps=run.prefetch_steps if run else (),
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
    # The whole transcript (regenerated from the seed; kept with traces) and the context the
    # policy ended with (always kept: it is what the policy did).
    original: Snapshot | None = None
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
