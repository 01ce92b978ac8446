"""The deterministic stand-in model behind the ``scripted`` choice.

Why it exists: the window, the smoke mode and the tests must run every pane in milliseconds,
without weights, and still exercise the real session loop (decisions, validation, receipts,
budgets, grading). Token counts are UTF-8 bytes (:class:`picocontext.models.ByteCounter`) and
are labelled as such everywhere they are shown.

Both tasks are played by the diagnostics package's deterministic models: the order lookup by
:class:`picocontext_diagnostics.DeterministicOrderBackend`, notebook episodes by
:class:`picocontext_diagnostics.DeterministicNotebookBackend`. This module only routes a
prompt to the one whose task it belongs to and adds an optional delay per call.
"""

from __future__ import annotations

import time

from picocontext import CancelToken, ModelResponse, PreparedPrompt
from picocontext_diagnostics import (
    DeterministicNotebookBackend,
    DeterministicOrderBackend,
    OrderLookup,
)

SCRIPTED_MODEL_ID = "scripted-deterministic"


class ScriptedPlaygroundBackend(DeterministicOrderBackend):
    """Satisfies :class:`picocontext.ModelBackend`. ``delay`` seconds per call (checked for
    cancellation every 10 ms) lets a person — or a test — watch progress and press Stop."""

    def __init__(self, order: OrderLookup, delay: float = 0.0) -> None:
        super().__init__(order)
        self.delay = delay
        self.notebook = DeterministicNotebookBackend()

    @property
    def model_id(self) -> str:
        return SCRIPTED_MODEL_ID

    def _wait(self, cancel: CancelToken | None) -> None:
        deadline = time.monotonic() + self.delay
        while True:
            if cancel is not None:
                cancel.check()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(0.01, left))

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        self._wait(cancel)
        if not self.is_order_lookup(prompt.input.context):
            self.calls += 1
            return self.notebook.generate(prompt, max_tokens, cancel)
        return super().generate(prompt, max_tokens, cancel)
