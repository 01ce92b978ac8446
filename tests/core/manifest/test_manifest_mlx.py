"""The LLM navigator and the model-tokenizer counter over the real MLX path, with the tiny
random-weight model (its replies are forced token by token, so the route is deterministic)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from picocontext.manifest.eval import NavCase, run_eval
from picocontext.manifest.model import Manifest
from picocontext.manifest.navigator import LLMNavigator, reply_lark
from picocontext.manifest.session import NavSession
from picocontext.manifest.tokens import ChatModelCounter
from picocontext.manifest.validate import load_manifest
from tinymlx import scripted_replies, tiny_model

pytestmark = pytest.mark.mlx


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from tiny_model(tmp_path_factory, "tiny-nav")


def test_llm_navigator_drives_an_mlx_model(tiny: Any, homelab: Manifest) -> None:
    # the first reply names a node that is not offered: the navigator re-prompts once
    replies = ("OPEN nowhere", "OPEN network", "OPEN network.dns")
    tiny.extra_processors = scripted_replies(tiny, *replies)
    try:
        nav = LLMNavigator(tiny, max_tokens=16)
        report = run_eval(
            homelab, [NavCase(query="nas.lab does not resolve", target="network.dns")], nav
        )
    finally:
        tiny.extra_processors = None
    case = report.cases[0]
    assert case.success and case.path == ("network", "network.dns")
    # route: invalid reply, re-prompt with the reason, then two valid opens
    assert nav.transcript[0][1].startswith("OPEN nowhere")
    assert "'nowhere' is not one of the listed option ids" in nav.transcript[1][0]
    assert [r for _, r in nav.transcript[1:3]] == ["OPEN network", "OPEN network.dns"]


def test_model_tokenizer_prices_the_session(tiny: Any, homelab: Manifest) -> None:
    counter = ChatModelCounter(tiny)
    s = NavSession(homelab, counter=counter)
    s.open("storage")
    assert counter.name == "model:tiny-nav"
    assert s.spent == sum(tiny.count_tokens(e.text) for e in s.runtime.ledger())


def test_a_descriptor_the_chat_template_refuses_spoils_only_its_cases(
    tiny: Any, homelab: Manifest
) -> None:
    doc = homelab.to_dict()
    doc["nodes"]["network.vpn"]["what"] = "WireGuard peers<|im_end|>"
    manifest = load_manifest(doc)
    cases = [
        NavCase(query="photos quota", target="storage.pool"),
        NavCase(query="wireguard", target="network.vpn"),
    ]
    tiny.extra_processors = scripted_replies(
        tiny, "OPEN storage", "OPEN storage.pool", "OPEN network"
    )
    try:
        report = run_eval(manifest, cases, LLMNavigator(tiny, max_tokens=16))
    finally:
        tiny.extra_processors = None
    clean, spoiled = report.cases
    assert clean.success and clean.error is None
    assert spoiled.error is not None and "'network.vpn' (what: '<|im_end|>')" in spoiled.error
    assert report.errors == 1 and "reserved" in spoiled.error
    assert clean.flat_error is not None  # the flat list shows network.vpn too


def test_constrained_navigator_on_mlx_always_parses_and_stops_at_the_structure(
    tiny: Any, homelab: Manifest
) -> None:
    # random weights, free generation: whatever the model picks, the grammar keeps it valid
    nav = LLMNavigator(tiny, decoding="constrained")
    nav.prepare(homelab)
    session = NavSession(homelab)
    session.index()
    entries = session.runtime.peek()
    for query in ("nas.lab does not resolve", "photos quota", "power outage"):
        action = nav.decide(query, entries, session.budget_remaining)
        assert action.verb in ("open", "look", "related", "filter", "stop")
    assert nav.invalid == 0 and nav.reprompts == 0 and nav.calls == 3
    options = nav.options(entries, session.budget_remaining)
    reply = tiny.chat(
        nav.prompt("x", entries, session.budget_remaining), 96, grammar=reply_lark(options)
    )
    assert not reply.reached_token_limit  # ended with the structure, not at the cap
    assert reply.generated_tokens < 96


def test_a_malformed_grammar_is_a_model_error(tiny: Any) -> None:
    from picocontext.backend import ChatMessage
    from picocontext.errors import ModelError

    with pytest.raises(ModelError, match="grammar was rejected"):
        tiny.chat([ChatMessage(role="user", content="hi")], 8, grammar="start: (")
