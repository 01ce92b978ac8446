"""Protocols between the session and a model: token counting, generation, chat.

A :class:`PreparedPrompt` carries the exact token ids a backend consumes and the text those ids
decode to; budgets are charged on those ids, never on an estimate. Everything here is data and
protocols: the phase defaults a :class:`ModelInput` falls back on (system text, tools,
guidance) are the texts of :mod:`picocontext.prompts`, which takes a phase, an edit style and a
snapshot, never a :class:`ModelInput`, so the dependency runs one way. :class:`Phase` and
:class:`EditStyle` live in the leaf :mod:`picocontext.phases`, which both import.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from picocontext.cancel import CancelToken
from picocontext.phases import EditStyle as EditStyle
from picocontext.phases import Phase as Phase
from picocontext.prompts import (
    CHOICE_GUIDANCE,
    COMPLETION_GUIDANCE,
    decision_guidance,
    decision_tools,
    system_instructions,
    tool_call_instructions,
)
from picocontext.records import Record, Snapshot

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ModelInput(BaseModel):
    """What a counter renders: the working snapshot, the phase and runtime control records."""

    model_config = _FROZEN

    context: Snapshot
    phase: Phase
    control_records: tuple[Record, ...] = ()
    edit_style: EditStyle = EditStyle.TARGETED
    # Policies with their own protocol (navigation, digests) override the phase defaults. Tools
    # are kept as canonical JSON text (a list of OpenAI-style function specs) so inputs stay
    # hashable and render identically everywhere.
    tools_json: str | None = None
    system_text: str | None = None
    guidance: str | None = None
    # The JSON schema of the answer when the task defines its shape (canonical JSON text, like
    # ``tools_json``). Never rendered: the request itself describes the shape; a backend with
    # structured decoding constrains the answer to it.
    answer_schema_json: str | None = None
    # Set on every call of a tool-call decision step (decision and answer): all of them show
    # the decision system text and the edit/keep tools (without the per-revision id enum)
    # before the history, so the calls of the step share one prefix.
    tool_call_step: bool = False

    @property
    def answer_schema(self) -> dict[str, Any] | None:
        import json

        if self.answer_schema_json is None:
            return None
        loaded: dict[str, Any] = json.loads(self.answer_schema_json)
        return loaded

    @property
    def instructions(self) -> str:
        """The system text: the override, or the phase's own."""
        if self.system_text is not None:
            return self.system_text
        if self.tool_call_step:
            return tool_call_instructions(self.edit_style)
        return system_instructions(self.phase, self.edit_style)

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """The tools offered with this input: the override, or the phase's own."""
        if self.tools_json is not None:
            loaded: list[dict[str, Any]] = json.loads(self.tools_json)
            return loaded
        if self.tool_call_step:
            return decision_tools(None)
        return decision_tools(self.context) if self.phase is Phase.EDIT else None

    @property
    def trailing_guidance(self) -> str:
        """The final runtime user message: the override, or the phase's own. Everything that
        depends on the phase or the revision belongs here, after the history."""
        if self.guidance is not None:
            return self.guidance
        if self.phase is Phase.EDIT:
            return decision_guidance(self.context, self.edit_style)
        if self.phase is Phase.CHOICE:
            return CHOICE_GUIDANCE
        return COMPLETION_GUIDANCE


class PreparedPrompt(BaseModel):
    """Exact token ids plus the decode of those ids. ``notes`` says how it was rendered
    (for example that a tool block was rendered by us because the template cannot)."""

    model_config = _FROZEN

    input: ModelInput
    token_ids: tuple[int, ...]
    rendered: str
    notes: tuple[str, ...] = ()

    @property
    def token_count(self) -> int:
        return len(self.token_ids)


class ModelToolCall(BaseModel):
    model_config = _FROZEN
    name: str
    arguments: str


class ModelResponse(BaseModel):
    """One generation. ``prefill_tokens`` is how many prompt tokens were actually computed
    (fewer than the prompt when a prefix KV cache was reused); ``None`` if unknown."""

    model_config = _FROZEN

    text: str = ""
    tool_calls: tuple[ModelToolCall, ...] = ()
    generated_tokens: int = 0
    reached_token_limit: bool = False
    prefill_tokens: int | None = None
    seconds: float = 0.0
    # The natural-log probability of the generated tokens under the model before any grammar
    # mask (their sum), when the engine reports it; ``None`` otherwise.
    logprob: float | None = None


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading token ids ``a`` and ``b`` share (what a prefix cache can reuse)."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def function_spec(tool: ToolSpec) -> dict[str, Any]:
    """The OpenAI-style function entry of one tool, as chat templates expect it."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters or {"type": "object", "properties": {}},
        },
    }


def tools_json(specs: Sequence[ToolSpec]) -> str:
    """Canonical JSON of tool specs for :attr:`ModelInput.tools_json`."""

    return json.dumps(
        [function_spec(t) for t in specs],
        ensure_ascii=False,
        sort_keys=True,
        separators=(",", ":"),
    )


# Longer id lists stay free strings: every listed id costs prompt tokens, and the runtime
# judges every id anyway. The bound is on characters, since ids vary from "r" to long paths.
MAX_ENUM_CHARS = 320


def restrict_ids(spec: ToolSpec, ids: Sequence[str], *fields: str) -> ToolSpec:
    """``spec`` with each named argument (a string, or an array of strings) limited to ``ids``
    by a JSON-schema ``enum``, so the schema the model reads is the one structured decoding
    enforces. Unchanged when ``ids`` is empty or longer than :data:`MAX_ENUM_CHARS` in all."""
    unique = list(dict.fromkeys(ids))
    if not unique or sum(len(i) + 4 for i in unique) > MAX_ENUM_CHARS:
        return spec
    import copy

    parameters = copy.deepcopy(spec.parameters)
    for name in fields:
        schema = parameters["properties"][name]
        target = schema["items"] if schema.get("type") == "array" else schema
        target["enum"] = unique
    return spec.model_copy(update={"parameters": parameters})


class ChatMessage(BaseModel):
    """A plain chat message for non-session users of a model (summarizers, navigators)."""

    model_config = _FROZEN
    role: str
    content: str
    tool_calls: tuple[ModelToolCall, ...] = ()


class ToolSpec(BaseModel):
    """A function tool offered to a chat model (OpenAI-style JSON schema parameters)."""

    model_config = _FROZEN
    name: str
    description: str
    parameters: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class TokenCounter(Protocol):
    """Renders a ModelInput into the exact prompt a backend will consume."""

    def prepare(self, model_input: ModelInput) -> PreparedPrompt: ...


@runtime_checkable
class ModelBackend(Protocol):
    """Generates from a prepared prompt, greedily, up to ``max_tokens``.

    Must check ``cancel`` while generating and raise :class:`picocontext.errors.Cancelled`.
    """

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse: ...


@runtime_checkable
class ChatModel(Protocol):
    """A model used directly with chat messages: summarizers, navigators, descriptor engines."""

    @property
    def model_id(self) -> str: ...

    def count_tokens(self, text: str) -> int: ...

    def chat(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        cancel: CancelToken | None = None,
    ) -> ModelResponse: ...
