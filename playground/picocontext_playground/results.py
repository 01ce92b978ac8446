"""What a comparison produced: one :class:`StepView` per graded step, one
:class:`PolicyOutcome` per policy and the :class:`ComparisonResult` around them.

These are the results the window renders, the reports are written from and the resume journal
stores, so every field says what it holds and in which unit. The order of the policies and how
they ran is :mod:`picocontext_playground.comparison`'s; here is only their shape, free of Qt.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from picocontext import Choice, PreparedPrompt, RunBudget, RunReport, Snapshot, ToolStep
from picocontext.distill import DigestSnapshot
from picocontext.manifest import Manifest
from picocontext_diagnostics import Policy, StepReport
from picocontext_playground.sections import Section, SectionSize
from picocontext_playground.settings import ComparisonSettings, engine_label

_FROZEN = ConfigDict(frozen=True, extra="forbid")

_LABELS = {"append-only": "Append-only", "editable": "Editable", "summarize": "Summarize"}


def policy_label(name: str) -> str:
    """Human name of a policy column (``append-only`` → ``Append-only``)."""
    return _LABELS.get(name, name.replace("-", " ").capitalize())


class StepView(BaseModel):
    """One graded step of one policy (the order lookup is a single step). Every size is in
    the run's token unit (:attr:`ComparisonResult.token_unit`): model tokens, or UTF-8 bytes
    for the scripted stand-in."""

    model_config = _FROZEN
    step_id: str
    """The episode step's id (``step-1``, …)."""
    run: RunReport | None
    """The core's report of the step's turn; ``None`` when no turn ran for the step."""
    expected: dict[str, str]
    """The facts the step's context check expects, key → value."""
    retained: dict[str, str]
    """The facts the grader found in the working context after the step, key → value."""
    context_passed: bool
    """Every expected fact was retained."""
    answer_passed: bool
    """The model's answer passed the step's answer check."""
    failure: str | None = None
    """The core's failure message when the turn failed (a budget, the attempt limit)."""
    context_problem: str | None = None
    """What the context check found wrong, in words; ``None`` when it passed."""
    answer_problem: str | None = None
    """What the answer check found wrong, in words; ``None`` when it passed."""
    sections: tuple[SectionSize, ...] = ()
    """The exact next input by section, reserved output last, in the token unit; for a step
    whose prompt did not fit, the sections of that rejected prompt."""
    rejected_prompt: PreparedPrompt | None = None
    """The completion prompt the policy had to send and could not (it did not fit the
    window), rendered and counted; ``None`` when the step's prompt fitted."""
    context_window: int | None = None
    """The model's context window in the token unit, set together with :attr:`sections`."""
    manifest: Manifest | None = Field(default=None, exclude=True)
    """The manifest a navigated step compiled, for "Open in Manifest" (kept out of
    serialised reports: it is large and rebuilt by rerunning the step)."""
    digest: DigestSnapshot | None = Field(default=None, exclude=True)
    """The digest tree a distilled step left, for "Open in Digest" (not serialised either)."""

    @property
    def over_window_by(self) -> int | None:
        """How far the rejected prompt plus the reserved output exceeded the window."""
        if self.rejected_prompt is None or self.context_window is None:
            return None
        reserved = sum(s.amount for s in self.sections if s.section is Section.RESERVED)
        return self.rejected_prompt.token_count + reserved - self.context_window

    @property
    def prompt_before(self) -> int | None:
        """Completion prompt size of the working context when the turn started."""
        return self.run.run_start_prompt_tokens if self.run else None

    @property
    def prompt_after(self) -> int | None:
        """Size of the exact next input (the completion prompt), if one was built."""
        if self.run is None or self.run.final_prompt is None:
            return None
        return self.run.final_prompt.token_count

    @classmethod
    def from_step_report(cls, report: StepReport) -> StepView:
        return cls(
            step_id=report.step.id,
            run=report.run,
            expected=dict(report.step.expected_facts),
            retained=dict(report.retained_facts),
            context_passed=report.retained_correct,
            answer_passed=report.answer_correct,
            failure=report.failure,
            context_problem=report.context_problem,
            answer_problem=report.answer_problem,
        )


