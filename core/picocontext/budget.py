"""RunBudget and usage accounting: every prompt is checked before it is sent, never truncated."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from picocontext.cancel import CancelToken, check
from picocontext.errors import BudgetExceeded, InvalidContext

MAX_OUTPUT_CAP = 1_000_000
MAX_CONTEXT_WINDOW = 1_000_000
MAX_TOTAL_TOKENS = 10_000_000

Limits = TypeVar("Limits", bound=BaseModel)


def scale_tokens(limits: Limits, factor: int, keep: Collection[str] = ()) -> Limits:
    """``limits`` with every integer field except ``keep`` multiplied by ``factor``: the same
    budget in a finer unit (a byte-counting stand-in sees about four bytes per model token).
    The result is validated again, so an out-of-range product fails like any bad value."""
    data = limits.model_dump()
    for key, value in data.items():
        if key not in keep and isinstance(value, int) and not isinstance(value, bool):
            data[key] = value * factor
    return type(limits).model_validate(data)


class RunBudget(BaseModel):
    """Token limits for one run (one caller turn)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    context_window: int = 8_192
    total_tokens: int = 24_000
    edit_output_tokens: int = 1_024
    completion_output_tokens: int = 512
    max_edit_attempts: int = 2

    def scaled(self, factor: int) -> RunBudget:
        """Every token amount times ``factor`` (the attempt count unchanged)."""
        return self if factor == 1 else scale_tokens(self, factor, keep=("max_edit_attempts",))

    def fits(self, prompt_tokens: int, output_tokens: int) -> bool:
        """Whether a prompt and the output reserved for it fit the window (the window half of
        :func:`check_prompt`, for a caller that gives way instead of failing)."""
        return prompt_tokens <= self.context_window - output_tokens

    def validate_ranges(self) -> None:
        ok = (
            0 < self.context_window <= MAX_CONTEXT_WINDOW
            and 0 < self.total_tokens <= MAX_TOTAL_TOKENS
            and 0 < self.edit_output_tokens <= MAX_OUTPUT_CAP
            and 0 < self.completion_output_tokens <= MAX_OUTPUT_CAP
            and 1 <= self.max_edit_attempts <= 4
        )
        if not ok:
            raise InvalidContext("invalid run budget; edit attempts must be 1...4")


@dataclass(slots=True)
class Usage:
    """Tokens charged so far in one run: dispatched prompts plus generated output."""

    input_tokens: int = 0
    generated_tokens: int = 0
    prefill_tokens: int = 0

    @property
    def used(self) -> int:
        return self.input_tokens + self.generated_tokens


def check_prompt(
    budget: RunBudget,
    usage: Usage,
    prompt_tokens: int,
    output_tokens: int,
    reserve: int = 0,
    cancel: CancelToken | None = None,
) -> None:
    """Window check then total check, exactly as the reference orders them."""
    check(cancel)
    if not budget.fits(prompt_tokens, output_tokens):
        raise BudgetExceeded("input plus reserved output exceeds the context window")
    if usage.used > budget.total_tokens - prompt_tokens - output_tokens - reserve:
        raise BudgetExceeded("total input/output allowance cannot reserve the next completion")
