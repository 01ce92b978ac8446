"""The comparison behind **Run comparison** and the smoke modes, free of Qt.

Every selected policy runs the same task, in the order given (the append-only baseline first
by default), each in its own fresh session, with the same model, greedy sampling and budgets.
The result is one :class:`~picocontext_playground.results.PolicyOutcome` per policy in a
uniform shape — a list of graded steps — so the window renders N policy columns without knowing
which task produced them. Grading is the diagnostics package's; this module only orchestrates
and reshapes.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from picocontext import (
    Cancelled,
    CancelToken,
    ModelInput,
    Phase,
    PreparedPrompt,
    RunBudget,
    RunMode,
    RunReport,
    Scope,
    TokenCounter,
    ToolStep,
)
from picocontext.distill import DigestSnapshot
from picocontext.manifest import Manifest
from picocontext.models import GenerationProgress
from picocontext.policies import ContextPolicy, DistilledPolicy, NavigatedPolicy
from picocontext_diagnostics import (
    BUILTIN_POLICIES,
    DEFAULT_EPISODE_TOKENS,
    Episode,
    EpisodeReport,
    EpisodeRunner,
    StepReport,
    fixture_episode,
    order_lookup_episode,
    sequential_budget,
)
from picocontext_diagnostics.episodes.episode_runner import cold_cache, warm_backend
from picocontext_diagnostics.evaluation.journal import Journal
from picocontext_playground.model_loader import LoadedModel
from picocontext_playground.results import ComparisonResult, PolicyOutcome, StepView, policy_label
from picocontext_playground.sections import (
    Section,
    TextCounter,
    prompt_sections,
    utf8_bytes,
)
from picocontext_playground.settings import ComparisonSettings


class ComparisonEvents(Protocol):
    """What a running comparison reports. The Qt worker turns these into signals."""

    def status(self, text: str) -> None: ...

    def progress(self, done: int, total: int) -> None: ...

    def step(self, policy: str, step: StepView) -> None: ...

    def outcome(self, outcome: PolicyOutcome) -> None: ...


class PrintEvents:
    """Events for the headless mode: status and per-step lines go to ``write``."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write

    def status(self, text: str) -> None:
        self.write(text)

    def progress(self, done: int, total: int) -> None:
        return None

    def step(self, policy: str, step: StepView) -> None:
        self.write(step_line(policy, step))

    def outcome(self, outcome: PolicyOutcome) -> None:
        return None


def step_line(policy: str, step: StepView) -> str:
    """The per-step progress line (also printed by the smoke mode)."""
    context = "passed" if step.context_passed else "failed"
    answer = "passed" if step.answer_passed else "failed"
    line = f"{policy_label(policy)} · {step.step_id}: context {context}, answer {answer}"
    if step.failure:
        line += f" ({step.failure})"
    return line


def scaled(budget: RunBudget, factor: int) -> RunBudget:
    """``budget`` with every token amount multiplied (attempt count unchanged)."""
    return budget.scaled(factor)


RESULT_CLIP = 600


def clip_result(text: str, limit: int = RESULT_CLIP) -> str:
    """A tool result for display: the head, and how much more the prompt carried."""
    if len(text) <= limit:
        return text or "(empty result)"
    return f"{text[:limit]}… (+{len(text) - limit:,} more characters in the prompt)"


def no_decision_text(run: RunReport) -> str:
    """Why a turn has neither decision attempts nor tool calls."""
    if run.mode in (RunMode.NAVIGATED, RunMode.DISTILLED):
        return "no tool call: answered from what it was shown"
    if run.mode is RunMode.APPEND_ONLY:
        return "no decision call in this mode"
    return "no decision call"


def budgets_for(settings: ComparisonSettings, scale: int) -> tuple[RunBudget, int | None]:
    """Sequential tasks: 4,096 window, 24,000 per turn, 4 decisions of 1,024, 512 for the
    answer, 80,000 per episode; the order lookup: the core defaults. Times ``scale``."""
    if settings.task.sequential:
        return scaled(sequential_budget(), scale), DEFAULT_EPISODE_TOKENS * scale
    return scaled(RunBudget(), scale), None