class PolicyOutcome(BaseModel):
    """Everything one policy did in a comparison. Its token totals are in the run's token
    unit (:attr:`ComparisonResult.token_unit`)."""

    model_config = _FROZEN
    policy: Policy
    """The policy as the diagnostics registry defines it (name, config, description)."""
    title: str
    """The episode's title."""
    steps: tuple[StepView, ...]
    """Every step that ran, in order; the steps after a failure never run and are absent."""
    planned_steps: int
    """How many steps the episode has (``len(steps)`` when the policy ran them all)."""
    original: Snapshot
    """The original transcript after the last step that ran (never edited)."""
    revised: Snapshot
    """The working context after the last step that ran (what the policy kept)."""
    failure: str | None
    """The failure that ended the policy's run early; ``None`` when every step ran."""
    elapsed_seconds: float
    """Wall time of the policy's whole episode, in seconds (model load excluded)."""

    @property
    def label(self) -> str:
        return policy_label(self.policy.name)

    @property
    def context_passed(self) -> int:
        return sum(s.context_passed for s in self.steps)

    @property
    def answers_passed(self) -> int:
        return sum(s.answer_passed for s in self.steps)

    @property
    def passed(self) -> bool:
        return (
            self.failure is None
            and len(self.steps) == self.planned_steps
            and all(s.context_passed and s.answer_passed for s in self.steps)
        )

    def _runs(self) -> list[RunReport]:
        return [s.run for s in self.steps if s.run is not None]

    @property
    def total_input(self) -> int:
        return sum(r.total_input_tokens for r in self._runs())

    @property
    def total_generated(self) -> int:
        return sum(r.total_generated_tokens for r in self._runs())

    @property
    def total_prefill(self) -> int:
        return sum(r.total_prefill_tokens for r in self._runs())

    @property
    def edit_calls(self) -> int:
        return sum(r.edit_call_count for r in self._runs())

    @property
    def keep_calls(self) -> int:
        return sum(r.keep_call_count for r in self._runs())

    @property
    def tool_steps(self) -> tuple[ToolStep, ...]:
        """Every navigation / digest tool call of the tool-using policies, in order."""
        return tuple(t for r in self._runs() for t in r.tool_steps)

    @property
    def prefetch_steps(self) -> tuple[ToolStep, ...]:
        """Every call a navigated policy's runtime made for the model before it read, in
        order (charged to its reading budget; not the model's calls)."""
        return tuple(t for r in self._runs() for t in r.prefetch_steps)

    @property
    def calls_text(self) -> str:
        """``edit calls 1 · keep calls 0`` or, for tool-using policies, the verbs used (and
        what was prefetched for the model, when anything was)."""
        if self.prefetch_steps:
            return f"{tool_calls_text(self.tool_steps)} · {prefetch_text(self.prefetch_steps)}"
        if self.tool_steps:
            return tool_calls_text(self.tool_steps)
        return f"edit calls {self.edit_calls} · keep calls {self.keep_calls}"

    @property
    def prompt_before(self) -> int | None:
        """First turn's starting prompt."""
        return self.steps[0].prompt_before if self.steps else None

    @property
    def prompt_after(self) -> int | None:
        """The last exact next input that was built."""
        for step in reversed(self.steps):
            if step.prompt_after is not None:
                return step.prompt_after
        return None

    @property
    def last_run(self) -> RunReport | None:
        runs = self._runs()
        return runs[-1] if runs else None


