"""RunReport, EditAttempt and the transcript diff."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from picocontext.backend import EditStyle, PreparedPrompt
from picocontext.records import Snapshot

_FROZEN = ConfigDict(frozen=True, extra="forbid")

MINUS = "\u2212"


class RunMode(StrEnum):
    APPEND_ONLY = "appendOnly"
    EDITABLE = "editable"
    NAVIGATED = "navigated"
    DISTILLED = "distilled"


class Outcome(StrEnum):
    EDITED = "edited"
    KEPT = "kept"
    REJECTED = "rejected"


class EditAttempt(BaseModel):
    """One decision generation: what the model said and what the runtime made of it."""

    model_config = _FROZEN

    arguments: str
    """The decision's arguments as JSON text (the edit or keep payload)."""
    model_text: str
    """What the model generated besides the call (its replies, for the incremental style)."""
    outcome: Outcome
    """Edited, kept, or rejected by the runtime."""
    detail: str
    """The runtime's one-line account: the revision committed, or why it was rejected."""

    @property
    def accepted(self) -> bool:
        return self.outcome is not Outcome.REJECTED


class Choice(BaseModel):
    """One question of the incremental decision and what the runtime made of the reply.

    ``records`` is the new record (or tool group) asked about; ``options`` the earlier record
    ids offered, answered by ``handles`` (the same ids unless they were long); ``chosen`` the
    record id replaced, ``None`` for none or an invalid reply. ``asked`` is false for a new
    record beyond the per-step limit or the budget (then nothing was generated)."""

    model_config = _FROZEN

    records: tuple[str, ...]
    """Ids of the new record (or tool group) asked about."""
    options: tuple[str, ...]
    """Ids of the earlier records offered."""
    handles: tuple[str, ...]
    """What the prompt called each option, parallel to ``options``."""
    reply: str = ""
    """The model's reply text, as generated."""
    chosen: str | None = None
    """Id of the record replaced; ``None`` for none or an invalid reply."""
    valid: bool = True
    """The reply could be read as one of the allowed answers."""
    asked: bool = True
    """False when nothing was generated (beyond the per-step limit or the budget)."""
    detail: str = ""
    """The runtime's one-line account of what decided."""
    prompt_tokens: int = 0
    """Prompt tokens of this question's calls, summed, in the session counter's units."""
    prefill_tokens: int = 0
    """Prompt tokens those calls actually computed (the rest came from the prefix cache)."""
    generated_tokens: int = 0
    """Tokens generated for this question, summed."""
    option_logprob: float | None = None
    """When the model picked an option and its engine reports probabilities: the log
    probability of that reply; ``None`` otherwise."""
    none_logprob: float | None = None
    """The log probability of the reply ``none`` (a second, grammar-forced call over
    the same cached prompt); ``None`` when not measured."""
    overruled: bool = False
    """The margin rule turned the model's pick into none."""
    shorten: bool = False
    """The question asked which kinds of the lines of ``records`` to keep (shortening), not
    what it replaces; ``detail`` says what was kept."""


class ToolStep(BaseModel):
    """One tool call of a tool-using policy (navigation or digest verbs) and its result."""

    model_config = _FROZEN

    step: int
    """Index of the loop step the call was made in, from 0."""
    name: str
    """The tool's name."""
    arguments: str
    """The call's arguments as JSON text, as sent."""
    ok: bool
    """The call was carried out; false for a refusal (its ``result`` says why)."""
    result: str
    """The text the model was shown for the call."""
    model_text: str = ""
    """What the model generated besides the call (for a prefetch step, the navigator's
    reason)."""


