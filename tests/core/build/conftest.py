"""Shared fixtures for the build tests: the sample corpora and a scripted chat model."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from picocontext.backend import ChatMessage, ModelResponse, ToolSpec
from picocontext.cancel import CancelToken

CORPORA = Path(__file__).resolve().parents[3] / "resources" / "corpora"


@pytest.fixture
def corpora() -> Path:
    return CORPORA


class FakeChat:
    """A deterministic ChatModel: ``reply(kind, user_text)`` decides each answer. ``kind`` is
    read from the prompt (leaf, branch, contrast, grade, fidelity, retry)."""

    def __init__(self, reply: Callable[[str, str], str]) -> None:
        self.reply = reply
        self.prompts: list[tuple[str, str]] = []

    @property
    def model_id(self) -> str:
        return "fake-chat"

    def count_tokens(self, text: str) -> int:
        return max(1, len(text) // 4)

    @staticmethod
    def kind_of(user: str) -> str:
        if "read too much alike" in user:
            return "contrast"
        if "Score 0 to 1" in user:
            return "grade"
        if "list 5 short phrases" in user:
            return "fidelity"
        if user.startswith("Group title:"):
            return "branch"
        if user.startswith("Entry title:"):
            return "leaf"
        return "retry"

    def chat(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        cancel: CancelToken | None = None,
    ) -> ModelResponse:
        user = messages[1].content
        kind = self.kind_of(user)
        if messages[-1].role == "user" and len(messages) > 2:
            kind = "retry:" + kind
        self.prompts.append((kind, user))
        return ModelResponse(text=self.reply(kind, user))


def title_of(user: str) -> str:
    first = user.splitlines()[0]
    return first.split(":", 1)[1].strip()


def good_reply(kind: str, user: str) -> str:
    """A well-behaved model: distinct lines built from the entry title."""
    base = kind.removeprefix("retry:")
    if base in ("leaf", "branch"):
        t = title_of(user)
        return json.dumps(
            {
                "what": f"{t} explained",
                "when": f"pick for {t} questions specifically",
                "keywords": [t.split()[0].lower()],
            }
        )
    if base == "grade":
        return json.dumps({"score": 0.9, "reason": "clear"})
    if base == "fidelity":
        return json.dumps({"expect": ["controller", "sensor"]})
    if base == "contrast":
        rows = [ln for ln in user.splitlines() if ln[:1].isdigit()]
        items = []
        for row in rows:
            title = row.split(". ", 1)[1].split(" | ", 1)[0]
            items.append({"what": f"{title} explained", "when": f"only for {title} needs"})
        return json.dumps({"items": items})
    return "{}"


@pytest.fixture
def fake_chat() -> type[FakeChat]:
    return FakeChat


@pytest.fixture
def good() -> Callable[[str, str], str]:
    return good_reply
