"""NavSession verbs, modes and the never-decreasing shown_tokens (B10)."""

from __future__ import annotations

from typing import Any

import pytest

from fakechat import WordChat
from picocontext.manifest.errors import ManifestError, NotOnFrontier
from picocontext.manifest.model import Manifest
from picocontext.manifest.runtime import LeafResolver
from picocontext.manifest.session import DEFAULT_PROTOCOL, LOCAL, REMOTE, ModeConfig, NavSession
from picocontext.manifest.tokens import ChatModelCounter, HeuristicCounter


def test_b10_shown_tokens_never_decrease(tree: Manifest, resolver: LeafResolver) -> None:
    s = NavSession(tree, resolver=resolver)
    history = [s.shown_tokens]
    s.index()
    history.append(s.shown_tokens)
    s.open("a")
    history.append(s.shown_tokens)
    s.open("a.1")
    history.append(s.shown_tokens)
    spent_open = s.spent
    reclaimed = s.close("a.1")
    assert reclaimed > 0 and s.spent == spent_open - reclaimed  # the window shrinks...
    history.append(s.shown_tokens)  # ...but what the model has seen does not
    s.open("a.1")
    history.append(s.shown_tokens)
    assert history == sorted(history) and history[-1] > history[-2] == history[-3]


def test_shown_counts_exactly_the_returned_text(tree: Manifest, resolver: LeafResolver) -> None:
    c = HeuristicCounter()
    s = NavSession(tree, resolver=resolver)
    texts = [s.index(), s.look(["a"]), s.open("a"), s.open("a.1"), s.related("a.1")]
    assert s.shown_tokens == sum(c.count(t) for t in texts)
    assert texts[0].startswith(DEFAULT_PROTOCOL)
    assert not s.index().startswith(DEFAULT_PROTOCOL)  # the protocol is shown once


def test_protocol_text_is_charged_in_the_baseline(tree: Manifest) -> None:
    with_p = NavSession(tree)
    without = NavSession(tree, protocol=None)
    assert with_p.spent - without.spent == HeuristicCounter().count(DEFAULT_PROTOCOL)


def test_modes(tree: Manifest, resolver: LeafResolver) -> None:
    assert NavSession(tree).config == LOCAL and LOCAL.view_level == "brief"
    assert NavSession(tree, "remote").config == REMOTE
    with pytest.raises(ManifestError, match="Unknown mode 'fast'"):
        NavSession(tree, "fast")
    custom = ModeConfig(view_level="title", inline_small_leaves=False)
    assert NavSession(tree, "whatever", config=custom).runtime.view_level == "title"
    local = NavSession(tree, resolver=resolver)
    remote = NavSession(tree, "remote", resolver=resolver, protocol=None)
    assert local.runtime.baseline_tokens < NavSession(tree, "remote").runtime.baseline_tokens
    remote.open("a")
    text = remote.index()
    # small leaves are inlined in remote mode, charged, and only while they fit
    assert "verbatim body of a.1" in text and remote.runtime.is_spliced("a.1")
    assert remote.spent <= remote.runtime.effective_budget


def test_remote_inlining_skips_what_does_not_fit(tree: Manifest, resolver: LeafResolver) -> None:
    probe = NavSession(tree, "remote", resolver=resolver, protocol=None)
    probe.open("a")
    room = probe.runtime.expand_cost("a.1")
    s = NavSession(tree, "remote", resolver=resolver, protocol=None, budget=probe.spent + room + 1)
    s.open("a")
    s.index()
    assert s.runtime.is_spliced("a.1") and not s.runtime.is_spliced("a.2")


def test_related_and_filter_disclose_and_charge(tree: Manifest, resolver: LeafResolver) -> None:
    s = NavSession(tree, resolver=resolver)
    with pytest.raises(NotOnFrontier):
        s.related("a.1")
    s.open("a")
    before = s.spent
    text = s.related("a.1")
    assert "b.2" in text and "shares a setting" in text and s.spent > before
    assert s.runtime.is_visible("b.2")
    s.open("b.2")  # reachable now: it is on the frontier
    before = s.spent
    text = s.filter(kind="howto")
    assert "b.1" in text and s.runtime.is_visible("b.1") and s.spent > before
    assert s.filter(kind="none") == "(no node matches kind=none)"
    with pytest.raises(ManifestError, match="at least one facet"):
        s.filter()
    assert s.spent == sum(e.tokens for e in s.runtime.ledger())


def test_filter_limit(tree: Manifest) -> None:
    s = NavSession(tree)
    s.filter_limit = 1
    assert "(+1 more; narrow the filter)" in s.filter(kind="howto")


def test_model_tokenizer_is_pluggable(tree: Manifest, resolver: LeafResolver) -> None:
    counter = ChatModelCounter(WordChat())
    s = NavSession(tree, resolver=resolver, counter=counter)
    assert counter.name == "model:fake/words"
    s.open("a")
    s.open("a.1")
    assert s.spent == sum(len(e.text.split()) for e in s.runtime.ledger())


def test_session_uses_the_manifest_budget(homelab: Manifest, homelab_resolver: Any) -> None:
    s = NavSession(homelab, resolver=homelab_resolver, reserve=100)
    assert s.runtime.effective_budget == homelab.variant.budget - 100
    assert s.budget_remaining == s.runtime.effective_budget - s.spent
