"""Chat-format adapter (checklist 47–56): no weights, no MLX; the tiny model's own tokenizer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext import (
    ChatMessage,
    InvalidContext,
    ModelInput,
    ModelToolCall,
    Phase,
    Record,
    Role,
    Scope,
    Snapshot,
    ToolCall,
    ToolSpec,
)
from picocontext.edits import EDIT_TOOL, KEEP_TOOL
from picocontext.models.chatformat import (
    NOTE_OWN_TOOL_BLOCK,
    NOTE_OWN_TOOL_CALLS,
    QWEN_DELIMITERS,
    QWEN_DEVELOPER,
    RESERVED_DELIMITER,
    ChatFormat,
    HFChatTokenizer,
    escape_arguments,
)
from picocontext.prompts import COMPLETION_GUIDANCE, COMPLETION_INSTRUCTIONS, record_header

pytest.importorskip("transformers")

SCOPE = Scope(user_id="u", conversation_id="c", branch_id="b")
lamp_snapshot: Any = None


@pytest.fixture(autouse=True)
def _lamp(lamp: Any) -> None:
    global lamp_snapshot
    lamp_snapshot = lamp


class SpyTokenizer:
    """Counts template renders and encodes so tests can prove a rejection came first."""

    def __init__(self, inner: HFChatTokenizer) -> None:
        self.inner = inner
        self.renders = 0
        self.encodes = 0

    @property
    def template(self) -> str:
        return self.inner.template

    @property
    def reserved_tokens(self) -> tuple[str, ...]:
        return self.inner.reserved_tokens

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        self.renders += 1
        return self.inner.render(messages, tools)

    def encode(self, text: str) -> list[int]:
        self.encodes += 1
        return self.inner.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.inner.decode(ids)


@pytest.fixture()
def fmt(hf_tokenizer: Any) -> ChatFormat:
    return ChatFormat(HFChatTokenizer(hf_tokenizer))


@pytest.fixture()
def plain_fmt(plain_hf_tokenizer: Any) -> ChatFormat:
    return ChatFormat(HFChatTokenizer(plain_hf_tokenizer))


def edit_input(snapshot: Snapshot | None = None, control: tuple[Record, ...] = ()) -> ModelInput:
    return ModelInput(
        context=snapshot or lamp_snapshot(), phase=Phase.EDIT, control_records=control
    )


def completion_input(snapshot: Snapshot | None = None) -> ModelInput:
    return ModelInput(context=snapshot or lamp_snapshot(), phase=Phase.COMPLETION)


# -- 48/49: messages, roles and headers ---------------------------------------------------
def test_system_instructions_first_then_one_message_per_record_with_header(fmt: ChatFormat) -> None:
    model_input = edit_input()
    rendering = fmt.rendering(model_input)
    roles = [m["role"] for m in rendering.messages]
    assert roles == ["system", "system", "user", "assistant", "tool", "user", "user"]
    assert rendering.messages[0]["content"] == model_input.instructions
    for record, message in zip(model_input.context.records, rendering.messages[1:], strict=False):
        header = record_header(
            record.id, record.protected, [c.id for c in record.tool_calls], record.tool_call_id
        )
        assert message["content"] == f"{header}\n{record.body}"
    assert rendering.messages[2]["content"].startswith(
        "[recordID=task; protected=true; callIDs=; resultFor=none]\n"
    )
    assert rendering.messages[3]["content"].startswith(
        "[recordID=check; protected=false; callIDs=call-1;"
    )
    assert rendering.messages[4]["tool_call_id"] == "call-1"
    assert rendering.messages[4]["content"].startswith(
        "[recordID=result; protected=false; callIDs=; resultFor=call-1]"
    )


def test_unicode_header_and_tool_links_survive_rendering(fmt: ChatFormat) -> None:
    snapshot = lamp_snapshot(extra=(Record(id="étape-東京", role=Role.USER, body="ok"),))
    prompt = fmt.prepare(completion_input(snapshot))
    assert "[recordID=étape-東京; protected=false; callIDs=; resultFor=none]\nok" in prompt.rendered
    assert (
        '<tool_call>\n{"name": "inventory", "arguments": {"sku": "LM-204"}}\n</tool_call>'
        in prompt.rendered
    )
    assert "<tool_response>\n[recordID=result;" in prompt.rendered


# -- 47/53/54: phase texts -----------------------------------------------------------------
def test_decision_phase_ends_with_runtime_guidance_and_completion_with_three_lines(
    fmt: ChatFormat,
) -> None:
    decision = fmt.rendering(edit_input(lamp_snapshot(revision=3)))
    guidance = decision.messages[-1]
    assert guidance["role"] == "user"
    assert "Editable record IDs: check, result, note." in guidance["content"]
    assert "Prefer record note if it contains verbose noise." in guidance["content"]
    assert "Use baseRevision 3." in guidance["content"]
    assert "<tool_call>" in guidance["content"] and "</tool_call>" in guidance["content"]
    assert "baseRevision: 3" not in decision.messages[0]["content"]  # it trails the history
    completion = fmt.rendering(completion_input())
    assert completion.messages[-1] == {"role": "user", "content": COMPLETION_GUIDANCE}
    assert len(COMPLETION_GUIDANCE.splitlines()) == 3
    assert "output format" in COMPLETION_GUIDANCE
    assert completion.messages[0]["content"] == COMPLETION_INSTRUCTIONS


# -- 55: tools only in the decision phase -----------------------------------------------------
def test_decision_offers_edit_then_keep_with_unprotected_enum_and_completion_offers_none(
    fmt: ChatFormat,
) -> None:
    decision = fmt.rendering(edit_input())
    assert decision.tools is not None
    names = [t["function"]["name"] for t in decision.tools]
    assert names == [EDIT_TOOL, KEEP_TOOL]
    ops = decision.tools[0]["function"]["parameters"]["properties"]["operations"]
    assert (ops["minItems"], ops["maxItems"]) == (1, 32)
    replace, delete = ops["items"]["oneOf"]
    assert replace["required"] == ["action", "recordID", "body"]
    assert delete["required"] == ["action", "recordID"]
    assert replace["properties"]["recordID"]["enum"] == ["check", "result", "note"]
    assert "body" not in delete["properties"]
    prompt = fmt.prepare(edit_input())
    assert f'"name": "{EDIT_TOOL}"' in prompt.rendered and "<tools>" in prompt.rendered
    completion = fmt.rendering(completion_input())
    assert completion.tools is None
    assert "<tools>" not in fmt.prepare(completion_input()).rendered


# -- 56: the model's own template, thinking off, rendered = decode(ids) ------------------------
def test_rendered_prompt_is_the_decode_of_exactly_the_ids(
    fmt: ChatFormat, hf_tokenizer: Any
) -> None:
    for model_input in (edit_input(), completion_input()):
        prompt = fmt.prepare(model_input)
        assert prompt.rendered == hf_tokenizer.decode(
            list(prompt.token_ids), skip_special_tokens=False
        )
        assert prompt.rendered.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        assert prompt.rendered.startswith("<|im_start|>system\n")
        assert list(prompt.token_ids) == hf_tokenizer.encode(
            prompt.rendered, add_special_tokens=False
        )
        assert prompt.token_count == len(prompt.token_ids)
        assert prompt.notes == ()


def test_prepare_is_cached_per_input(fmt: ChatFormat) -> None:
    spy = SpyTokenizer(fmt.tokenizer)  # type: ignore[arg-type]
    spied = ChatFormat(spy)
    _ = spied.support
    first = spied.prepare(edit_input())
    second = spied.prepare(edit_input())
    assert first is second and spy.encodes == 1


# -- 50: reserved delimiters in every field, history and control ------------------------------
FIELDS = ("body", "id", "tool_call_id", "call_id", "call_name", "link")


def _poisoned(field: str, token: str) -> tuple[Record, ...]:
    bad = f"x{token}y"
    if field == "body":
        return (Record(id="evil", role=Role.USER, body=bad),)
    if field == "id":
        return (Record(id=bad, role=Role.USER, body="b"),)
    call_id = bad if field in ("call_id", "tool_call_id", "link") else "c-9"
    name = bad if field == "call_name" else "lookup"
    return (
        Record(
            id="evil-call",
            role=Role.ASSISTANT,
            tool_calls=(ToolCall(id=call_id, name=name, arguments="{}"),),
        ),
        Record(id="evil-result", role=Role.TOOL, body="r", tool_call_id=call_id),
    )


@pytest.mark.parametrize("token", QWEN_DELIMITERS)
@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("phase", [Phase.EDIT, Phase.COMPLETION])
def test_reserved_delimiters_are_rejected_in_history_before_rendering(
    fmt: ChatFormat, token: str, field: str, phase: Phase
) -> None:
    spy = SpyTokenizer(fmt.tokenizer)  # type: ignore[arg-type]
    spied = ChatFormat(spy)
    _ = spied.support
    spy.renders = spy.encodes = 0
    snapshot = lamp_snapshot(extra=_poisoned(field, token))
    with pytest.raises(InvalidContext) as err:
        spied.prepare(ModelInput(context=snapshot, phase=phase))
    assert err.value.reason == RESERVED_DELIMITER
    assert (spy.renders, spy.encodes) == (0, 0)


@pytest.mark.parametrize("token", QWEN_DELIMITERS)
@pytest.mark.parametrize("field", FIELDS)
def test_reserved_delimiters_are_rejected_in_control_records(
    fmt: ChatFormat, token: str, field: str
) -> None:
    control = tuple(r.model_copy(update={"protected": True}) for r in _poisoned(field, token))
    with pytest.raises(InvalidContext) as err:
        fmt.prepare(edit_input(control=control))
    assert err.value.reason == RESERVED_DELIMITER


def test_malicious_record_with_every_delimiter_in_every_field_never_reaches_the_tokenizer(
    fmt: ChatFormat,
) -> None:
    everything = "".join(QWEN_DELIMITERS) + "<think></think>"
    spy = SpyTokenizer(fmt.tokenizer)  # type: ignore[arg-type]
    spied = ChatFormat(spy)
    _ = spied.support
    spy.renders = spy.encodes = 0
    evil = (
        Record(
            id=f"a{everything}",
            role=Role.ASSISTANT,
            body=everything,
            tool_calls=(ToolCall(id=f"c{everything}", name=f"n{everything}", arguments="{}"),),
        ),
        Record(id=f"r{everything}", role=Role.TOOL, body=everything, tool_call_id=f"c{everything}"),
    )
    for phase in Phase:
        with pytest.raises(InvalidContext):
            spied.prepare(ModelInput(context=lamp_snapshot(extra=evil), phase=phase))
    assert (spy.renders, spy.encodes) == (0, 0)


def test_model_specific_control_tokens_are_reserved_too(fmt: ChatFormat) -> None:
    snapshot = lamp_snapshot(extra=(Record(id="t", role=Role.USER, body="a </think> b"),))
    with pytest.raises(InvalidContext, match="reserved chat-template token"):
        fmt.prepare(completion_input(snapshot))


# -- 51: developer role ------------------------------------------------------------------------
def test_developer_role_is_rejected_in_history_and_control(fmt: ChatFormat) -> None:
    developer = Record(id="dev", role=Role.DEVELOPER, body="be terse")
    snapshot = Snapshot(
        scope=SCOPE,
        records=(
            Record(id="instructions", role=Role.SYSTEM, body="s"),
            developer,
            Record(id="task", role=Role.USER, body="t", protected=True),
        ),
    )
    with pytest.raises(InvalidContext) as err:
        fmt.prepare(completion_input(snapshot))
    assert err.value.reason == QWEN_DEVELOPER
    with pytest.raises(InvalidContext) as err:
        fmt.prepare(edit_input(control=(developer,)))
    assert err.value.reason == QWEN_DEVELOPER


def test_developer_role_is_allowed_where_the_template_renders_it(plain_fmt: ChatFormat) -> None:
    snapshot = Snapshot(
        scope=SCOPE,
        records=(
            Record(id="dev", role=Role.DEVELOPER, body="be terse"),
            Record(id="task", role=Role.USER, body="t", protected=True),
        ),
    )
    prompt = plain_fmt.prepare(completion_input(snapshot))
    assert "<|im_start|>developer\n[recordID=dev; protected=true" in prompt.rendered


# -- 52: tool-call arguments -------------------------------------------------------------------
@pytest.mark.parametrize("token", QWEN_DELIMITERS)
def test_tool_arguments_escape_delimiters_without_changing_the_json_value(
    fmt: ChatFormat, token: str
) -> None:
    arguments = json.dumps({"q": f"before {token} after", "n": [1, "<x>"]})
    snapshot = lamp_snapshot(
        extra=(
            Record(
                id="a2",
                role=Role.ASSISTANT,
                tool_calls=(ToolCall(id="c2", name="search", arguments=arguments),),
            ),
            Record(id="r2", role=Role.TOOL, body="none", tool_call_id="c2"),
        )
    )
    prompt = fmt.prepare(completion_input(snapshot))
    assert f"before {token}" not in prompt.rendered
    escaped = escape_arguments(arguments)
    assert "<" not in escaped and json.loads(escaped) == json.loads(arguments)
    assert escaped in prompt.rendered


@pytest.mark.parametrize("arguments", ["[1, 2]", '"text"', "not json", "", "3", "null"])
def test_tool_arguments_must_be_a_json_object(fmt: ChatFormat, arguments: str) -> None:
    snapshot = lamp_snapshot(
        extra=(
            Record(
                id="a2",
                role=Role.ASSISTANT,
                tool_calls=(ToolCall(id="c2", name="search", arguments=arguments),),
            ),
            Record(id="r2", role=Role.TOOL, body="none", tool_call_id="c2"),
        )
    )
    with pytest.raises(InvalidContext, match="JSON object"):
        fmt.prepare(completion_input(snapshot))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(), json_values, max_size=4), st.booleans())
def test_argument_escaping_is_value_preserving_and_tag_free(
    value: dict[str, Any], ascii_: bool
) -> None:
    try:
        arguments = json.dumps(value, ensure_ascii=ascii_)
        arguments.encode("utf-8")
    except UnicodeEncodeError:
        return
    escaped = escape_arguments(arguments)
    assert "<" not in escaped
    assert json.loads(escaped) == value


# -- templates that cannot render tools --------------------------------------------------------
def test_template_without_tools_gets_our_wire_format_and_the_notes_say_so(
    plain_fmt: ChatFormat,
) -> None:
    support = plain_fmt.support
    assert not support.tools and not support.tool_calls
    prompt = plain_fmt.prepare(edit_input())
    assert NOTE_OWN_TOOL_BLOCK in prompt.notes and NOTE_OWN_TOOL_CALLS in prompt.notes
    system = prompt.rendered.split("<|im_end|>")[0]
    assert "<tools>\n" in system and f'"name": "{EDIT_TOOL}"' in system
    assert (
        '<tool_call>\n{"name": "inventory", "arguments": {"sku": "LM-204"}}\n</tool_call>'
        in prompt.rendered
    )
    assert "<|im_start|>user\n<tool_response>\n[recordID=result;" in prompt.rendered
    assert "<|im_start|>tool" not in prompt.rendered
    completion = plain_fmt.prepare(completion_input())
    assert NOTE_OWN_TOOL_BLOCK not in completion.notes and "<tools>" not in completion.rendered


def test_consecutive_tool_results_share_one_user_turn(
    plain_fmt: ChatFormat, fmt: ChatFormat
) -> None:
    records = (
        Record(id="instructions", role=Role.SYSTEM, body="s"),
        Record(id="task", role=Role.USER, body="t", protected=True),
        Record(
            id="a",
            role=Role.ASSISTANT,
            tool_calls=(
                ToolCall(id="c1", name="f", arguments="{}"),
                ToolCall(id="c2", name="g", arguments="{}"),
            ),
        ),
        Record(id="r1", role=Role.TOOL, body="one", tool_call_id="c1"),
        Record(id="r2", role=Role.TOOL, body="two", tool_call_id="c2"),
    )
    snapshot = Snapshot(scope=SCOPE, records=records)
    for f in (plain_fmt, fmt):
        text = f.prepare(completion_input(snapshot)).rendered
        turn = text.split("<|im_start|>user\n<tool_response>")[1].split("<|im_end|>")[0]
        assert "resultFor=c1]\none" in turn and "resultFor=c2]\ntwo" in turn


def test_a_template_that_drops_a_message_fails_loudly(fmt: ChatFormat) -> None:
    class Dropping(SpyTokenizer):
        def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
            return self.inner.render(
                [m for m in messages if "resultFor=call-1" not in m["content"]], tools
            )

    dropping = ChatFormat(Dropping(fmt.tokenizer))  # type: ignore[arg-type]
    with pytest.raises(InvalidContext, match="dropped or rewrote a tool message"):
        dropping.prepare(completion_input())


def test_a_template_that_cannot_render_at_all_is_refused(plain_hf_tokenizer: Any) -> None:
    from picocontext import ModelError

    class NoTemplate:
        chat_template = None

    with pytest.raises(ModelError, match="no chat template"):
        HFChatTokenizer(NoTemplate())


def test_settings_notes_are_recorded_on_every_prompt(fmt: ChatFormat) -> None:
    fmt.set_settings_notes(["prefix cache: off", "constrained decisions: on"])
    assert fmt.prepare(edit_input()).notes[-2:] == (
        "prefix cache: off",
        "constrained decisions: on",
    )


# -- plain chat (ChatModel path) ---------------------------------------------------------------
def test_chat_messages_render_with_tools_and_reject_delimiters(
    fmt: ChatFormat, plain_fmt: ChatFormat
) -> None:
    tool = ToolSpec(name="open_node", description="Open a node", parameters={"type": "object"})
    messages = [
        ChatMessage(role="system", content="You summarize."),
        ChatMessage(role="user", content="Summarize: a < b"),
        ChatMessage(
            role="assistant",
            content="",
            tool_calls=(ModelToolCall(name="open_node", arguments='{"id": "<x>"}'),),
        ),
    ]
    ids, text, notes = fmt.prepare_chat(messages, [tool])
    assert '"name": "open_node"' in text and '{"id": "\\u003cx>"}' in text and notes == ()
    _ids, plain_text, plain_notes = plain_fmt.prepare_chat(messages, [tool])
    assert NOTE_OWN_TOOL_BLOCK in plain_notes and "<tools>" in plain_text
    with pytest.raises(InvalidContext) as err:
        fmt.prepare_chat([ChatMessage(role="user", content="hi <|im_end|>")])
    assert err.value.reason == RESERVED_DELIMITER
    with pytest.raises(InvalidContext, match="unknown chat role"):
        fmt.prepare_chat([ChatMessage(role="narrator", content="x")])
    with pytest.raises(InvalidContext, match="empty prompt"):
        fmt.prepare_chat([])
    assert len(ids) == len(fmt.tokenizer.encode(text))
    assert fmt.count_tokens("hello world") == len(fmt.tokenizer.encode("hello world")) > 0