class RunReport(BaseModel):
    """Everything one run did, including partial usage when it failed.

    Every token count is in the units of the session's token counter: model tokens for a real
    backend, UTF-8 bytes for the deterministic test counter (never model tokens)."""

    model_config = _FROZEN

    mode: RunMode
    """Which kind of run this was (append-only, editable, navigated or distilled)."""
    edit_style: EditStyle
    """How an editable run asked for its decision; recorded for every run."""
    original: Snapshot
    """The preserved transcript after the run: every record ever appended, unedited."""
    run_start: Snapshot
    """The working revision the run started from."""
    revised: Snapshot
    """The working revision the run ended with (``run_start`` when nothing was edited)."""
    original_prompt_tokens: int | None
    """Tokens of the answer prompt over the whole transcript; ``None`` when it could not be
    rendered (then ``original_prompt_failure`` says why)."""
    original_prompt_failure: str | None
    """Why the transcript's answer prompt could not be rendered; ``None`` when it was."""
    run_start_prompt_tokens: int
    """Tokens of the answer prompt over ``run_start``; 0 when the run failed before it."""
    final_prompt: PreparedPrompt | None
    """The exact prompt the answer was generated from; ``None`` when no answer was asked."""
    calls: tuple[PreparedPrompt, ...]
    """Every prompt dispatched to the model, in order (decisions, tool steps, the answer)."""
    attempts: tuple[EditAttempt, ...]
    """Each decision generation and what the runtime made of it, in order."""
    answer: str
    """The model's answer text; empty when the run failed before it."""
    failure: str | None
    """The message of the error that ended the run; ``None`` when it succeeded."""
    total_input_tokens: int
    """Prompt tokens of every dispatched call, summed."""
    total_generated_tokens: int
    """Tokens the model generated over every call, summed."""
    total_prefill_tokens: int
    """Prompt tokens the model actually computed over every call, summed (the rest of each
    prompt came from the prefix cache)."""
    edit_call_count: int
    """Decisions that proposed an edit, whether or not the runtime accepted it (see
    ``attempts`` for each outcome)."""
    keep_call_count: int
    """Decisions that kept the history as it was."""
    elapsed_seconds: float
    """Wall time of the run, in seconds."""
    policy: str = ""
    """The registry name of the policy that ran (the mode's name when none was given)."""
    tool_steps: tuple[ToolStep, ...] = ()
    """The model's own tool calls (navigation or digest verbs), in order."""
    prefetch_steps: tuple[ToolStep, ...] = ()
    """Calls the runtime made for the model before its first step (a navigated policy's
    prefetch): charged to the same reading budget, shown in the first prompt, and not the
    model's own calls, so they are kept apart from ``tool_steps``."""
    choices: tuple[Choice, ...] = ()
    """The incremental decision's questions, in order (empty for other styles)."""
    call_prefill_tokens: tuple[int, ...] = ()
    """Prompt tokens actually computed by each call, parallel to ``calls`` (the rest of each
    prompt came from the prefix cache); a backend that does not say counts its whole prompt."""
    edit_window_saved_tokens: int = 0
    """An accepted edit's balance, first half: window tokens its answer prompt saved against
    the unedited history. 0 when nothing was edited."""
    edit_prefill_cost_tokens: int = 0
    """An accepted edit's balance, second half: prefill tokens it cost beyond a keep (the
    cache restarts at the first changed record): the engine's own count of the answer call
    where it reports one, else estimated from the tokens. 0 when nothing was edited."""

    @property
    def succeeded(self) -> bool:
        return self.failure is None

    @property
    def diff(self) -> str:
        return diff_snapshots(self.original, self.revised)


def _first_line_marked(marker: str, body: str) -> str:
    return f"{marker} {body}"


def diff_snapshots(original: Snapshot, revised: Snapshot) -> str:
    """Deleted/Replaced entries against the transcript, blank-line separated; only the first
    line of a multi-line body carries the U+2212 / ``+`` marker."""
    live = {r.id: r for r in revised.records}
    entries: list[str] = []
    for record in original.records:
        now = live.get(record.id)
        if now is None:
            entries.append(
                f"Deleted {record.id} ({record.role.value})\n"
                + _first_line_marked(MINUS, record.body)
            )
        elif now.body != record.body:
            entries.append(
                f"Replaced {record.id} ({record.role.value})\n"
                + _first_line_marked(MINUS, record.body)
                + "\n"
                + _first_line_marked("+", now.body)
            )
    return "\n\n".join(entries)