class ComparisonResult(BaseModel):
    """A finished (or stopped) comparison: settings, model, budgets and one outcome per policy."""

    model_config = _FROZEN
    settings: ComparisonSettings
    """What was asked for: task, pressure, policies, model, engine, decoding."""
    title: str
    """The episode's title."""
    model_id: str
    """The model as loaded (a hub id, a directory or the stand-in's id)."""
    model_label: str
    """The model as windows and reports name it (with its revision, when pinned)."""
    engine: str
    """What ran the model: ``mlx``, ``llamacpp``, ``openai`` or ``scripted`` (the handle's
    kind)."""
    token_unit: str
    """The unit of every size and token count of the run: ``model tokens``, or ``UTF-8 bytes
    (not model tokens)`` for the scripted stand-in."""
    model_details: tuple[str, ...]
    """Lines about the model for reports (sampling, load time in seconds, notes)."""
    budget: RunBudget
    """Every policy's per-turn budgets, in the token unit (scaled for a byte counter)."""
    episode_tokens: int | None
    """The token allowance of each policy's whole episode, in the token unit; ``None`` for
    the one-step order lookup, whose turn budget is its only limit."""
    noise_lines: int | None
    """Noise lines in each incoming update (the fixture's default, or the pressure profile's
    under context pressure); ``None`` for the order lookup, which has no updates."""
    outcomes: tuple[PolicyOutcome, ...]
    """One outcome per finished policy, in the order run (fewer than asked when stopped)."""
    status: str
    """The last status line: what finished or failed, or that the run was stopped."""
    cancelled: bool
    """Stop was pressed (or the token cancelled) before every policy finished."""
    elapsed_seconds: float
    """Wall time of the whole comparison, in seconds (model load excluded)."""

    @property
    def completed(self) -> bool:
        return not self.cancelled and len(self.outcomes) == len(self.settings.policies)

    @property
    def engine_label(self) -> str:
        """The engine as reports name it (``llama.cpp``, ``MLX``, …)."""
        return engine_label(self.engine)


def tool_calls_text(steps: Sequence[ToolStep]) -> str:
    """``tool calls 5: open ×3, close ×1, look ×1 (1 refused)`` — counts per verb in order of
    first use; an unknown or refused call counts as refused."""
    if not steps:
        return "tool calls 0"
    refused = sum(1 for s in steps if not s.ok)
    return f"tool calls {_verb_counts(steps)}" + (f" ({refused} refused)" if refused else "")


def prefetch_text(steps: Sequence[ToolStep]) -> str:
    """``prefetched 3: open ×3`` -- the calls a policy's runtime made for the model."""
    return f"prefetched {_verb_counts(steps)}" if steps else "prefetched 0"


def choices_text(choices: Sequence[Choice]) -> str:
    """``judged 13 pairs: 4 by the model's answer, 9 without one`` -- how many of the
    incremental decision's questions needed an answer call (a restatement of the earlier
    record's question may still have been asked for the others)."""
    asked = sum(1 for c in choices if c.asked)
    return (
        f"judged {len(choices)} pairs: {asked} by the model's answer, "
        f"{len(choices) - asked} without one"
    )


def choice_line(choice: Choice) -> str:
    """One question of the incremental decision as a user reads it: the new record, the
    earlier one it was judged against, what was decided and the runtime's reason (the
    decision's model output only says ``(no call)`` for a pair kept or settled without one)."""
    about = f" about {', '.join(choice.options)}" if choice.options else ""
    if choice.chosen is not None:
        decided = f"replaces {choice.chosen}"
    elif not choice.valid:
        decided = "invalid reply, nothing applied"
    else:
        decided = "replaces nothing"
    call = "" if choice.asked else " (no call)"
    return f"{','.join(choice.records)}{about}: {decided}{call} · {choice.detail}"


def _verb_counts(steps: Sequence[ToolStep]) -> str:
    """``5: open ×3, close ×1, look ×1`` -- how many calls, then each verb in order of first
    use."""
    counts: dict[str, int] = {}
    for step in steps:
        counts[step.name] = counts.get(step.name, 0) + 1
    verbs = ", ".join(f"{name} \u00d7{n}" for name, n in counts.items())
    return f"{len(steps)}: {verbs}"


__all__ = [
    "ComparisonResult",
    "PolicyOutcome",
    "StepView",
    "choice_line",
    "choices_text",
    "policy_label",
    "prefetch_text",
    "tool_calls_text",
]
