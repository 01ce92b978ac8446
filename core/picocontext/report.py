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
    model_text: str
    outcome: Outcome
    detail: str

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
    options: tuple[str, ...]
    handles: tuple[str, ...]
    reply: str = ""
    chosen: str | None = None
    valid: bool = True
    asked: bool = True
    detail: str = ""
    prompt_tokens: int = 0
    prefill_tokens: int = 0
    generated_tokens: int = 0
    # When the model picked an option and its engine reports probabilities: the log
    # probability of that reply and of the reply ``none`` (a second, grammar-forced call over
    # the same cached prompt); ``overruled`` when the margin rule turned the pick into none.
    option_logprob: float | None = None
    none_logprob: float | None = None
    overruled: bool = False


class ToolStep(BaseModel):
    """One tool call of a tool-using policy (navigation or digest verbs) and its result."""

    model_config = _FROZEN

    step: int
    name: str
    arguments: str
    ok: bool
    result: str
    model_text: str = ""


class RunReport(BaseModel):
    """Everything one run did, including partial usage when it failed."""

    model_config = _FROZEN

    mode: RunMode
    edit_style: EditStyle
    original: Snapshot
    run_start: Snapshot
    revised: Snapshot
    original_prompt_tokens: int | None
    original_prompt_failure: str | None
    run_start_prompt_tokens: int
    final_prompt: PreparedPrompt | None
    calls: tuple[PreparedPrompt, ...]
    attempts: tuple[EditAttempt, ...]
    answer: str
    failure: str | None
    total_input_tokens: int
    total_generated_tokens: int
    total_prefill_tokens: int
    edit_call_count: int
    keep_call_count: int
    elapsed_seconds: float
    policy: str = ""
    tool_steps: tuple[ToolStep, ...] = ()
    # Calls the runtime made for the model before its first step (a navigated policy's
    # prefetch): charged to the same reading budget, shown in the first prompt, and not the
    # model's own calls, so they are kept apart from ``tool_steps``.
    prefetch_steps: tuple[ToolStep, ...] = ()
    # The incremental decision's questions, in order (empty for other styles).
    choices: tuple[Choice, ...] = ()
    # Prompt tokens actually computed by each call, parallel to ``calls`` (the rest of each
    # prompt came from the prefix cache); a backend that does not say counts its whole prompt.
    call_prefill_tokens: tuple[int, ...] = ()
    # An accepted edit's balance: window tokens its answer prompt saved against the unedited
    # history, and the prefill it cost beyond a keep (the cache restarts at the first changed
    # record). Zero when nothing was edited.
    edit_window_saved_tokens: int = 0
    edit_prefill_cost_tokens: int = 0

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
