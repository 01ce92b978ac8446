"""The machine-readable report: the whole run as one JSON document with the verdict on top.

A script that compares runs should not parse the text report. This document carries what was
run (settings, model, decoding, budgets), the top-level ``verdict`` (winner, sentence and the
per-policy totals it was decided on), and per policy every step's numbers, checks, decisions,
tool calls and **every prompt dispatched to the model**, verbatim with its size. The models
below are the format: ``resources/schemas/playground-report-1.schema.json`` is generated from
them (:func:`generate_schema`) and a test keeps the shipped file equal to it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from picocontext import PreparedPrompt, RunBudget, RunReport, ToolStep
from picocontext_diagnostics.verdict import Verdict, VerdictRow
from picocontext_playground.results import ComparisonResult, PolicyOutcome, StepView
from picocontext_playground.runverdict import headline, result_verdict
from picocontext_playground.settings import ComparisonSettings

FORMAT: Literal["picocontext-playground-report"] = "picocontext-playground-report"
VERSION: Literal[1] = 1
SCHEMA_FILENAME = "playground-report-1.schema.json"
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ModelInfo(BaseModel):
    """The model and what ran it: ``engine`` is ``mlx``, ``llamacpp``, ``openai`` or
    ``scripted`` (the rule-based stand-in)."""

    model_config = _FROZEN
    id: str
    label: str
    engine: str
    token_unit: str
    details: tuple[str, ...]


class Decoding(BaseModel):
    """Sampling is greedy for every policy; structured decoding and the prefix cache are
    settings (they apply to real models only)."""

    model_config = _FROZEN
    sampling: Literal["greedy"] = "greedy"
    constrained: bool
    prefix_cache: bool


class PolicyVerdict(BaseModel):
    """One policy's totals and its place in the ranking."""

    model_config = _FROZEN
    rank: int
    name: str
    label: str
    passed: bool
    checks_passed: int
    checks_total: int
    input_tokens: int
    generated_tokens: int
    prefill_tokens: int
    model_work: int
    wall_seconds: float
    tool_calls: int
    input_change: float | None
    work_change: float | None
    failure: str | None


class VerdictDoc(BaseModel):
    model_config = _FROZEN
    winner: str | None
    sentence: str
    headline: str
    rule: str
    baseline: str | None
    token_unit: str
    policies: tuple[PolicyVerdict, ...]


class Prompt(BaseModel):
    """A prompt as the model consumed it: the decode of the exact token ids."""

    model_config = _FROZEN
    phase: str
    tokens: int
    text: str
    notes: tuple[str, ...]


class Attempt(BaseModel):
    model_config = _FROZEN
    outcome: str
    detail: str
    model_text: str
    arguments: str


class StepDoc(BaseModel):
    model_config = _FROZEN
    step_id: str
    context_passed: bool
    answer_passed: bool
    failure: str | None
    context_problem: str | None
    answer_problem: str | None
    expected: dict[str, str]
    retained: dict[str, str]
    ran: bool
    answer: str
    prompt_before: int | None
    prompt_after: int | None
    input_tokens: int
    generated_tokens: int
    prefill_tokens: int
    elapsed_seconds: float
    edit_calls: int
    keep_calls: int
    attempts: tuple[Attempt, ...]
    tool_calls: tuple[ToolStep, ...]
    # What the policy's runtime called for the model before its first step (charged).
    prefetch_calls: tuple[ToolStep, ...] = ()
    diff: str
    prompts: tuple[Prompt, ...]


class PolicyDoc(BaseModel):
    model_config = _FROZEN
    name: str
    label: str
    title: str
    passed: bool
    failure: str | None
    planned_steps: int
    elapsed_seconds: float
    steps: tuple[StepDoc, ...]


class RunDoc(BaseModel):
    """The document's root."""

    model_config = _FROZEN
    format: Literal["picocontext-playground-report"] = FORMAT
    version: Literal[1] = VERSION
    task: str
    title: str
    settings: ComparisonSettings
    model: ModelInfo
    decoding: Decoding
    budget: RunBudget
    episode_tokens: int | None
    noise_lines: int | None
    status: str
    completed: bool
    cancelled: bool
    elapsed_seconds: float
    verdict: VerdictDoc
    policies: tuple[PolicyDoc, ...]


RULE = (
    "A policy passes when every check passed and every planned step ran; among those the "
    "winner made the model do the least work (prefill computed plus generated), then the "
    "least input, then the name."
)


