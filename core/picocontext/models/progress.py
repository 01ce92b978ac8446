"""What a generation reports while it runs, for people watching a slow local model.

A real model on a CPU can spend minutes in one call; a listener (the playground's progress
line) is told how far the prefill is, how many tokens were generated against the cap, the
rate and the text so far. Plain data, built on the model's worker thread and handed to the
listener there: a listener must be quick and must not call back into the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class GenerationProgress:
    """One report of a running generation.

    ``prefilled`` of ``prefill_total`` prompt tokens computed so far (reused cache tokens are
    not counted), ``generated`` of ``max_tokens`` tokens decoded, ``elapsed`` seconds since
    the call started, ``text`` the decode of the generated tokens so far."""

    phase: Literal["prefill", "decode", "done"]
    prefilled: int
    prefill_total: int
    generated: int
    max_tokens: int
    elapsed: float
    decode_seconds: float = 0.0
    text: str = ""

    @property
    def tokens_per_second(self) -> float | None:
        """Decode rate so far (``None`` before two tokens exist)."""
        if self.generated < 2 or self.decode_seconds <= 0:
            return None
        return (self.generated - 1) / self.decode_seconds

    @property
    def seconds_left_at_most(self) -> float | None:
        """Time to reach the token cap at the current rate: an upper bound, since a model
        usually stops before the cap."""
        rate = self.tokens_per_second
        if rate is None:
            return None
        return (self.max_tokens - self.generated) / rate


ProgressListener = Callable[[GenerationProgress], None]

__all__ = ["GenerationProgress", "ProgressListener"]
