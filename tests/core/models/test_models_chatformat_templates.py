"""Our reviewed chat templates render the wire format each embedded model was trained on.

The expected Qwen2.5 text is written out by hand from the published Qwen2.5 format: a system
turn that, with tools, gains a ``# Tools`` section with one JSON signature per line inside
``<tools></tools>`` and the ``<tool_call>`` reply example; assistant calls as ``<tool_call>``
JSON objects; consecutive tool results grouped into one user turn of ``<tool_response>``
blocks; ``<|im_start|>assistant`` as the generation prompt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from picocontext import ChatMessage, InvalidContext, ToolSpec
from picocontext.models.chatformat import (
    NOTE_OWN_TOOL_BLOCK,
    NOTE_OWN_TOOL_CALLS,
    QWEN_DEVELOPER,
    ChatFormat,
    HFChatTokenizer,
)
from picocontext.models.chattemplates import (
    QWEN25_CALL_EXAMPLE,
    QWEN25_DEFAULT_SYSTEM,
    QWEN25_TEMPLATE,
    QWEN25_TOOLS_HEADER,
    SMOLLM2_DEFAULT_SYSTEM,
    SMOLLM2_TEMPLATE,
)
from picocontext.models.tiny import write_tiny_model

transformers = pytest.importorskip("transformers")

TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Find a record",
        "parameters": {"type": "object", "properties": {"sku": {"type": "string"}}},
    },
}


def _tokenizer(folder: Path, template: str) -> Any:
    write_tiny_model(folder, chat_template=template)
    return transformers.AutoTokenizer.from_pretrained(str(folder))


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _tokenizer(tmp_path_factory.mktemp("qwen25"), QWEN25_TEMPLATE)


@pytest.fixture(scope="module")
def smol(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _tokenizer(tmp_path_factory.mktemp("smollm2"), SMOLLM2_TEMPLATE)


def _render(tokenizer: Any, messages: list[dict[str, Any]], tools: Any = None) -> str:
    return str(
        tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=True
        )
    )


def _call(name: str, arguments: Any) -> dict[str, Any]:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_qwen25_tool_conversation_renders_the_published_wire_format(qwen: Any) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Price of LM-204?"},
        {"role": "assistant", "content": "", "tool_calls": [_call("lookup", '{"sku": "LM-204"}')]},
        {"role": "tool", "content": "price 37.50"},
        {"role": "tool", "content": "stock 7"},
        {"role": "assistant", "content": "37.50 USD"},
        {"role": "user", "content": "Thanks"},
    ]
    text = _render(qwen, messages, [TOOL])
    system_end = text.index("<|im_end|>")
    system = text[:system_end]
    assert system.startswith("<|im_start|>system\nBe brief.\n\n" + QWEN25_TOOLS_HEADER + "\n\n")
    assert "\n<tools>\n" + json.dumps(TOOL) + "\n</tools>\n\n" in system
    assert system.endswith(QWEN25_CALL_EXAMPLE + "</tool_call>")
    assert text[system_end:] == (
        "<|im_end|>\n"
        "<|im_start|>user\nPrice of LM-204?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n"
        '{"name": "lookup", "arguments": {"sku": "LM-204"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\nprice 37.50\n</tool_response>\n"
        "<tool_response>\nstock 7\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n37.50 USD<|im_end|>\n"
        "<|im_start|>user\nThanks<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_qwen25_without_tools_or_system_uses_the_models_default_identity(qwen: Any) -> None:
    assert _render(qwen, [{"role": "user", "content": "Hi"}]) == (
        f"<|im_start|>system\n{QWEN25_DEFAULT_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    with_tools = _render(qwen, [{"role": "user", "content": "Hi"}], [TOOL])
    assert with_tools.startswith(f"<|im_start|>system\n{QWEN25_DEFAULT_SYSTEM}\n\n# Tools")


def test_qwen25_call_arguments_are_encoded_once(qwen: Any) -> None:
    as_text = [{"role": "assistant", "content": "ok", "tool_calls": [_call("f", '{"a": 1}')]}]
    as_dict = [{"role": "assistant", "content": "ok", "tool_calls": [_call("f", {"a": 1})]}]
    for messages in (as_text, as_dict):
        text = _render(qwen, [{"role": "user", "content": "u"}, *messages])
        assert (
            '<|im_start|>assistant\nok\n<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n' in text
        )


def test_qwen25_refuses_a_role_it_has_no_turn_for(qwen: Any) -> None:
    with pytest.raises(Exception, match="no developer turn"):
        _render(qwen, [{"role": "developer", "content": "x"}, {"role": "user", "content": "u"}])


def test_chatformat_uses_the_qwen25_template_natively(qwen: Any) -> None:
    chat = ChatFormat(HFChatTokenizer(qwen))
    support = chat.support
    assert support.native_tool_protocol and not support.developer and support.qwen_family

    _ids, rendered, notes = chat.prepare_chat(
        [ChatMessage(role="user", content="Price?")],
        [ToolSpec(name="lookup", description="Find", parameters={"type": "object"})],
    )
    assert notes == () and "# Tools" in rendered and rendered.endswith("<|im_start|>assistant\n")
    with pytest.raises(InvalidContext) as err:
        chat.prepare_chat([ChatMessage(role="developer", content="x")])
    assert err.value.reason == QWEN_DEVELOPER


def test_smollm2_template_is_plain_chatml_and_the_adapter_adds_the_tool_protocol(
    smol: Any,
) -> None:
    assert _render(smol, [{"role": "user", "content": "Hi"}]) == (
        f"<|im_start|>system\n{SMOLLM2_DEFAULT_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    chat = ChatFormat(HFChatTokenizer(smol))
    assert not chat.support.tools and not chat.support.tool_role
    rendering = chat._adapt(
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "U"},
            {"role": "assistant", "content": "", "tool_calls": [_call("f", '{"a": 1}')]},
            {"role": "tool", "content": "R"},
        ],
        [TOOL],
    )
    assert rendering.notes == (NOTE_OWN_TOOL_BLOCK, NOTE_OWN_TOOL_CALLS)
    text = chat.render_text(rendering)
    assert "<|im_start|>user\n<tool_response>\nR\n</tool_response><|im_end|>" in text
