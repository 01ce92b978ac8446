"""Chat-format adapter: a ModelInput → the model's own chat template → exact token ids.

The adapter is where untrusted text meets a model's control tokens, so it is strict: every
record field that reaches the template is checked for reserved delimiters *before* anything is
rendered, tool-call arguments must be JSON objects and are escaped so no tag can hide in them,
and the rendered text is checked to contain every message unchanged (a template that silently
drops or rewrites a message fails loudly instead). Templates that cannot render tools get the
tool protocol rendered by us in the same ``<tool_call>`` wire format, and the prepared prompt's
``notes`` say so.

No weights and no MLX are needed here: anything with a chat template and a tokenizer (see
:class:`ChatTokenizer`) can be adapted; :class:`HFChatTokenizer` wraps a ``transformers``
tokenizer (which is what ``mlx_lm.load`` returns inside its wrapper).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from picocontext.backend import (
    ChatMessage,
    ModelInput,
    PreparedPrompt,
    ToolSpec,
    function_spec,
)
from picocontext.errors import InvalidContext, ModelError
from picocontext.headers import record_content
from picocontext.records import Record, Role, Snapshot
from picocontext.textrules import require_unicode
from picocontext.working import validate_snapshot

# The seven strings the Qwen/ChatML wire format reserves; never allowed in caller text.
QWEN_DELIMITERS: tuple[str, ...] = (
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)

RESERVED_DELIMITER = "record text or metadata contains a reserved Qwen delimiter"
RESERVED_TOKEN = "record text or metadata contains a reserved chat-template token"
QWEN_DEVELOPER = "the pinned Qwen template does not support the developer role"
OTHER_DEVELOPER = "this model's chat template does not support the developer role"
ARGUMENTS_NOT_OBJECT = "tool-call arguments must be a JSON object"

NOTE_OWN_TOOL_BLOCK = (
    "tool schemas rendered by picocontext in the <tools>/<tool_call> wire format: the model's "
    "chat template cannot render tools"
)
NOTE_OWN_TOOL_CALLS = (
    "tool calls and tool results rendered by picocontext in the <tool_call>/<tool_response> "
    "wire format: the model's chat template cannot render them"
)

_PROBE = "pcxprobe7c1"


class ChatTokenizer(Protocol):
    """What the adapter needs from a model's tokenizer."""

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    @property
    def reserved_tokens(self) -> tuple[str, ...]: ...

    @property
    def template(self) -> str: ...


