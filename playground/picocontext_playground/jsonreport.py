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

from picocontext import Choice, PreparedPrompt, RunBudget, RunReport, ToolStep
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
    """The model as loaded (a hub id, a directory or the stand-in's id)."""
    label: str
    """The model as the window and the text report name it."""
    engine: str
    """What ran the model: ``mlx``, ``llamacpp``, ``openai`` or ``scripted``."""
    token_unit: str
    """The unit of every size and token count in the document: ``model tokens``, or
    ``UTF-8 bytes (not model tokens)`` for the scripted stand-in."""
    details: tuple[str, ...]
    """Lines about the model (sampling, load time in seconds, notes)."""


class Decoding(BaseModel):
    """Sampling is greedy for every policy; structured decoding and the prefix cache are
    settings (they apply to real models only)."""

    model_config = _FROZEN
    sampling: Literal["greedy"] = "greedy"
    """Always ``greedy`` (temperature 0), for every policy."""
    constrained: bool
    """Protocol actions were decoded under a grammar (real models only)."""
    prefix_cache: bool
    """The KV cache of the previous prompt was reused (real models only)."""


class PolicyVerdict(BaseModel):
    """One policy's totals and its place in the ranking."""

    model_config = _FROZEN
    rank: int
    """1-based place in the ranking: passing policies first, then by share of checks
    passed, least ``model_work``, least input, name."""
    name: str
    """The policy's registry name (``append-only``, ``editable``, …)."""
    label: str
    """The policy as the window names it."""
    passed: bool
    """Every check passed and every planned step ran."""
    checks_passed: int
    """Checks passed: two per step that ran (retained context, answer)."""
    checks_total: int
    """Checks planned: two per planned step."""
    input_tokens: int
    """Prompt tokens sent over every model call, in ``token_unit``."""
    generated_tokens: int
    """Tokens the model generated, in ``token_unit``."""
    prefill_tokens: int
    """Prompt tokens the model actually computed (the rest came from the prefix
    cache), in ``token_unit``."""
    model_work: int
    """``prefill_tokens + generated_tokens``, in ``token_unit``: the quantity the winner is
    decided on."""
    wall_seconds: float
    """Wall time of the policy's episode, in seconds."""
    tool_calls: int
    """Navigation or digest tool calls the model made (0 for editing policies)."""
    input_change: float | None
    """``input_tokens`` against the baseline's, as a fraction (``0.47`` = 47 % more);
    ``null`` for the baseline itself or without one."""
    work_change: float | None
    """``model_work`` against the baseline's, as a fraction, like ``input_change``."""
    failure: str | None
    """The failure that ended the policy early; ``null`` when every step ran."""


class VerdictDoc(BaseModel):
    model_config = _FROZEN
    winner: str | None
    """The winning policy's name; ``null`` when no policy passed every check."""
    sentence: str
    """The verdict in one sentence (who won and why, or what failed)."""
    headline: str
    """The line the window's status shows after the run."""
    rule: str
    """How the winner is chosen, in words (the same for every run)."""
    baseline: str | None
    """The policy the changes are measured against (``append-only``), if it ran."""
    token_unit: str
    """The unit of the token counts below (as ``model.token_unit``)."""
    policies: tuple[PolicyVerdict, ...]
    """One row per policy, in ranking order."""


class Prompt(BaseModel):
    """A prompt as the model consumed it: the decode of the exact token ids."""

    model_config = _FROZEN
    phase: str
    """What the call was for: ``edit``, ``choice``, ``tools`` or ``completion``."""
    tokens: int
    """The prompt's size, in ``token_unit``."""
    text: str
    """The prompt exactly as the model consumed it (the decode of its token ids)."""
    notes: tuple[str, ...]
    """How the prompt was rendered (for example, a tool block we rendered because the
    template cannot)."""


class Attempt(BaseModel):
    model_config = _FROZEN
    outcome: str
    """What the runtime made of the decision: ``edited``, ``kept`` or ``rejected``."""
    detail: str
    """The runtime's reason for that outcome, in words."""
    model_text: str
    """What the model generated, verbatim."""
    arguments: str
    """The decision call's arguments as the model sent them (JSON text)."""


