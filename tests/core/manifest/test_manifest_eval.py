"""Eval harness: metrics, oracle and flat-list references, and unknown targets (B11)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from picocontext.manifest.errors import BudgetTooSmall, EvalError
from picocontext.manifest.eval import NavCase, load_cases, run_eval
from picocontext.manifest.model import Manifest
from picocontext.manifest.navigator import KeywordNavigator, LLMNavigator
from picocontext.manifest.runtime import Runtime
from picocontext.manifest.session import DEFAULT_PROTOCOL


def test_b11_unknown_target_is_an_error(tree: Manifest) -> None:
    cases = [NavCase(query="alpha", target="a.1"), NavCase(query="x", target="ghost")]
    with pytest.raises(EvalError, match="'ghost'"):
        run_eval(tree, cases, KeywordNavigator())
    with pytest.raises(EvalError, match="No cases"):
        run_eval(tree, [], KeywordNavigator())


def test_homelab_metrics(homelab: Manifest, homelab_resolver: Any, b: Any) -> None:
    cases = load_cases(b.homelab_dir / "cases.json")
    r = run_eval(homelab, cases, KeywordNavigator(), resolver=homelab_resolver)
    assert r.n == 10
    wins = [c for c in r.cases if c.success]
    assert r.navigation_success == len(wins) / 10 >= 0.8
    assert r.oracle_success == 1.0 and r.oracle_success >= r.navigation_success
    assert r.avg_hops == sum(c.hops for c in wins) / len(wins)
    assert r.first_view_tokens == Runtime(homelab, protocol_text=DEFAULT_PROTOCOL).baseline_tokens
    assert all(c.tokens_to_answer is not None and c.tokens_to_answer <= 2048 for c in wins)
    assert all(c.path[-1] == c.target for c in wins)
    assert r.full_load_tokens == homelab.full_tokens
    data = json.loads(json.dumps(r.to_dict()))
    assert data["disclosure_ratio"] == round(r.disclosure_ratio, 3)


def test_oracle_reports_unreachable_targets(homelab: Manifest, b: Any) -> None:
    cases = load_cases(b.homelab_dir / "cases.json")
    base = Runtime(homelab).baseline_tokens + 200  # room for the index, not for big reveals
    r = run_eval(homelab, cases, KeywordNavigator(), budget=base)
    assert r.oracle_success < 1.0
    assert r.navigation_success <= r.oracle_success
    with pytest.raises(BudgetTooSmall):
        run_eval(homelab, cases, KeywordNavigator(), budget=10)


def test_flat_list_baseline_respects_the_budget(homelab: Manifest, b: Any) -> None:
    cases = load_cases(b.homelab_dir / "cases.json")
    roomy = run_eval(homelab, cases, KeywordNavigator())
    assert roomy.flat_list_success > 0
    tight = run_eval(homelab, cases, KeywordNavigator(), budget=roomy.flat_list_tokens - 1)
    assert tight.flat_list_success == 0.0


def test_first_hop_precision_and_stops(tree: Manifest) -> None:
    cases = [NavCase(query="second beta leaf", target="b.2"), NavCase(query="zebra", target="a.1")]
    r = run_eval(tree, cases, KeywordNavigator())
    assert [c.success for c in r.cases] == [True, False]
    assert r.first_hop_precision == 0.5
    assert r.cases[1].stop_reason.startswith("stopped") and r.cases[1].path == ()


def test_facets_and_related_options(tree: Manifest) -> None:
    case = NavCase(query="beta", target="b.2", facet={"kind": "howto"})
    r = run_eval(
        tree,
        [NavCase(query="first alpha leaf", target="b.2")],
        KeywordNavigator(),
        use_related=True,
        max_hops=2,
    )
    assert r.cases[0].success and "see-also" in r.cases[0].stop_reason
    r = run_eval(tree, [case], KeywordNavigator(), use_facets=True)
    assert r.cases[0].shown_tokens > 0


def test_facet_first_navigation_opens_the_match_directly(homelab: Manifest) -> None:
    case = NavCase(
        query="the power went out, in which order do machines shut down",
        target="monitoring.ups",
        facet={"kind": "runbook"},
    )
    cold = run_eval(homelab, [case], KeywordNavigator()).cases[0]
    faceted = run_eval(homelab, [case], KeywordNavigator(), use_facets=True).cases[0]
    assert cold.path == ("monitoring", "monitoring.ups")
    assert faceted.path == ("monitoring.ups",)  # the filter put it on the frontier, charged
    assert faceted.success and faceted.tokens_to_answer is not None


class Replay:
    model_id = "replay"

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def chat(self, messages: Any, max_tokens: int, tools: Any = (), cancel: Any = None) -> Any:
        from picocontext.backend import ModelResponse

        return ModelResponse(text=self.replies.pop(0) if self.replies else "STOP")


def test_llm_navigator_route_with_look(tree: Manifest) -> None:
    nav = LLMNavigator(Replay(["LOOK a, b", "OPEN b", "OPEN b.2", "STOP"]))
    r = run_eval(tree, [NavCase(query="beta two", target="b.2")], nav, view_level="title")
    case = r.cases[0]
    assert case.success and case.path == ("b", "b.2") and case.looks == ("a", "b")
    assert r.navigator == "llm"


def test_load_cases_errors(tmp_path: Any) -> None:
    p = tmp_path / "c.json"
    p.write_text('{"query": "x"}')
    with pytest.raises(EvalError, match="JSON array"):
        load_cases(p)
    p.write_text('[{"query": "x"}]')
    with pytest.raises(EvalError, match="target"):
        load_cases(p)
    with pytest.raises(EvalError, match="Cannot read"):
        load_cases(tmp_path / "none.json")


def test_llm_navigator_lateral_verbs(tree: Manifest, homelab: Manifest) -> None:
    nav = LLMNavigator(Replay(["OPEN a", "RELATED a.1", "OPEN b.2"]))
    r = run_eval(tree, [NavCase(query="second beta", target="b.2")], nav)
    case = r.cases[0]
    assert case.success and case.path == ("a", "b.2") and case.looks == ("related:a.1",)
    nav = LLMNavigator(Replay(["FILTER kind=runbook", "OPEN monitoring.ups"]))
    r = run_eval(homelab, [NavCase(query="power outage", target="monitoring.ups")], nav)
    case = r.cases[0]
    assert case.success and case.path == ("monitoring.ups",)
    assert case.looks == ("filter:kind=runbook",)
    assert "kind=howto|reference|runbook" in nav.system_prompt()