def task_episode(settings: ComparisonSettings) -> Episode:
    """The episode behind the selected task (the order lookup is a one-step episode)."""
    scenario = settings.task.scenario
    if scenario is None:
        return order_lookup_episode()
    return fixture_episode(scenario, noise_lines=settings.noise_lines)


def text_counter(model: LoadedModel) -> TextCounter:
    """Counts text in the model's unit: its tokenizer for a real model, UTF-8 bytes for the
    scripted one."""
    count = getattr(model.raw, "count_tokens", None)
    if callable(count):
        return lambda text: int(count(text))
    return utf8_bytes


def measured_step(
    report: StepReport, counter: TokenCounter, count: TextCounter, budget: RunBudget
) -> StepView:
    """The graded step plus its next input by section. A step whose prompt was refused for
    the window shows the prompt of its working context at the start of the turn: the one the
    policy had to send and could not."""
    view = StepView.from_step_report(report)
    run = report.run
    if run is None:
        return view
    reserved = budget.completion_output_tokens
    prompt = run.final_prompt
    rejected: PreparedPrompt | None = None
    if prompt is None and run.run_start_prompt_tokens + reserved > budget.context_window:
        rejected = counter.prepare(ModelInput(context=run.run_start, phase=Phase.COMPLETION))
        prompt = rejected
    if prompt is None:
        return view
    return view.model_copy(
        update={
            "sections": prompt_sections(prompt, count, reserved),
            "rejected_prompt": rejected,
            "context_window": budget.context_window,
        }
    )


def step_artefacts(
    policy: ContextPolicy, scope: Scope
) -> tuple[Manifest | None, DigestSnapshot | None]:
    """The manifest a navigated turn compiled, or the digest tree a distilled turn left."""
    if isinstance(policy, NavigatedPolicy):
        turns = policy.turns(scope)
        return (turns[-1].manifest if turns else None), None
    if isinstance(policy, DistilledPolicy):
        return None, policy.distiller(scope).snapshot()
    return None, None


def _status(settings: ComparisonSettings, steps: int, label: str, index: int, count: int) -> str:
    if settings.task.sequential:
        return f"Running {steps} incoming updates with {label} context (policy {index} of {count})…"
    return f"Running the order lookup with {label} context ({index} of {count})…"


def _episode_outcome(report: EpisodeReport, steps: Sequence[StepView]) -> PolicyOutcome:
    return PolicyOutcome(
        policy=report.policy,
        title=report.title,
        steps=tuple(steps),
        planned_steps=report.planned_steps,
        original=report.original,
        revised=report.revised,
        failure=report.failure,
        elapsed_seconds=report.elapsed_seconds,
    )


# The core's failure messages are exact and short; a person comparing policies reads these.
_PLAIN = {
    "Token budget exceeded: input plus reserved output exceeds the context window": (
        "the prompt plus the room kept for the answer no longer fit in the context window"
    ),
    "Token budget exceeded: completion hit its output limit": (
        "the answer ran into its length limit before the model finished it"
    ),
    "Token budget exceeded: edit generation hit its output limit": (
        "a decision ran into its length limit before the model finished it"
    ),
    "Token budget exceeded: tool step hit its output limit": (
        "a tool call ran into its length limit before the model finished it"
    ),
    "Token budget exceeded: total input/output allowance cannot reserve the next completion": (
        "the turn's token allowance was used up before the answer"
    ),
    "Token budget exceeded: total input/output allowance cannot reserve the summary": (
        "the turn's token allowance was used up before the summary"
    ),
    "Token budget exceeded: episode token allowance exhausted": (
        "the episode's token allowance was used up"
    ),
    "The bounded edit/recovery limit was reached": (
        "the model made no valid edit or keep decision within the allowed attempts"
    ),
}


def plain_failure(text: str) -> str:
    """A failure in plain words (the exact message in parentheses), or ``text`` unchanged
    when it is not one of the core's budget or attempt messages."""
    key = text.rstrip(".")
    plain = _PLAIN.get(key)
    if plain is None:
        return text
    return f"{plain[:1].upper()}{plain[1:]} ({key[:1].lower()}{key[1:]})."


