"""The constrained LLM navigator: its reply grammar admits exactly the offered verbs with the
ids valid at this step (checked with llguidance's matcher on the tiny model's tokenizer), its
verb choices through a fake grammar-aware model, and the eval's budget charges for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fakechat import GrammarWordChat, WordChat
from picocontext.errors import ModelError
from picocontext.manifest.eval import NavCase, run_eval
from picocontext.manifest.model import Manifest
from picocontext.manifest.navigator import (
    LLMNavigator,
    NavAction,
    ReplyOptions,
    parse_constrained,
    reply_lark,
)
from picocontext.manifest.runtime import Runtime
from picocontext.manifest.session import ModeConfig, NavSession


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("llguidance")
    from picocontext.models.tiny import write_tiny_model

    path: Path = write_tiny_model(tmp_path_factory.mktemp("tiny-nav-grammar"))
    return transformers.AutoTokenizer.from_pretrained(str(path))


@pytest.fixture(scope="module")
def grammar(tokenizer: Any) -> Any:
    from picocontext.models.constrained import DecisionGrammar

    return DecisionGrammar(tokenizer, len(tokenizer), tokenizer.eos_token_id)


def accepts(grammar: Any, tokenizer: Any, lark: str, text: str) -> bool:
    """Whether ``text`` followed by end-of-sequence is a complete reply under ``lark``."""
    ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
    return bool(grammar.matcher_for(lark).validate_tokens(ids) == len(ids))


def test_the_grammar_admits_every_offered_step_and_nothing_else(
    grammar: Any, tokenizer: Any, tree: Manifest
) -> None:
    nav = LLMNavigator(GrammarWordChat([]), decoding="constrained")
    nav.prepare(tree)
    rt = Runtime(tree, view_level="title")
    rt.expand("a")  # a.1 and a.2 visible; a.1 links to b.2, which is not visible yet
    entries = rt.peek()
    options = nav.options(entries, rt.budget_remaining)
    assert set(options.openable) == {"b", "a.1", "a.2"} and "a" not in options.openable
    assert set(options.lookable) == set(options.openable)
    assert options.linked == ("a.1",)
    lark = reply_lark(options)
    offered = [
        *(f"OPEN {i}" for i in options.openable),
        *(f"LOOK {i}" for i in options.lookable),
        "LOOK a.1, a.2",
        "RELATED a.1",
        *(f"FILTER {pair}" for pair in options.facets),
        "STOP",
        "b",  # a bare id is an OPEN
    ]
    for text in offered:
        assert accepts(grammar, tokenizer, lark, text), text
    refused = [
        "OPEN a",  # already open
        "OPEN zzz",  # not on the frontier
        "OPEN b.2",  # not visible
        "RELATED b",  # no see-also links
        "FILTER kind=nothing",  # not in the facet vocabulary
        "FILTER color=red",
        "LOOK a.1, a.2, b",  # more than two
        "open b",
        "OPEN b because",
        "STOP now",
        "zzz",
    ]
    for text in refused:
        assert not accepts(grammar, tokenizer, lark, text), text


def test_an_unaffordable_entry_cannot_be_named(
    grammar: Any, tokenizer: Any, tree: Manifest
) -> None:
    nav = LLMNavigator(GrammarWordChat([]), decoding="constrained")
    rt = Runtime(tree)
    rt.expand("a")
    entries = rt.peek()
    leaf_cost = next(e.expand_cost for e in entries if e.node_id == "a.1")
    branch_cost = next(e.expand_cost for e in entries if e.node_id == "b")
    assert branch_cost < leaf_cost
    options = nav.options(entries, branch_cost)  # b is affordable, the leaves are not
    assert options.openable == ("b",)
    lark = reply_lark(options)
    assert accepts(grammar, tokenizer, lark, "OPEN b")
    assert not accepts(grammar, tokenizer, lark, "OPEN a.1")
    assert not accepts(grammar, tokenizer, lark, "LOOK a.2")


def test_verbs_without_anything_to_name_are_not_offered() -> None:
    lark = reply_lark(ReplyOptions(openable=("x",)))
    assert "LOOK" not in lark and "RELATED" not in lark and "FILTER" not in lark
    assert '"OPEN " open_id' in lark and '"STOP"' in lark


def test_lateral_and_look_switches_shape_the_options(tree: Manifest) -> None:
    nav = LLMNavigator(
        GrammarWordChat([]), decoding="constrained", allow_look=False, allow_lateral=False
    )
    nav.prepare(tree)
    rt = Runtime(tree)
    rt.expand("a")
    options = nav.options(rt.peek(), rt.budget_remaining)
    assert options.lookable == options.linked == options.facets == ()
    looker = LLMNavigator(GrammarWordChat([]), decoding="constrained")
    titles = Runtime(tree, view_level="title")
    assert "b" in looker.options(titles.peek(), titles.budget_remaining).lookable
    titles.look(["b"], "full")  # shown in full: looking again would disclose nothing
    assert "b" not in looker.options(titles.peek(), titles.budget_remaining).lookable


def test_constrained_replies_parse_exactly() -> None:
    options = ReplyOptions(
        openable=("a", "b"), lookable=("a", "b"), linked=("a",), facets=("kind=howto",)
    )
    assert parse_constrained("OPEN b", options) == NavAction(verb="open", ids=("b",))
    assert parse_constrained("b", options) == NavAction(verb="open", ids=("b",), reason="bare id")
    assert parse_constrained("LOOK a, b", options) == NavAction(verb="look", ids=("a", "b"))
    assert parse_constrained("RELATED a", options) == NavAction(verb="related", ids=("a",))
    assert parse_constrained("FILTER kind=howto", options) == NavAction(
        verb="filter", facets={"kind": "howto"}
    )
    assert parse_constrained("STOP", options).verb == "stop"  # type: ignore[union-attr]
    for bad in ("OPEN c", "RELATED b", "OPEN a, b", "OPEN", "LOOK a, b, a", "hello", "c"):
        assert isinstance(parse_constrained(bad, options), str), bad


def test_the_navigator_decodes_under_the_step_grammar(tree: Manifest) -> None:
    chat = GrammarWordChat(["OPEN b"])
    nav = LLMNavigator(chat, decoding="constrained")
    assert nav.name == "llm-constrained" and LLMNavigator(chat).name == "llm"
    rt = Runtime(tree)
    action = nav.decide("beta", rt.peek(), rt.budget_remaining)
    assert action == NavAction(verb="open", ids=("b",))
    sent = chat.grammars[0]
    assert sent is not None and '"a" | "b"' in sent
    assert nav.calls == 1 and nav.reprompts == 0 and nav.invalid == 0


def test_a_reply_outside_the_grammar_is_counted_not_reprompted(tree: Manifest) -> None:
    chat = GrammarWordChat(["OPEN zzz"])  # a model that ignored its grammar
    nav = LLMNavigator(chat, decoding="constrained")
    rt = Runtime(tree)
    action = nav.decide("beta", rt.peek(), rt.budget_remaining)
    assert action.verb == "stop" and "zzz" in action.reason
    assert nav.calls == 1 and nav.reprompts == 0 and nav.invalid == 1


def test_free_mode_sends_no_grammar_and_counts_invalid_replies(tree: Manifest) -> None:
    chat = GrammarWordChat(["OPEN zzz", "OPEN b"])
    nav = LLMNavigator(chat)
    rt = Runtime(tree)
    assert nav.decide("beta", rt.peek(), rt.budget_remaining).ids == ("b",)
    assert chat.grammars == [None, None]
    assert nav.invalid == 1 and nav.reprompts == 1 and nav.calls == 2


def test_a_model_that_cannot_constrain_is_refused() -> None:
    with pytest.raises(ModelError, match="decoding='free'"):
        LLMNavigator(WordChat(model_id="plain"), decoding="constrained")
    assert LLMNavigator(WordChat(model_id="plain")).decoding == "free"


def test_constrained_route_in_the_eval_charges_every_shown_token(tree: Manifest) -> None:
    replies = ["LOOK a, b", "OPEN b", "OPEN b.2"]
    nav = LLMNavigator(GrammarWordChat(replies), decoding="constrained")
    report = run_eval(tree, [NavCase(query="beta two", target="b.2")], nav, view_level="title")
    case = report.cases[0]
    assert report.navigator == "llm-constrained"
    assert case.success and case.path == ("b", "b.2") and case.looks == ("a", "b")
    # the same steps by hand: every text a verb returns is charged as it is shown
    s = NavSession(tree, config=ModeConfig(view_level="title", inline_small_leaves=False))
    s.index()
    before = s.shown_tokens
    looked = s.look(["a", "b"])
    assert s.shown_tokens == before + s.runtime.counter.count(looked) > before
    before = s.shown_tokens
    opened = s.open("b")
    assert s.shown_tokens == before + s.runtime.counter.count(opened) > before
    s.open("b.2")
    assert case.shown_tokens == s.shown_tokens
    assert case.tokens_to_answer == s.spent
