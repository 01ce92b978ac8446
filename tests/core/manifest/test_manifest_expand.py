"""Query expansion: the model sees the query and the collection hint only, its answer is
cleaned and cached, and the expanding navigator routes on the expansion words (at half a
typed word's weight) while every disclosure stays charged by the session."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picocontext.backend import ChatMessage, ModelResponse, ToolSpec
from picocontext.cancel import CancelToken
from picocontext.manifest.eval import NavCase, run_eval
from picocontext.manifest.expand import MAX_TERMS, QueryExpander, clean_expansion
from picocontext.manifest.index import EXPANSION_WEIGHT, DescriptorIndex, query_weights
from picocontext.manifest.model import Manifest
from picocontext.manifest.routing import (
    SubtreeNavigator,
    make_navigator,
)
from picocontext.manifest.runtime import dict_resolver
from picocontext.manifest.session import ModeConfig, NavSession
from picocontext.manifest.validate import load_manifest

QUERY = "find out which folders eat my storage"
BODIES = {"fs.du": "du walks a tree.", "fs.ls": "ls lists.", "net.ip": "ip shows addresses."}


class Chat:
    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.prompts: list[list[ChatMessage]] = []

    @property
    def model_id(self) -> str:
        return "fake-model"

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
        return ModelResponse(text=self.reply)


def _manifest(b: Any) -> Manifest:
    def leaf(nid: str, what: str, when: str) -> dict[str, Any]:
        ref = {"ref": f"node://{nid}"}
        title = nid.split(".")[1]
        return {"title": title, "what": what, "when": when, "tokens": 30, "payload": ref}

    nodes = {
        "fs": {"title": "Files", "what": "File tools", "when": "files",
               "children": ["fs.du", "fs.ls"]},
        "net": {"title": "Network", "what": "Network tools", "when": "networks",
                "children": ["net.ip"]},
        "fs.du": leaf("fs.du", "du: estimate directory space usage", "summarize, disk"),
        "fs.ls": leaf("fs.ls", "ls: list directory contents", "sort, long format"),
        "net.ip": leaf("net.ip", "ip: show addresses and routes", "interfaces"),
    }  # fmt: skip
    return load_manifest(b.doc(nodes, ["fs", "net"]))


def test_clean_expansion_drops_repeats_quotes_and_long_tails() -> None:
    assert clean_expansion("du, `du`, disk usage, du\n") == "du, disk usage"
    many = ", ".join(f"t{i}" for i in range(30))
    assert clean_expansion(many).count(",") == 11


@given(st.text(alphabet=st.sampled_from("ab ,;|`'\".\nXY-"), max_size=300))
def test_clean_expansion_is_a_short_list_of_distinct_terms(reply: str) -> None:
    out = clean_expansion(reply)
    parts = out.split(", ") if out else []
    assert len(parts) <= MAX_TERMS
    assert len({p.lower() for p in parts}) == len(parts)
    assert all(p and p == p.strip() and not set(p) & set(",;|\n") for p in parts)
    assert clean_expansion(out) == out


def test_the_model_sees_the_query_and_hint_only_and_is_asked_once() -> None:
    chat = Chat("du, disk usage, directory")
    exp = QueryExpander(chat, hint="Linux manual pages")
    assert exp.expand(QUERY) == "du, disk usage, directory"
    assert exp.expand(QUERY) == "du, disk usage, directory"
    assert exp.calls == 1 and len(chat.prompts) == 1
    prompt = chat.prompts[0]
    assert prompt[-1].content == QUERY and "Linux manual pages" in prompt[0].content
    assert all("du walks a tree" not in m.content for m in prompt)


def test_the_cache_round_trips_and_a_bad_file_is_empty(tmp_path: Path) -> None:
    chat = Chat("du")
    exp = QueryExpander(chat)
    exp.expand(QUERY)
    path = tmp_path / "sub" / "cache.json"
    exp.save(path)
    again = QueryExpander(Chat("never asked"), cache=QueryExpander.load(path))
    again.model = chat  # same model id: the key matches
    assert again.expand(QUERY) == "du" and again.calls == 0
    (tmp_path / "bad.json").write_text("[1, 2]", "utf-8")
    assert QueryExpander.load(tmp_path / "bad.json") == {}
    assert QueryExpander.load(tmp_path / "missing.json") == {}


def test_the_key_depends_on_model_hint_and_query() -> None:
    a = QueryExpander(Chat("x"), hint="one")
    assert a.key("q") != QueryExpander(Chat("x"), hint="two").key("q") != a.key("r")


def test_query_weights_keep_typed_words_strongest() -> None:
    q = query_weights("folders storage", "storage, directory")
    assert q == {"fold": 1.0, "storag": 1.0, "directory": EXPANSION_WEIGHT}


def test_expansion_words_route_where_the_query_words_do_not(b: Any) -> None:
    m = _manifest(b)
    index = DescriptorIndex(m)
    assert index.best_leaf(QUERY) is None
    assert index.best_leaf(query_weights(QUERY, "du, disk usage")) == "fs.du"
    s = NavSession(m, config=ModeConfig(view_level="full", inline_small_leaves=False),
                   resolver=dict_resolver(BODIES))  # fmt: skip
    plain = SubtreeNavigator(lateral=True)
    plain.prepare(m)
    assert plain.decide(QUERY, s.runtime.peek(), s.budget_remaining).verb == "stop"
    nav = SubtreeNavigator(expander=QueryExpander(Chat("du, disk usage")))
    nav.prepare(m)
    action = nav.decide(QUERY, s.runtime.peek(), s.budget_remaining)
    assert action.verb == "search" and action.query == f"{QUERY} du, disk usage"
    spent = s.spent
    text = s.search(action.query, action.k)
    assert "fs.du" in text and s.spent - spent == s.runtime.counter.count(text)
    follow = nav.decide(QUERY, s.runtime.peek(), s.budget_remaining)
    assert (follow.verb, follow.ids) == ("open", ("fs.du",))


def test_the_eval_reaches_the_target_through_the_expansion(b: Any) -> None:
    m = _manifest(b)
    nav = make_navigator("subtree-expand", expander=QueryExpander(Chat("du, disk usage")))
    assert nav.name == "subtree-expand"
    case = run_eval(m, [NavCase(query=QUERY, target="fs.du")], nav).cases[0]
    assert case.success and case.looks == ("search",) and case.path == ("fs.du",)
    assert case.shown_tokens >= (case.tokens_to_answer or 0) > 0


def test_subtree_expand_needs_an_expander() -> None:
    with pytest.raises(ValueError, match="needs an expander"):
        make_navigator("subtree-expand")