def _final_status(outcomes: list[PolicyOutcome]) -> str:
    """What finished; who won and why is the verdict's sentence, which follows it."""
    failed = [o for o in outcomes if not o.passed]
    if not failed:
        return "Finished. Every policy passed every check."
    names = ", ".join(o.label for o in failed)
    first = next((o.failure for o in failed if o.failure), None)
    tail = f" First failure: {plain_failure(first)}" if first else ""
    return f"Finished. Failed checks in: {names}.{tail}"


def run_comparison(
    settings: ComparisonSettings,
    model: LoadedModel,
    events: ComparisonEvents,
    cancel: CancelToken | None = None,
    journal: Journal[PolicyOutcome] | None = None,
) -> ComparisonResult:
    """Run every selected policy in order. Setup problems raise; a failed check does not.
    Cancellation is not an error either: the result says ``cancelled`` and keeps the policies
    that finished. With a ``journal`` each finished policy is appended to it, a policy it
    already holds is reused instead of run (:mod:`picocontext_playground.resume`), and a run
    that finishes deletes it."""
    token = cancel or CancelToken()
    started = time.perf_counter()
    budget, episode_tokens = budgets_for(settings, model.budget_scale)
    policies = [BUILTIN_POLICIES[name] for name in settings.policies]
    outcomes: list[PolicyOutcome] = []
    episode = task_episode(settings)
    total = len(episode.steps) * len(policies)
    runner = EpisodeRunner(model.counter, model.backend)
    count = text_counter(model)
    done = 0
    status = ""
    cancelled = False
    warmed = False
    events.progress(0, total)
    try:
        for index, policy in enumerate(policies, start=1):
            token.check()
            kept = journal.results.get(policy.name) if journal is not None else None
            if kept is not None:
                events.status(
                    f"Reusing {policy_label(policy.name)} from the interrupted run "
                    f"(policy {index} of {len(policies)})"
                )
                outcome = kept
                for view in outcome.steps:
                    events.step(policy.name, view)
                done = index * len(episode.steps)
                events.progress(done, total)
                outcomes.append(outcome)
                events.outcome(outcome)
                continue
            if not warmed:  # nor pays the engine's one-time costs for the others
                warm_backend(model.raw)
                warmed = True
            cold_cache(model.raw)  # no policy profits from another's prompts
            status = _status(
                settings, len(episode.steps), policy_label(policy.name), index, len(policies)
            )
            events.status(status)

            measured: dict[str, StepView] = {}

            def measure(report: StepReport, seen: dict[str, StepView] = measured) -> StepView:
                view = seen.get(report.step.id)
                if view is None:
                    view = measured_step(report, model.counter, count, budget)
                    seen[report.step.id] = view
                return view

            def on_turn(
                report: StepReport,
                instance: ContextPolicy,
                scope: Scope,
                seen: dict[str, StepView] = measured,
                name: str = policy.name,
            ) -> None:
                manifest, digest = step_artefacts(instance, scope)
                view = seen[report.step.id]
                if manifest is not None or digest is not None:
                    view = view.model_copy(update={"manifest": manifest, "digest": digest})
                    seen[report.step.id] = view
                events.step(name, view)

            def on_step(
                report: StepReport,
                name: str = policy.name,
                measure: Callable[[StepReport], StepView] = measure,
            ) -> None:
                nonlocal done
                done += 1
                view = measure(report)
                if report.run is None:  # no turn ran, so on_turn will not announce it
                    events.step(name, view)
                events.progress(done, total)

            report = runner.run(
                episode,
                policy,
                budget,
                episode_tokens or budget.total_tokens,
                on_step=on_step,
                cancel=token,
                on_turn=on_turn,
            )
            # Steps after a failure never run; count them as done for the progress bar.
            done = index * len(episode.steps)
            events.progress(done, total)
            outcome = _episode_outcome(report, [measure(s) for s in report.steps])
            if journal is not None:
                journal.append(outcome)
            outcomes.append(outcome)
            events.outcome(outcome)
        status = _final_status(outcomes)
        if journal is not None:
            journal.discard()
    except Cancelled:
        cancelled = True
        finished = ", ".join(o.label for o in outcomes) or "none"
        status = f"Stopped. Finished policies: {finished}."
        if journal is not None and outcomes:
            status += " Resume runs only the rest."
    finally:
        if journal is not None:
            journal.close()
    events.status(status)
    return ComparisonResult(
        settings=settings,
        title=episode.title,
        model_id=model.model_id,
        model_label=model.label,
        engine=model.kind,
        token_unit=model.token_unit,
        model_details=model.details,
        budget=budget,
        episode_tokens=episode_tokens,
        noise_lines=episode.noise_lines if settings.task.sequential else None,
        outcomes=tuple(outcomes),
        status=status,
        cancelled=cancelled,
        elapsed_seconds=time.perf_counter() - started,
    )