class HFChatTokenizer:
    """A ``transformers`` tokenizer (or an ``mlx_lm`` TokenizerWrapper around one).

    Renders with the tokenizer's own template, generation prompt on and thinking off; encodes
    the rendered text without adding BOS/EOS (the template already placed every control token).
    """

    def __init__(self, tokenizer: Any) -> None:
        # mlx_lm's TokenizerWrapper keeps the transformers tokenizer in ``_tokenizer``; a bare
        # transformers tokenizer uses that name for its Rust backend, so unwrap only the former.
        wrapped = type(tokenizer).__name__ == "TokenizerWrapper"
        inner = tokenizer._tokenizer if wrapped else tokenizer
        template = getattr(inner, "chat_template", None)
        if not isinstance(template, str) or not template.strip():
            raise ModelError(
                "The model's tokenizer has no chat template; picocontext will not flatten roles "
                "into plain text. Use a model directory whose tokenizer_config.json has one."
            )
        self._tok = inner
        self._template = template
        self._lock = threading.Lock()
        added = inner.get_added_vocab() if hasattr(inner, "get_added_vocab") else {}
        special = getattr(inner, "all_special_tokens", []) or []
        tokens = {t for t in [*added, *special] if isinstance(t, str) and t}
        self._reserved = tuple(sorted(tokens))

    @property
    def template(self) -> str:
        return self._template

    @property
    def reserved_tokens(self) -> tuple[str, ...]:
        return self._reserved

    @property
    def raw(self) -> Any:
        return self._tok

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        try:
            with self._lock:
                text = self._tok.apply_chat_template(
                    messages,
                    tools=tools,
                    tokenize=False,
                    add_generation_prompt=True,
                    enable_thinking=False,
                )
        except Exception as exc:  # jinja2 errors, template raise_exception(...)
            raise InvalidContext(f"the chat template could not render the prompt: {exc}") from exc
        if not isinstance(text, str):
            raise ModelError("The chat template did not return text")
        return text

    def encode(self, text: str) -> list[int]:
        with self._lock:
            return list(self._tok.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        with self._lock:
            return str(self._tok.decode(list(ids), skip_special_tokens=False))


@dataclass(frozen=True)
class TemplateSupport:
    """What a chat template renders by itself (probed once per tokenizer)."""

    tools: bool
    tool_calls: bool
    tool_role: bool
    developer: bool
    qwen_family: bool

    @property
    def native_tool_protocol(self) -> bool:
        return self.tools and self.tool_calls and self.tool_role


def probe_template(tokenizer: ChatTokenizer) -> TemplateSupport:
    """Render small probe conversations and see what survives.

    A template that raises on a probe is treated as not supporting that feature."""

    def renders(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        try:
            return tokenizer.render(messages, tools)
        except InvalidContext:
            return ""

    system = {"role": "system", "content": "probe system"}
    user = {"role": "user", "content": "probe user"}
    tool_spec = {
        "type": "function",
        "function": {
            "name": f"{_PROBE}_tool",
            "description": "probe",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    tools_text = renders([system, user], [tool_spec])
    call = {
        "role": "assistant",
        "content": "probe assistant",
        "tool_calls": [
            {
                "id": f"{_PROBE}_id",
                "type": "function",
                "function": {"name": f"{_PROBE}_call", "arguments": '{"k": 1}'},
            }
        ],
    }
    result = {"role": "tool", "content": f"{_PROBE}_result", "tool_call_id": f"{_PROBE}_id"}
    calls_text = renders([system, user, call, result], [tool_spec])
    developer = {"role": "developer", "content": f"{_PROBE}_dev"}
    developer_text = renders([system, developer, user], None)
    template = tokenizer.template
    return TemplateSupport(
        tools=f"{_PROBE}_tool" in tools_text,
        tool_calls=f"{_PROBE}_call" in calls_text,
        tool_role=f"{_PROBE}_result" in calls_text and "<tool_response>" in calls_text,
        developer=f"{_PROBE}_dev" in developer_text,
        # Qwen3 templates switch thinking; Qwen2.5 ones (ours included) carry <tool_call>.
        qwen_family="<|im_start|>" in template
        and ("enable_thinking" in template or "<tool_call>" in template),
    )


def escape_arguments(arguments: str) -> str:
    """Validate a tool-call argument string as a JSON object and escape every ``<``.

    ``<`` can only occur inside JSON strings, so ``\\u003c`` keeps the decoded value identical
    while making it impossible for a wrapper tag to appear in the rendered prompt."""
    require_unicode(arguments)
    try:
        value = json.loads(arguments)
    except ValueError:
        raise InvalidContext(ARGUMENTS_NOT_OBJECT) from None
    if not isinstance(value, dict):
        raise InvalidContext(ARGUMENTS_NOT_OBJECT)
    return arguments.replace("<", "\\u003c")


def tool_block(tools: Sequence[dict[str, Any]]) -> str:
    """Our rendering of a tool list, in the same wire format Qwen-style templates use."""
    lines = [
        "# Tools",
        "",
        "You can call the functions whose signatures are listed inside <tools></tools>:",
        "<tools>",
        *(json.dumps(t, ensure_ascii=False) for t in tools),
        "</tools>",
        "",
        'To call one, reply with a JSON object holding "name" and "arguments" between '
        "<tool_call></tool_call> tags:",
        "<tool_call>",
        '{"name": <function-name>, "arguments": <args-json-object>}',
        "</tool_call>",
    ]
    return "\n".join(lines)


def wire_tool_call(name: str, arguments: str) -> str:
    name_json = json.dumps(name, ensure_ascii=False)
    return f'<tool_call>\n{{"name": {name_json}, "arguments": {arguments}}}\n</tool_call>'


@dataclass(frozen=True)
class Rendering:
    """Messages and tools as handed to the template, plus notes for the report."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    notes: tuple[str, ...]


class ChatFormat:
    """TokenCounter over a model's own chat template (Qwen3/ChatML family and friends).

    ``settings_notes`` are appended to every prepared prompt's notes, so backend settings
    (prefix cache, constrained decisions) are visible in every report that carries prompts.
    """

    def __init__(
        self,
        tokenizer: ChatTokenizer,
        *,
        settings_notes: Iterable[str] = (),
        cache_size: int = 64,
    ) -> None:
        self._tokenizer = tokenizer
        self._support: TemplateSupport | None = None
        self._settings = tuple(settings_notes)
        reserved = set(QWEN_DELIMITERS) | set(tokenizer.reserved_tokens)
        self._reserved = tuple(sorted(reserved, key=lambda s: (-len(s), s)))
        self._cache: OrderedDict[ModelInput, PreparedPrompt] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @property
    def tokenizer(self) -> ChatTokenizer:
        return self._tokenizer

    @property
    def support(self) -> TemplateSupport:
        if self._support is None:
            self._support = probe_template(self._tokenizer)
        return self._support

    @property
    def reserved(self) -> tuple[str, ...]:
        return self._reserved

    def set_settings_notes(self, notes: Iterable[str]) -> None:
        with self._lock:
            self._settings = tuple(notes)
            self._cache.clear()

    # -- validation -----------------------------------------------------------------------
    def check_text(self, text: str) -> None:
        """Reject text that contains a reserved delimiter or any control token of the model."""
        require_unicode(text)
        for token in QWEN_DELIMITERS:
            if token in text:
                raise InvalidContext(RESERVED_DELIMITER)
        for token in self._reserved:
            if token in text:
                raise InvalidContext(RESERVED_TOKEN)

    def check_record(self, record: Record) -> None:
        if record.role is Role.DEVELOPER and not self.support.developer:
            raise InvalidContext(QWEN_DEVELOPER if self.support.qwen_family else OTHER_DEVELOPER)
        fields = [record.id, record.body]
        if record.tool_call_id is not None:
            fields.append(record.tool_call_id)
        for call in record.tool_calls:
            fields += [call.id, call.name]
        for text in fields:
            self.check_text(text)
        for call in record.tool_calls:
            self.check_arguments(call.arguments)

    def check_arguments(self, arguments: str) -> str:
        escaped = escape_arguments(arguments)
        for token in self._reserved:
            if token in escaped:
                raise InvalidContext(RESERVED_TOKEN)
        return escaped

    # -- rendering ------------------------------------------------------------------------
    def rendering(self, model_input: ModelInput) -> Rendering:
        """Validate and build the template input for one ModelInput (no tokenization)."""
        validate_snapshot(model_input.context)
        records = model_input.context.records + model_input.control_records
        if model_input.control_records:
            validate_snapshot(
                Snapshot.model_construct(
                    scope=model_input.context.scope,
                    revision=model_input.context.revision,
                    records=records,
                )
            )
        for record in records:
            self.check_record(record)
        messages: list[dict[str, Any]] = [{"role": "system", "content": model_input.instructions}]
        for record in records:
            message: dict[str, Any] = {"role": record.role.value, "content": record_content(record)}
            if record.tool_calls:
                message["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": escape_arguments(c.arguments)},
                    }
                    for c in record.tool_calls
                ]
            if record.tool_call_id is not None:
                message["tool_call_id"] = record.tool_call_id
            messages.append(message)
        # The phase's own guidance and tools, or a policy's overrides (tools phase).
        messages.append({"role": "user", "content": model_input.trailing_guidance})
        tools: list[dict[str, Any]] | None = model_input.tools
        if tools:
            for spec in tools:
                self.check_text(json.dumps(spec, ensure_ascii=False))
        return self._adapt(messages, tools)

    def _adapt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> Rendering:
        """Render the parts of the tool protocol the template cannot render by itself."""
        support = self.support
        notes: list[str] = []
        has_calls = any(m.get("tool_calls") or m["role"] == "tool" for m in messages)
        if tools and not support.tools:
            system = messages[0]
            block = tool_block(tools)
            content = f"{system['content']}\n\n{block}" if system["content"] else block
            messages = [{**system, "content": content}, *messages[1:]]
            tools = None
            notes.append(NOTE_OWN_TOOL_BLOCK)
        if has_calls and not (support.tool_calls and support.tool_role):
            messages = _wire_calls_and_results(messages)
            notes.append(NOTE_OWN_TOOL_CALLS)
        return Rendering(messages=messages, tools=tools, notes=tuple(notes))

    def render_text(self, rendering: Rendering) -> str:
        text = self._tokenizer.render(rendering.messages, rendering.tools)
        position = 0
        for message in rendering.messages:
            content = message.get("content") or ""
            found = text.find(content, position)
            if found < 0:
                raise InvalidContext(
                    f"the chat template dropped or rewrote a {message['role']} message"
                )
            position = found + len(content)
        return text

    def prepare(self, model_input: ModelInput) -> PreparedPrompt:
        with self._lock:
            cached = self._cache.get(model_input)
            if cached is not None:
                self._cache.move_to_end(model_input)
                return cached
            settings = self._settings
        rendering = self.rendering(model_input)
        text = self.render_text(rendering)
        ids = self._tokenizer.encode(text)
        prompt = PreparedPrompt(
            input=model_input,
            token_ids=tuple(ids),
            rendered=self._tokenizer.decode(ids),
            notes=(*rendering.notes, *settings),
        )
        with self._lock:
            self._cache[model_input] = prompt
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return prompt

    # -- plain chat (ChatModel users) -----------------------------------------------------
    def chat_rendering(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> Rendering:
        out: list[dict[str, Any]] = []
        call_number = 0
        for message in messages:
            try:
                role = Role(message.role)
            except ValueError:
                raise InvalidContext(f"unknown chat role {message.role!r}") from None
            if role is Role.DEVELOPER and not self.support.developer:
                raise InvalidContext(
                    QWEN_DEVELOPER if self.support.qwen_family else OTHER_DEVELOPER
                )
            self.check_text(message.content)
            item: dict[str, Any] = {"role": role.value, "content": message.content}
            if message.tool_calls:
                calls = []
                for call in message.tool_calls:
                    self.check_text(call.name)
                    calls.append(
                        {
                            "id": f"call-{call_number}",
                            "type": "function",
                            "function": {
                                "name": call.name,
                                "arguments": self.check_arguments(call.arguments),
                            },
                        }
                    )
                    call_number += 1
                item["tool_calls"] = calls
            out.append(item)
        if not out:
            raise InvalidContext("empty prompt or output allowance")
        specs = [function_spec(t) for t in tools]
        for spec in specs:
            self.check_text(json.dumps(spec, ensure_ascii=False))
        return self._adapt(out, specs or None)

    def prepare_chat(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> tuple[list[int], str, tuple[str, ...]]:
        rendering = self.chat_rendering(messages, tools)
        text = self.render_text(rendering)
        ids = self._tokenizer.encode(text)
        return ids, self._tokenizer.decode(ids), rendering.notes

    def count_tokens(self, text: str) -> int:
        return len(self._tokenizer.encode(text))


class FormatBacked:
    """The token-counter half every chat-template backend shares: prompts are rendered and
    counted by one :class:`ChatFormat` (``_format``) on this machine, wherever generation
    then runs (in process or on a server), so budgets are checked before any request."""

    _format: ChatFormat

    @property
    def chat_format(self) -> ChatFormat:
        return self._format

    def prepare(self, model_input: ModelInput) -> PreparedPrompt:
        return self._format.prepare(model_input)

    def count_tokens(self, text: str) -> int:
        return self._format.count_tokens(text)

    def render_chat(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> tuple[list[int], str, tuple[str, ...]]:
        """The exact ids/text/notes ``chat`` would consume (for budgets and reports)."""
        return self._format.prepare_chat(messages, tools)


def _wire_calls_and_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fold tool calls into assistant text and tool results into user turns (Qwen wire)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "assistant" and message.get("tool_calls"):
            parts = [message["content"]] if message["content"] else []
            for call in message["tool_calls"]:
                fn = call["function"]
                parts.append(wire_tool_call(fn["name"], fn["arguments"]))
            out.append({"role": "assistant", "content": "\n".join(parts)})
        elif message["role"] == "tool":
            wrapped = f"<tool_response>\n{message['content']}\n</tool_response>"
            if out and out[-1].get("_results"):
                previous = out[-1]
                out[-1] = {**previous, "content": f"{previous['content']}\n{wrapped}"}
            else:
                out.append({"role": "user", "content": wrapped, "_results": True})
        else:
            out.append(message)
    return [{k: v for k, v in m.items() if k != "_results"} for m in out]
