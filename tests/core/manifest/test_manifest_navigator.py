"""Navigators: the keyword baseline (B12) and the LLM navigator over a fake ChatModel (B23)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from picocontext.backend import ChatMessage, ModelResponse, ToolSpec
from picocontext.cancel import CancelToken
from picocontext.manifest.model import Manifest
from picocontext.manifest.navigator import KeywordNavigator, LLMNavigator, NavAction
from picocontext.manifest.runtime import Runtime
from picocontext.manifest.text import stem, terms
from picocontext.manifest.validate import load_manifest


def _two(b: Any, x: dict[str, Any], y: dict[str, Any]) -> Manifest:
    return load_manifest(
        b.doc(
            {
                "x": {**x, "payload": {"ref": "node://x"}},
                "y": {**y, "payload": {"ref": "node://y"}},
            },
            ["x", "y"],
        )
    )


def _choose(m: Manifest, query: str) -> NavAction:
    nav = KeywordNavigator()
    nav.prepare(m)
    rt = Runtime(m)
    return nav.decide(query, rt.peek(), rt.budget_remaining)


def test_b12_stemming_matches_inflections(b: Any) -> None:
    m = _two(
        b,
        {"title": "Drafting a post", "what": "Compose text.", "when": "new content"},
        {"title": "Scheduling", "what": "Set a time.", "when": "timing"},
    )
    assert _choose(m, "when should this finished draft go out").ids == ("x",)
    assert stem("drafting") == stem("draft") == stem("drafted")


def test_b12_filler_words_never_match(b: Any) -> None:
    m = _two(
        b,
        {
            "title": "Utils",
            "what": "Docs under utils/.",
            "when": "Consult for anything about utils.",
        },
        {"title": "Network", "what": "Sockets and ports.", "when": "net stuff"},
    )
    assert _choose(m, "tell me about it").verb == "stop"
    assert terms("Consult for anything about the various things") == []


def test_b12_keywords_count(b: Any) -> None:
    m = _two(
        b,
        {"title": "Alpha", "what": "First area.", "when": "one", "keywords": ["cron"]},
        {"title": "Beta", "what": "Second area.", "when": "two"},
    )
    assert _choose(m, "add a cron entry").ids == ("x",)


def test_b12_rare_terms_outweigh_common_ones(b: Any) -> None:
    nodes = {
        f"n{i}": {
            "what": f"Report number {i}.",
            "when": "report",
            "title": f"R{i}",
            "payload": {"ref": f"node://n{i}"},
        }
        for i in range(6)
    }
    nodes["n5"]["what"] = "Report about zfs resilver."
    nodes["n4"]["what"] = "Report report report."
    m = load_manifest(b.doc(nodes, list(nodes)))
    assert _choose(m, "report on the resilver").ids == ("n5",)


def test_field_weights_title_beats_when(b: Any) -> None:
    m = _two(
        b,
        {"title": "Other", "what": "Something.", "when": "backup later"},
        {"title": "Backup", "what": "Something else.", "when": "sometime"},
    )
    assert _choose(m, "backup").ids == ("y",)


def test_only_rendered_fields_are_read(b: Any) -> None:
    m = _two(
        b,
        {"title": "Alpha", "what": "First.", "when": "rotate keys"},
        {"title": "Beta", "what": "Second.", "when": "other"},
    )
    nav = KeywordNavigator()
    nav.prepare(m)
    rt = Runtime(m, view_level="title")
    assert nav.decide("rotate keys", rt.peek(), rt.budget_remaining).verb == "stop"
    rt.look(["x"])
    assert nav.decide("rotate keys", rt.peek(), rt.budget_remaining).ids == ("x",)


def test_unaffordable_and_opened_entries_are_skipped(tree: Manifest) -> None:
    nav = KeywordNavigator()
    nav.prepare(tree)
    rt = Runtime(tree)
    rt.expand("a")
    assert nav.decide("alpha", rt.peek(), rt.budget_remaining).ids[0] in ("a.1", "a.2")
    assert nav.decide("alpha", rt.peek(), 0).verb == "stop"


class ScriptChat:
    def __init__(self, replies: Sequence[str]) -> None:
        self.replies = list(replies)
        self.prompts: list[list[ChatMessage]] = []

    @property
    def model_id(self) -> str:
        return "fake"

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def chat(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        cancel: CancelToken | None = None,
    ) -> ModelResponse:
        self.prompts.append(list(messages))
        return ModelResponse(text=self.replies.pop(0))


def _llm(tree: Manifest, replies: Sequence[str]) -> tuple[LLMNavigator, ScriptChat, NavAction]:
    chat = ScriptChat(replies)
    nav = LLMNavigator(chat)
    rt = Runtime(tree)
    return nav, chat, nav.decide("alpha question", rt.peek(), rt.budget_remaining)


def test_b23_options_carry_title_kind_depth_cost(tree: Manifest) -> None:
    _, chat, action = _llm(tree, ["OPEN a"])
    assert action == NavAction(verb="open", ids=("a",))
    user = chat.prompts[0][-1].content
    assert "- a | branch | depth 1 | cost " in user and "Alpha: Alpha things" in user
    assert "OPEN <id>" in chat.prompts[0][0].content and "LOOK" in chat.prompts[0][0].content


def test_b23_invalid_id_is_reprompted_once(tree: Manifest) -> None:
    nav, chat, action = _llm(tree, ["OPEN zzz", "OPEN b"])
    assert action.ids == ("b",) and nav.reprompts == 1 and len(chat.prompts) == 2
    assert "'zzz' is not one of the listed option ids" in chat.prompts[1][-1].content
    nav, chat, action = _llm(tree, ["banana", "still banana"])
    assert action.verb == "stop" and "invalid reply twice" in action.reason
    assert len(chat.prompts) == 2


def test_llm_reply_forms(tree: Manifest) -> None:
    assert _llm(tree, ["`a`"])[2].ids == ("a",)  # a bare id is an open
    assert _llm(tree, ["look: a, b"])[2] == NavAction(verb="look", ids=("a", "b"))
    assert _llm(tree, ["STOP - nothing fits"])[2].verb == "stop"
    assert _llm(tree, ["open id=b\nbecause"])[2].ids == ("b",)


def test_lateral_verbs_are_validated(tree: Manifest, homelab: Manifest) -> None:
    nav = LLMNavigator(ScriptChat([]))
    nav.prepare(homelab)
    valid, linked = {"a", "b"}, {"a.1"}
    assert nav.parse("RELATED a.1", valid, linked) == NavAction(verb="related", ids=("a.1",))
    assert "see-also" in str(nav.parse("RELATED b", valid, linked))
    assert nav.parse("FILTER kind=runbook", valid, linked) == NavAction(
        verb="filter", facets={"kind": "runbook"}
    )
    assert "not a facet key" in str(nav.parse("FILTER color=red", valid, linked))
    assert "key=value" in str(nav.parse("FILTER kind", valid, linked))
    bare = LLMNavigator(ScriptChat([]), allow_lateral=False)
    bare.prepare(homelab)
    assert "RELATED" not in bare.system_prompt()
    assert "not available" in str(bare.parse("FILTER kind=runbook", valid, linked))
    plain = LLMNavigator(ScriptChat([]))
    plain.prepare(tree)  # tree has facets too: kind
    assert "FILTER" in plain.system_prompt()