class StepDoc(BaseModel):
    model_config = _FROZEN
    step_id: str
    """The episode step's id (``step-1``, …)."""
    context_passed: bool
    """Every fact the step expects was found in the working context."""
    answer_passed: bool
    """The model's answer passed the step's answer check."""
    failure: str | None
    """The core's failure message when the turn failed (a budget, the attempt limit)."""
    context_problem: str | None
    """What the context check found wrong; ``null`` when it passed."""
    answer_problem: str | None
    """What the answer check found wrong; ``null`` when it passed."""
    expected: dict[str, str]
    """The facts the context check expects, key → value."""
    retained: dict[str, str]
    """The facts found in the working context after the step, key → value."""
    ran: bool
    """A turn ran for the step (when ``false``, the usage fields below are zero)."""
    answer: str
    """The model's final answer (empty when no turn ran)."""
    prompt_before: int | None
    """The completion prompt of the working context when the turn started,
    in ``token_unit``."""
    prompt_after: int | None
    """The exact next input (the completion prompt) the turn built, in ``token_unit``;
    ``null`` when none was built."""
    input_tokens: int
    """Prompt tokens sent over the turn's model calls, in ``token_unit``."""
    generated_tokens: int
    """Tokens generated over the turn's model calls, in ``token_unit``."""
    prefill_tokens: int
    """Prompt tokens actually computed (the rest came from the prefix cache),
    in ``token_unit``."""
    elapsed_seconds: float
    """Wall time of the turn, in seconds."""
    edit_calls: int
    """Decision calls that asked for an edit (committed or refused)."""
    keep_calls: int
    """Decision calls that kept the context as it was."""
    attempts: tuple[Attempt, ...]
    """Every decision attempt of the turn, in order."""
    tool_calls: tuple[ToolStep, ...]
    """Every navigation or digest tool call the model made, in order."""
    prefetch_calls: tuple[ToolStep, ...] = ()
    """What the policy's runtime called for the model before its first step
    (charged to the same budget; not the model's own calls)."""
    choices: tuple[Choice, ...] = ()
    """The incremental decision's questions, in order, each with what decided it (empty
    for other decisions)."""
    diff: str
    """What the turn deleted or replaced in the working context, against the transcript."""
    prompts: tuple[Prompt, ...]
    """Every prompt dispatched to the model during the turn, in order."""


class PolicyDoc(BaseModel):
    model_config = _FROZEN
    name: str
    """The policy's registry name."""
    label: str
    """The policy as the window names it."""
    title: str
    """The episode's title."""
    passed: bool
    """Every check passed and every planned step ran."""
    failure: str | None
    """The failure that ended the policy early; ``null`` when every step ran."""
    planned_steps: int
    """How many steps the episode has."""
    elapsed_seconds: float
    """Wall time of the policy's episode, in seconds."""
    steps: tuple[StepDoc, ...]
    """Every step that ran, in order (the steps after a failure are absent)."""


class RunDoc(BaseModel):
    """The document's root."""

    model_config = _FROZEN
    format: Literal["picocontext-playground-report"] = FORMAT
    """Always ``picocontext-playground-report``."""
    version: Literal[1] = VERSION
    """The format's version (1)."""
    task: str
    """The task's value (``order-lookup``, ``retention``, …)."""
    title: str
    """The episode's title."""
    settings: ComparisonSettings
    """What was asked for: task, pressure, policies, model, engine, decoding."""
    model: ModelInfo
    """The model and the engine that ran it."""
    decoding: Decoding
    """Sampling and decoding options (the same for every policy)."""
    budget: RunBudget
    """Every policy's per-turn budgets, in ``token_unit`` (scaled for a byte counter)."""
    episode_tokens: int | None
    """The allowance of each policy's whole episode, in ``token_unit``; ``null`` for the
    one-step order lookup."""
    noise_lines: int | None
    """Noise lines in each incoming update (more under context pressure); ``null`` for the
    order lookup."""
    status: str
    """The run's last status line."""
    completed: bool
    """Every selected policy finished and the run was not stopped."""
    cancelled: bool
    """The run was stopped before every policy finished."""
    elapsed_seconds: float
    """Wall time of the whole comparison, in seconds (model load excluded)."""
    verdict: VerdictDoc
    """Who won, why, and the totals it was decided on."""
    policies: tuple[PolicyDoc, ...]
    """One entry per finished policy, in the order run."""


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
            "choices": (),
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
        "choices": run.choices,
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