def _clock(seconds: float) -> str:
    whole = max(0, round(seconds))
    return f"{whole // 60}:{whole % 60:02d}"


def generation_line(policy: str, step: int, steps: int, progress: GenerationProgress) -> str:
    """The live line under the progress bar while a real model works: which policy and step,
    prefill or tokens generated against the cap, the rate, the time spent and, at the current
    rate, the longest the rest of this call can take."""
    head = f"{policy_label(policy)} · step {step} of {steps}"
    if progress.phase == "prefill":
        return (
            f"{head} · reading the prompt: {progress.prefilled:,} of "
            f"{progress.prefill_total:,} tokens · {_clock(progress.elapsed)} elapsed"
        )
    parts = [head, f"generated {progress.generated:,} of at most {progress.max_tokens:,} tokens"]
    rate = progress.tokens_per_second
    if rate is not None:
        parts.append(f"{rate:.1f} tokens/s")
    parts.append(f"{_clock(progress.elapsed)} elapsed")
    left = progress.seconds_left_at_most
    if progress.phase == "decode" and left is not None:
        parts.append(f"at most {_clock(left)} left in this call")
    return " · ".join(parts)


_DIGITS = re.compile(r"\d+")
REPEAT_MIN = 4


def group_repeats(text: str, minimum: int = REPEAT_MIN) -> str:
    """Runs of ``minimum`` or more lines that are the same, or the same but for their numbers,
    shown as the first and last line with a count between them, so a diff of noise lines
    reads as what it is."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        shape = _DIGITS.sub("#", lines[i])
        j = i + 1
        while j < len(lines) and _DIGITS.sub("#", lines[j]) == shape:
            j += 1
        run = j - i
        if run >= minimum and lines[i].strip():
            same = all(line == lines[i] for line in lines[i:j])
            kind = "identical lines" if same else "lines alike (only numbers differ)"
            out += [lines[i], f"    \u22ee \u00d7 {run - 2:,} more {kind}", lines[j - 1]]
        else:
            out += lines[i:j]
        i = j
    return "\n".join(out)


def rejected_text(step: StepView, unit: str) -> str:
    """Why a step sent no prompt, with the numbers of the window check."""
    prompt = step.rejected_prompt
    if prompt is None or step.context_window is None:
        return ""
    reserved = sum(s.amount for s in step.sections if s.section is Section.RESERVED)
    return (
        f"Did not fit: the working context at the start of the turn renders to "
        f"{prompt.token_count:,} {unit}; with {reserved:,} reserved for the answer that is "
        f"{prompt.token_count + reserved:,}, over the {step.context_window:,} window by "
        f"{step.over_window_by or 0:,}. That prompt is shown below; none was sent."
    )


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    return []


def used_nodes(step: StepView) -> dict[str, list[str]]:
    """Every id-like argument of the step's tool calls → the verbs that named it, in order
    (``{"turn-1": ["open", "close"]}``; a call prefetched for the model reads
    ``"prefetched open"``); what is not a node of the artefact is ignored by the tab that
    highlights them."""
    used: dict[str, list[str]] = {}
    run = step.run
    calls: list[tuple[str, ToolStep]] = []
    if run is not None:
        calls.extend((f"prefetched {c.name}", c) for c in run.prefetch_steps)
        calls.extend((c.name, c) for c in run.tool_steps)
    for verb, call in calls:
        try:
            arguments = json.loads(call.arguments) if call.arguments else {}
        except ValueError:
            continue
        for name in _strings(arguments):
            verbs = used.setdefault(name, [])
            if verb not in verbs:
                verbs.append(verb)
    return used
