"""ChatSummarizer over a deterministic fake ChatModel, and the model embedder over a fake
hidden-state model (the real MLX model plugs into the same protocols)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext.backend import ChatMessage, ModelResponse, ToolSpec
from picocontext.cancel import CancelToken
from picocontext.distill import (
    ChatSummarizer,
    ChildDigest,
    EmbedderError,
    ModelEmbedder,
    ScopeRef,
    SummarizerError,
    SummaryInput,
)
from picocontext.distill.summarizer import clean_output
from picocontext.distill.testing import build, note
from picocontext.models.chatformat import QWEN_DELIMITERS


class FakeChat:
    """Answers with the first words of the last user message, deterministically."""

    def __init__(self, reply: str | None = None, model_id: str = "fake-chat") -> None:
        self.requests: list[tuple[list[ChatMessage], int]] = []
        self._reply = reply
        self._id = model_id

    @property
    def model_id(self) -> str:
        return self._id

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def chat(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        cancel: CancelToken | None = None,
    ) -> ModelResponse:
        self.requests.append((list(messages), max_tokens))
        if self._reply is not None:
            return ModelResponse(text=self._reply)
        body = messages[-1].content.split("\n\n", 1)[-1]
        return ModelResponse(text="<think>hmm</think>Summary: " + " ".join(body.split()[:6]))


def test_leaf_prompt_and_cleaning() -> None:
    chat = FakeChat()
    s = ChatSummarizer(chat, quantization="4bit")
    out = s.summarize(SummaryInput(level=0, kind="entity", raw="Pump vibration high", budget=40))
    assert out == "Pump vibration high"
    messages, max_tokens = chat.requests[0]
    assert messages[0].role == "system" and messages[1].role == "user"
    assert (
        "at most 40 words" in messages[1].content and "Pump vibration high" in messages[1].content
    )
    assert max_tokens == int(40 * 1.6) + 16
    assert s.summarizer_id == "chat:fake-chat@4bit"


def test_rollup_prompt_names_the_scope_and_lists_children() -> None:
    chat = FakeChat()
    s = ChatSummarizer(chat)
    s.summarize(
        SummaryInput(
            level=1,
            kind="scope",
            scope=ScopeRef(name="site", id="s1"),
            children=(
                ChildDigest(id="a", kind="entity", summary="alpha"),
                ChildDigest(id="b", kind="entity", summary="beta"),
            ),
        )
    )
    prompt = chat.requests[0][0][1].content
    assert "the site 's1'" in prompt and "- alpha\n- beta" in prompt


def test_prompt_digest_is_stable_and_enters_the_recipe(tmp_path: Path) -> None:
    a = ChatSummarizer(FakeChat())
    assert a.prompt_digest == ChatSummarizer(FakeChat()).prompt_digest
    d1 = build(tmp_path / "a", summarizer=a, recipe_version="")
    d2 = build(
        tmp_path / "b",
        summarizer=ChatSummarizer(FakeChat(model_id="other")),
        recipe_version="",
    )
    assert d1.recipe != d2.recipe


def test_long_inputs_are_summarised_in_pieces_never_truncated() -> None:
    chat = FakeChat()
    s = ChatSummarizer(chat, max_input_tokens=300)
    raw = " ".join(f"w{i}" for i in range(1000))
    s.summarize(SummaryInput(level=0, kind="entity", raw=raw, budget=20))
    seen = " ".join(m[0][1].content for m in chat.requests)
    for i in (0, 499, 999):
        assert f"w{i}" in seen
    assert all(chat.count_tokens(m[0][1].content) <= 300 for m in chat.requests)
    assert len(chat.requests) >= 4


def test_many_children_are_combined_in_halves() -> None:
    chat = FakeChat()
    s = ChatSummarizer(chat, max_input_tokens=256)
    kids = tuple(ChildDigest(id=f"c{i}", kind="entity", summary="word " * 30) for i in range(20))
    s.summarize(SummaryInput(level=1, kind="cluster", children=kids))
    assert all(chat.count_tokens(m[0][1].content) <= 256 for m in chat.requests)


def test_empty_output_is_an_error() -> None:
    s = ChatSummarizer(FakeChat(reply="<think>only thinking</think>  "))
    with pytest.raises(SummarizerError, match="empty summary"):
        s.summarize(SummaryInput(level=0, kind="entity", raw="x"))


def test_clean_output() -> None:
    assert clean_output("<think>a\nb</think>\nSummary: Done.") == "Done."
    assert clean_output("<think>unterminated") == ""
    assert clean_output("Here is the summary: ok") == "ok"


def test_distiller_with_the_chat_summarizer_end_to_end(tmp_path: Path) -> None:
    chat = FakeChat()
    d = build(tmp_path / "c", summarizer=ChatSummarizer(chat))
    d.apply([note("n1", "kiln relay clicks", "s1"), note("n2", "element cold", "s1")])
    root = d.store.get("digest:2:tenant")
    assert root is not None and d.cas.retrieve_text(root.summary_hash)
    assert len(chat.requests) == d.counters.get("summaries")


class FakeHidden:
    def __init__(self, size: int = 6) -> None:
        self._size = size

    @property
    def model_id(self) -> str:
        return "fake-hidden"

    @property
    def hidden_size(self) -> int:
        return self._size

    def hidden_states(self, text: str) -> npt.NDArray[np.floating]:
        rows = [[float((ord(ch) * (k + 1)) % 7) - 3 for k in range(self._size)] for ch in text]
        return np.array(rows, dtype=np.float32).reshape(len(text), self._size)


def test_model_embedder_mean_pools_and_normalises() -> None:
    e = ModelEmbedder(FakeHidden())
    out = e.embed(["abc", "", "abc"])
    assert out.shape == (3, 6) and e.dims == 6
    assert np.allclose(np.linalg.norm(out[0]), 1.0)
    assert np.array_equal(out[0], out[2]) and not out[1].any()
    states = FakeHidden().hidden_states("abc").astype(np.float64).mean(axis=0)
    assert np.allclose(out[0], states / np.linalg.norm(states))


def test_model_embedder_rejects_wrong_shapes() -> None:
    class Bad(FakeHidden):
        def hidden_states(self, text: str) -> npt.NDArray[np.floating]:
            return np.zeros((2, 3), dtype=np.float32)

    with pytest.raises(EmbedderError):
        ModelEmbedder(Bad()).embed(["x"])


def test_distiller_rejects_embedders_that_return_the_wrong_shape(tmp_path: Path) -> None:
    class Short:
        embedder_id = "short"
        dims = 4

        def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
            return np.zeros((len(texts), 3), dtype=np.float32)

    d = build(tmp_path / "c", embedder=Short())
    report = d.apply([note("n1", "text")])
    assert report.failures == 1 and "expected (1, 4)" in report.errors[0]


# -- chat-template markers in the text to summarise ------------------------------------------
QWEN_MARKERS = QWEN_DELIMITERS  # what the Qwen chat format refuses in any text


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(alphabet="<>|/[]abc _", max_size=12),
            st.sampled_from([*QWEN_MARKERS, "<|eot_id|>", "<s>", "[INST]"]),
        ),
        max_size=12,
    )
)
def test_defang_leaves_no_marker_and_keeps_plain_text(parts: list[str]) -> None:
    from picocontext.distill.summarizer import defang

    text = "".join(parts)
    out = defang(text, ("<s>", "[INST]"))
    for marker in (*QWEN_MARKERS, "<|eot_id|>", "<s>", "[INST]"):
        assert marker not in out
    if not any(m in text for m in (*QWEN_MARKERS, "<s>", "[INST]")) and "<|" not in text:
        assert out == text  # nothing to defang: untouched


def test_documents_that_quote_markers_are_summarised_and_summaries_carry_none() -> None:
    """A page about the wire format is data: the model sees look-alike brackets (the MLX chat
    format would refuse the real markers), and a summary echoing a marker is defanged too."""
    chat = FakeChat(reply="It explains <tool_call> blocks and <|im_end|>.")
    s = ChatSummarizer(chat)
    raw = "A call looks like <tool_call>{...}</tool_call>; turns end with <|im_end|>."
    out = s.summarize(SummaryInput(level=0, kind="entity", raw=raw, budget=40))
    sent = chat.requests[0][0][1].content
    assert "\u2039tool_call\u203a" in sent and "\u2039|im_end|\u203a" in sent
    assert not any(m in sent or m in out for m in QWEN_MARKERS)
    assert out == "It explains \u2039tool_call\u203a blocks and \u2039|im_end|\u203a."
