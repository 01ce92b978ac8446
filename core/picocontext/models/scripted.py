"""Deterministic test doubles: a UTF-8 byte counter and a backend that replays responses.

Byte counts are clearly not model tokens; they make budgets and totals exact in tests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from picocontext.backend import (
    ModelInput,
    ModelResponse,
    ModelToolCall,
    PreparedPrompt,
)
from picocontext.cancel import CancelToken, check
from picocontext.headers import record_content
from picocontext.records import Snapshot
from picocontext.working import validate_snapshot


class ByteCounter:
    """Renders instructions plus one header line and body per record (control records too);
    token ids are the UTF-8 bytes of that text."""

    def render(self, model_input: ModelInput) -> str:
        validate_snapshot(model_input.context)
        full = Snapshot.model_construct(
            scope=model_input.context.scope,
            revision=model_input.context.revision,
            records=model_input.context.records + model_input.control_records,
        )
        if model_input.control_records:
            validate_snapshot(full)
        parts = [model_input.instructions]
        for record in full.records:
            parts.append(f"{record.role.value} {record_content(record)}")
        # Policy overrides are rendered too, so their bytes are charged like everything else.
        if model_input.tools_json is not None:
            parts.append(f"tools {model_input.tools_json}")
        if model_input.guidance is not None:
            parts.append(model_input.guidance)
        return "\n".join(parts)

    def prepare(self, model_input: ModelInput) -> PreparedPrompt:
        text = self.render(model_input)
        return PreparedPrompt(
            input=model_input, token_ids=tuple(text.encode("utf-8")), rendered=text
        )


Responder = Callable[[PreparedPrompt, int], ModelResponse]


def scripted_call(name: str, arguments: str, generated_tokens: int = 16) -> ModelResponse:
    """A response that makes exactly one tool call."""
    return ModelResponse(
        tool_calls=(ModelToolCall(name=name, arguments=arguments),),
        generated_tokens=generated_tokens,
    )


class ScriptedBackend:
    """Replays responses in order, or asks a responder function. Records every prompt it got.

    ``hold`` (an Event) makes ``generate`` wait until it is set, so tests can act while a
    generation is in flight; cancellation is checked while waiting.
    """

    # Scripts are written as edit_context/keep_context replies, so an ``auto`` editable policy
    # asks for tool calls; configure ``decision: "incremental"`` to script choices instead.
    decision_protocol = "tool-call"

    def __init__(
        self,
        responses: Sequence[ModelResponse | Exception] | Responder = (),
        hold: threading.Event | None = None,
    ) -> None:
        self._responder: Responder | None = None
        self._queue: list[ModelResponse | Exception] = []
        if callable(responses):
            self._responder = responses
        else:
            self._queue = list(responses)
        self.hold = hold
        self.started = threading.Event()
        self.prompts: list[PreparedPrompt] = []
        self.max_tokens: list[int] = []
        self._lock = threading.Lock()

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        with self._lock:
            self.prompts.append(prompt)
            self.max_tokens.append(max_tokens)
        self.started.set()
        if self.hold is not None:
            while not self.hold.wait(0.01):
                check(cancel)
        if self._responder is not None:
            return self._responder(prompt, max_tokens)
        with self._lock:
            if not self._queue:
                raise AssertionError("ScriptedBackend ran out of responses")
            item = self._queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return item
