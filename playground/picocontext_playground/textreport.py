"""The plain-text report the smoke modes write (and the window can save).

It opens with the verdict — the sentence and the ranked table — so the conclusion comes first;
then everything a reader needs to audit a run without the app: model and settings, budgets, one
summary per policy, then for every step the expected and retained notebook, the answer, every
decision attempt with the model's own output and arguments, the diff, and the exact next input
the model received. Nothing is shortened.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from picocontext import Record, RunReport, Snapshot, check_output_file
from picocontext_diagnostics.verdict import Verdict
from picocontext_playground.comparison import clip_result, no_decision_text
from picocontext_playground.results import (
    ComparisonResult,
    PolicyOutcome,
    StepView,
    choice_line,
    choices_text,
    prefetch_text,
    tool_calls_text,
)
from picocontext_playground.runverdict import headline, result_verdict, table

RULE = "=" * 78


def facts_text(facts: dict[str, str]) -> str:
    """Sorted compact JSON, so reports are stable and values are shown exactly."""
    return json.dumps(dict(sorted(facts.items())), ensure_ascii=False)


def tokens_text(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def budget_lines(result: ComparisonResult) -> list[str]:
    b = result.budget
    line = (
        f"Budget per turn: window {b.context_window:,}; total {b.total_tokens:,}; "
        f"decision {b.max_edit_attempts} x {b.edit_output_tokens:,}; "
        f"answer {b.completion_output_tokens:,}"
    )
    out = [line + f" ({result.token_unit})"]
    if result.episode_tokens is not None:
        out.append(f"Episode allowance: {result.episode_tokens:,}")
    if result.noise_lines is not None:
        out.append(f"Noise lines per update: {result.noise_lines}")
    return out


def summary_block(outcome: PolicyOutcome) -> list[str]:
    state = outcome.failure or ("completed" if len(outcome.steps) else "no steps ran")
    n = outcome.planned_steps
    lines = [
        f"{outcome.title} · {outcome.label}: {state}",
        f"  Checks passed: context {outcome.context_passed}/{n}; "
        f"answers {outcome.answers_passed}/{n}",
        f"  Prompt: {tokens_text(outcome.prompt_before)} -> {tokens_text(outcome.prompt_after)}",
        f"  Total input {outcome.total_input:,}; generated {outcome.total_generated:,}; "
        f"prefill computed {outcome.total_prefill:,}; {outcome.calls_text.replace(' · ', '; ')}; "
        f"elapsed {outcome.elapsed_seconds:.3f} s",
    ]
    for step in outcome.steps:
        run = step.run
        edits = run.edit_call_count if run else 0
        keeps = run.keep_call_count if run else 0
        line = (
            f"  {step.step_id}: context={'passed' if step.context_passed else 'FAILED'}, "
            f"answer={'passed' if step.answer_passed else 'FAILED'}, "
            f"prompt={tokens_text(step.prompt_before)}->{tokens_text(step.prompt_after)}, "
            f"edits={edits}, keeps={keeps}"
        )
        if run is not None and run.tool_steps:
            line += f", tools={len(run.tool_steps)}"
        if step.failure:
            line += f", failure={step.failure}"
        lines.append(line)
    missing = outcome.planned_steps - len(outcome.steps)
    if missing > 0:
        lines.append(f"  ({missing} later step(s) did not run after the failure)")
    return lines


def attempts_lines(run: RunReport) -> list[str]:
    return [*prefetch_lines(run), *_own_lines(run)]


def prefetch_lines(run: RunReport) -> list[str]:
    """The calls the runtime made for the model before it read (none for most policies)."""
    if not run.prefetch_steps:
        return []
    lines = [f"Before the model read: {prefetch_text(run.prefetch_steps)} (charged)"]
    for i, step in enumerate(run.prefetch_steps, start=1):
        lines += [f"Prefetch {i}: {step.name} {step.arguments}", clip_result(step.result)]
    return lines


def _own_lines(run: RunReport) -> list[str]:
    if run.tool_steps:
        lines = [f"Tool steps: {tool_calls_text(run.tool_steps)}"]
        for i, step in enumerate(run.tool_steps, start=1):
            lines += [
                f"Call {i}: {step.name} {step.arguments} -> {'ok' if step.ok else 'refused'}",
                clip_result(step.result),
            ]
        return lines
    if not run.attempts:
        return [f"Attempts: none ({no_decision_text(run)})"]
    lines = [f"Attempts: {len(run.attempts)}"]
    for i, attempt in enumerate(run.attempts, start=1):
        lines += [
            f"Attempt {i}: {attempt.outcome.value} — {attempt.detail}",
            "MODEL OUTPUT",
            attempt.model_text if attempt.model_text else "(no text; tool call only)",
            "ARGUMENTS",
            attempt.arguments if attempt.arguments else "(none)",
        ]
    if run.choices:
        lines += [f"WHY ({choices_text(run.choices)})", *(choice_line(c) for c in run.choices)]
    return lines


def step_block(step: StepView) -> list[str]:
    lines = [
        f"--- {step.step_id}",
        f"Expected: {facts_text(step.expected)}",
        f"Retained: {facts_text(step.retained)}",
        f"Context check: {'passed' if step.context_passed else 'FAILED'}"
        + (f" ({step.context_problem})" if step.context_problem else ""),
    ]
    run = step.run
    if run is None:
        lines.append(f"No turn ran: {step.failure}")
        return lines
    lines.append(f"Answer: {run.answer}" if run.answer else "Answer: (none)")
    answer_problem = None if step.failure else step.answer_problem
    lines.append(
        f"Answer check: {'passed' if step.answer_passed else 'FAILED'}"
        + (f" ({answer_problem})" if answer_problem else "")
    )
    if step.failure:
        lines.append(f"Failure: {step.failure}")
    lines.append(
        f"Usage: input {run.total_input_tokens:,}; generated {run.total_generated_tokens:,}; "
        f"prefill computed {run.total_prefill_tokens:,}; calls {len(run.calls)}; "
        f"elapsed {run.elapsed_seconds:.3f} s"
    )
    lines += attempts_lines(run)
    lines += ["DIFF", run.diff or "(no edit committed)"]
    if run.final_prompt is None:
        lines += ["EXACT NEXT INPUT", "(no completion call was made)"]
    else:
        lines += [
            f"EXACT NEXT INPUT ({run.final_prompt.token_count:,} tokens)",
            run.final_prompt.rendered,
        ]
    return lines


def record_header(record: Record, *, role_first: bool = False) -> str:
    """``id · role · protected · result for X · calls f(id)``: how a record is labelled in
    the report and in the window (which puts the role first)."""
    first = [record.role.value, record.id] if role_first else [record.id, record.role.value]
    parts = list(first)
    if record.protected:
        parts.append("protected")
    if record.tool_call_id:
        parts.append(f"result for {record.tool_call_id}")
    if record.tool_calls:
        parts.append("calls " + ", ".join(f"{c.name}({c.id})" for c in record.tool_calls))
    return " · ".join(parts)


def context_lines(title: str, snapshot: Snapshot) -> list[str]:
    lines = [f"{title} · revision {snapshot.revision} · {len(snapshot.records)} records"]
    for record in snapshot.records:
        body = record.body if record.body else "(empty body)"
        lines += [f"[{record_header(record)}]", body]
    return lines


def verdict_lines(verdict: Verdict) -> list[str]:
    """The ranked verdict table as aligned plain-text columns."""
    headers, rows = table(verdict)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    last = len(headers) - 1

    def line(cells: tuple[str, ...]) -> str:
        parts = [c if i == last else c.ljust(widths[i]) for i, c in enumerate(cells)]
        return "  " + "  ".join(parts).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def render_report(result: ComparisonResult) -> str:
    """The whole report as text (UTF-8, newline-terminated)."""
    verdict = result_verdict(result)
    lines = [
        "PicoContext playground report",
        f"Task: {result.title}",
        f"Verdict: {headline(result, verdict)}",
        "",
        f"VERDICT · winner: {verdict.winner or 'none'} · counts in {result.token_unit}",
        *verdict_lines(verdict),
        "",
        f"Model: {result.model_label} ({result.model_id})",
        f"Engine: {result.engine_label}",
        f"Token unit: {result.token_unit}",
        *[f"Model note: {d}" for d in result.model_details],
        f"Settings: {result.settings.describe()}",
        *budget_lines(result),
        f"Status: {result.status}",
        f"Run: {'stopped before the end' if result.cancelled else 'completed'} "
        f"in {result.elapsed_seconds:.3f} s",
        "",
        "SUMMARY",
    ]
    for outcome in result.outcomes:
        lines += [*summary_block(outcome), ""]
    for outcome in result.outcomes:
        lines += [RULE, f"POLICY {outcome.label} ({outcome.policy.name})", RULE]
        for step in outcome.steps:
            lines += [*step_block(step), ""]
        lines += [*context_lines("WORKING CONTEXT", outcome.revised), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def write_atomically(path: Path, data: bytes) -> None:
    """Write to a temporary file beside ``path`` and rename it over, so a reader never sees a
    half-written report or image. Only a regular file is ever replaced: renaming over a FIFO
    or a device (``/dev/zero`` given as a path, run as root) would destroy it."""
    path = check_output_file(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; reports are ordinary files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