def _policy_verdict(row: VerdictRow) -> PolicyVerdict:
    t = row.totals
    return PolicyVerdict(
        rank=row.rank,
        name=t.name,
        label=t.label,
        passed=row.passed,
        checks_passed=t.checks_passed,
        checks_total=t.checks_total,
        input_tokens=t.input_tokens,
        generated_tokens=t.generated_tokens,
        prefill_tokens=t.prefill_tokens,
        model_work=t.model_work,
        wall_seconds=t.wall_seconds,
        tool_calls=t.tool_calls,
        input_change=row.input_change,
        work_change=row.work_change,
        failure=t.failure,
    )


def verdict_doc(result: ComparisonResult, verdict: Verdict) -> VerdictDoc:
    return VerdictDoc(
        winner=verdict.winner,
        sentence=verdict.sentence,
        headline=headline(result, verdict),
        rule=RULE,
        baseline=verdict.baseline,
        token_unit=result.token_unit,
        policies=tuple(_policy_verdict(r) for r in verdict.rows),
    )


def _prompt(prompt: PreparedPrompt) -> Prompt:
    return Prompt(
        phase=prompt.input.phase.value,
        tokens=prompt.token_count,
        text=prompt.rendered,
        notes=prompt.notes,
    )


def _usage(run: RunReport | None) -> dict[str, Any]:
    if run is None:
        return {
            "ran": False,
            "answer": "",
            **dict.fromkeys(("input_tokens", "generated_tokens", "prefill_tokens"), 0),
            **dict.fromkeys(("edit_calls", "keep_calls"), 0),
            "elapsed_seconds": 0.0,
            "attempts": (),
            "tool_calls": (),
            "prefetch_calls": (),
            "diff": "",
            "prompts": (),
        }
    return {
        "ran": True,
        "answer": run.answer,
        "input_tokens": run.total_input_tokens,
        "generated_tokens": run.total_generated_tokens,
        "prefill_tokens": run.total_prefill_tokens,
        "edit_calls": run.edit_call_count,
        "keep_calls": run.keep_call_count,
        "elapsed_seconds": run.elapsed_seconds,
        "attempts": tuple(
            Attempt(
                outcome=a.outcome.value,
                detail=a.detail,
                model_text=a.model_text,
                arguments=a.arguments,
            )
            for a in run.attempts
        ),
        "tool_calls": run.tool_steps,
        "prefetch_calls": run.prefetch_steps,
        "diff": run.diff,
        "prompts": tuple(_prompt(p) for p in run.calls),
    }


def step_doc(step: StepView) -> StepDoc:
    return StepDoc(
        step_id=step.step_id,
        context_passed=step.context_passed,
        answer_passed=step.answer_passed,
        failure=step.failure,
        context_problem=step.context_problem,
        answer_problem=step.answer_problem,
        expected=step.expected,
        retained=step.retained,
        prompt_before=step.prompt_before,
        prompt_after=step.prompt_after,
        **_usage(step.run),
    )


def policy_doc(outcome: PolicyOutcome) -> PolicyDoc:
    return PolicyDoc(
        name=outcome.policy.name,
        label=outcome.label,
        title=outcome.title,
        passed=outcome.passed,
        failure=outcome.failure,
        planned_steps=outcome.planned_steps,
        elapsed_seconds=outcome.elapsed_seconds,
        steps=tuple(step_doc(s) for s in outcome.steps),
    )


def run_doc(result: ComparisonResult) -> RunDoc:
    """The document for ``result``."""
    s = result.settings
    return RunDoc(
        task=s.task.value,
        title=result.title,
        settings=s,
        model=ModelInfo(
            id=result.model_id,
            label=result.model_label,
            engine=result.engine,
            token_unit=result.token_unit,
            details=result.model_details,
        ),
        decoding=Decoding(constrained=s.constrained, prefix_cache=s.prefix_cache),
        budget=result.budget,
        episode_tokens=result.episode_tokens,
        noise_lines=result.noise_lines,
        status=result.status,
        completed=result.completed,
        cancelled=result.cancelled,
        elapsed_seconds=result.elapsed_seconds,
        verdict=verdict_doc(result, result_verdict(result)),
        policies=tuple(policy_doc(o) for o in result.outcomes),
    )


def render_json(result: ComparisonResult) -> str:
    """The document as indented UTF-8 JSON text, newline-terminated."""
    return run_doc(result).model_dump_json(indent=2) + "\n"


def generate_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the document, generated from the models."""
    schema = RunDoc.model_json_schema(mode="serialization")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://picocontext.invalid/schemas/" + SCHEMA_FILENAME,
        "title": FORMAT,
        "description": (
            "One playground comparison run: settings, model, decoding, budgets, the verdict "
            "and, per policy, every step with every prompt dispatched to the model."
        ),
        **{k: v for k, v in schema.items() if k not in ("title", "description")},
    }


__all__ = [
    "FORMAT",
    "SCHEMA_FILENAME",
    "VERSION",
    "RunDoc",
    "generate_schema",
    "render_json",
    "run_doc",
]
