"""Subtree routing: branch scores from the descriptors below, back-outs, lateral verbs, and
that every step is charged by the session (never read from payloads nobody opened)."""

from __future__ import annotations

from typing import Any

import pytest

from picocontext.manifest.eval import NavCase, run_eval
from picocontext.manifest.index import DescriptorIndex, DescriptorSearch
from picocontext.manifest.model import Manifest
from picocontext.manifest.navigator import KeywordNavigator
from picocontext.manifest.routing import (
    NAVIGATORS,
    SCAN_K,
    SubtreeNavigator,
    make_navigator,
)
from picocontext.manifest.runtime import KeywordSearch, dict_resolver
from picocontext.manifest.session import ModeConfig, NavSession
from picocontext.manifest.validate import load_manifest

FULL = ModeConfig(view_level="full", inline_small_leaves=False)
QUERY = "how much free space is left on the mounted filesystems"
BODIES = {
    "tools.disk": "df prints sizes. A secret word: zebra.",
    "tools.net": "ip shows addresses.",
    "docs.backup": "Dump the database nightly.",
    "docs.restore": "Load the dump back.",
}


def _leaf(title: str, what: str, when: str, **kw: Any) -> dict[str, Any]:
    return {"title": title, "what": what, "when": when, "tokens": 40, **kw}


def _manifest(b: Any, *, link: bool = False) -> Manifest:
    restore_links = [{"to": "tools.disk", "why": "both read disks"}] if link else []
    nodes = {
        "tools": {"title": "Toolbox", "what": "Assorted helpers", "when": "odd jobs",
                  "children": ["tools.disk", "tools.net"]},
        "docs": {"title": "Guides", "what": "Guide pages", "when": "step by step",
                 "children": ["docs.backup", "docs.restore"]},
        "tools.disk": _leaf("Disk report", "Report free space on mounted filesystems",
                            "space left, capacity", payload={"ref": "node://tools.disk"}),
        "tools.net": _leaf("Addresses", "Show network interface addresses", "ip, routes",
                           payload={"ref": "node://tools.net"}),
        "docs.backup": _leaf("Back up", "Back up a database every night", "dump, schedule",
                             payload={"ref": "node://docs.backup"}),
        "docs.restore": _leaf("Restore", "Restore a database from a dump", "recover, load",
                              payload={"ref": "node://docs.restore"}, links=restore_links),
    }  # fmt: skip
    return load_manifest(b.doc(nodes, ["tools", "docs"]))


def _session(m: Manifest, budget: int | None = None) -> NavSession:
    return NavSession(m, config=FULL, budget=budget, resolver=dict_resolver(BODIES))


def _decide(nav: SubtreeNavigator, m: Manifest, s: NavSession, query: str = QUERY) -> Any:
    nav.prepare(m)
    return nav.decide(query, s.runtime.peek(), s.budget_remaining)


def test_a_vague_branch_is_scored_by_the_leaves_below_it(b: Any) -> None:
    m = _manifest(b)
    s = _session(m)
    keyword = KeywordNavigator()
    keyword.prepare(m)
    assert keyword.decide(QUERY, s.runtime.peek(), s.budget_remaining).verb == "stop"
    action = _decide(SubtreeNavigator(), m, s)
    assert (action.verb, action.ids) == ("open", ("tools",))
    scores = DescriptorIndex(m).scores(QUERY)
    assert scores["tools"] > scores["docs"] == 0.0
    assert scores["tools"] >= scores["tools.disk"] > 0


def test_scores_never_read_payloads(b: Any) -> None:
    m = _manifest(b)
    assert DescriptorIndex(m).scores("zebra")["tools.disk"] == 0.0
    assert _decide(SubtreeNavigator(), m, _session(m), "zebra").verb == "stop"


def test_one_manifest_object_is_indexed_once_and_an_equal_copy_again(b: Any) -> None:
    m = _manifest(b)
    index = DescriptorIndex.of(m)
    assert DescriptorIndex.of(m) is index
    copy = m.model_copy()
    again = DescriptorIndex.of(copy)
    # identity, not equality: a copy is indexed for itself, and scores the same
    assert again is not index and again.scores(QUERY) == index.scores(QUERY)
    for _ in range(8):  # the shared indexes are few; an old one is dropped
        DescriptorIndex.of(m.model_copy())
    assert DescriptorIndex.of(m) is not index


def test_subtree_walks_straight_to_the_leaf_in_the_eval(b: Any) -> None:
    m = _manifest(b)
    report = run_eval(m, [NavCase(query=QUERY, target="tools.disk")], SubtreeNavigator())
    case = report.cases[0]
    assert case.success and case.path == ("tools", "tools.disk") and case.looks == ()


def test_backout_closes_an_open_branch_that_cannot_win(b: Any) -> None:
    m = _manifest(b)
    s = _session(m)
    before = s.spent
    s.open("docs")  # a wrong turn: its leaves share nothing with the query
    plain = _decide(SubtreeNavigator(), m, s)
    assert (plain.verb, plain.ids) == ("open", ("tools",))
    action = _decide(SubtreeNavigator(backout=True), m, s)
    assert (action.verb, action.ids) == ("close", ("docs",))
    freed = s.close("docs")
    assert freed > 0 and s.spent == before


def test_backout_keeps_the_branch_on_the_way(b: Any) -> None:
    m = _manifest(b)
    s = _session(m)
    s.open("tools")
    action = _decide(SubtreeNavigator(backout=True), m, s)
    assert (action.verb, action.ids) == ("open", ("tools.disk",))


def test_lateral_searches_once_and_the_hits_are_charged(b: Any) -> None:
    m = _manifest(b)
    s = _session(m)
    nav = SubtreeNavigator(lateral=True)
    action = _decide(nav, m, s)
    assert action.verb == "search" and action.query == QUERY
    spent, shown = s.spent, s.shown_tokens
    text = s.search(action.query, action.k)
    assert "tools.disk" in text and "search hit" in text
    assert s.spent - spent == s.shown_tokens - shown == s.runtime.counter.count(text)
    follow = nav.decide(QUERY, s.runtime.peek(), s.budget_remaining)
    assert (follow.verb, follow.ids) == ("open", ("tools.disk",))


def test_lateral_follows_a_see_also_link_to_the_best_leaf(b: Any) -> None:
    m = _manifest(b, link=True)
    s = _session(m)
    s.open("docs")
    action = _decide(SubtreeNavigator(lateral=True), m, s)
    assert (action.verb, action.ids) == ("related", ("docs.restore",))


def test_the_eval_runs_close_and_search_through_the_session(b: Any) -> None:
    m = _manifest(b)
    report = run_eval(
        m, [NavCase(query=QUERY, target="tools.disk")], make_navigator("subtree-lateral")
    )
    case = report.cases[0]
    assert case.success and case.looks == ("search",) and case.path == ("tools.disk",)
    assert case.tokens_to_answer is not None and case.shown_tokens >= case.tokens_to_answer


def test_a_leaf_that_does_not_fit_is_never_chosen(b: Any) -> None:
    m = _manifest(b)
    s = _session(m, budget=None)
    s.open("tools")
    nav = SubtreeNavigator()
    nav.prepare(m)
    assert nav.decide(QUERY, s.runtime.peek(), s.budget_remaining).ids == ("tools.disk",)
    got = nav.decide(QUERY, s.runtime.peek(), 10)
    assert got.verb == "stop" and "do not fit" in got.reason


def test_navigators_are_found_by_their_names() -> None:
    for name in NAVIGATORS:
        assert make_navigator(name).name == name
    with pytest.raises(ValueError, match="unknown navigator 'nope'"):
        make_navigator("nope")


def _paged(b: Any) -> Manifest:
    """``tools.disk`` is a document the build cut into two pages; ``tools.mounts`` is not."""
    nodes = {
        "tools": {"title": "Toolbox", "what": "Assorted helpers", "when": "odd jobs",
                  "children": ["tools.disk", "tools.mounts"]},
        "tools.disk": {"title": "Disk report", "what": "Report free space, in pages",
                       "when": "space left", "children": ["tools.disk~p1", "tools.disk~p2"]},
        "tools.disk~p1": _leaf("Disk report (part 1 of 2)", "Report free space on mounted "
                               "filesystems", "space left", payload={"ref": "node://tools.disk~p1"}),
        "tools.disk~p2": _leaf("Disk report (part 2 of 2)", "Free space options for mounted "
                               "filesystems", "space left", payload={"ref": "node://tools.disk~p2"}),
        "tools.mounts": _leaf("Mount table", "List mounted filesystems and free space", "mounts",
                              payload={"ref": "node://tools.mounts"}),
    }  # fmt: skip
    return load_manifest(b.doc(nodes, ["tools"]))


def test_parts_are_the_pages_of_one_document(b: Any) -> None:
    index = DescriptorIndex(_paged(b))
    assert index.parts("tools.disk~p2") == ("tools.disk~p1", "tools.disk~p2")
    assert index.parts("tools.mounts") == ("tools.mounts",)


def test_scan_searches_wider_first(b: Any) -> None:
    m = _paged(b)
    action = _decide(SubtreeNavigator(scan=True), m, _session(m))
    assert action.verb == "search" and action.k == SCAN_K > 5
    assert make_navigator("subtree-scan").name == "subtree-scan"


def test_scan_never_reads_another_page_of_a_document_that_was_not_it(b: Any) -> None:
    m = _paged(b)
    pages = {i: f"text of {i}" for i in ("tools.disk~p1", "tools.disk~p2", "tools.mounts")}
    for scan in (False, True):
        s = NavSession(m, config=FULL, resolver=dict_resolver(pages))
        nav = SubtreeNavigator(lateral=True, scan=scan)
        nav.prepare(m)
        s.runtime.disclose(list(pages), dict.fromkeys(pages, "test"))  # every leaf in view
        first = nav.decide(QUERY, s.runtime.peek(), s.budget_remaining)
        assert first.verb == "open" and first.ids[0].startswith("tools.disk~p")
        before = s.spent
        s.open(first.ids[0])
        close = nav.decide(QUERY, s.runtime.peek(), s.budget_remaining)
        assert (close.verb, close.ids) == ("close", first.ids)
        assert s.close(first.ids[0]) > 0 and s.spent == before
        nxt = nav.decide(QUERY, s.runtime.peek(), s.budget_remaining)
        assert nxt.verb == "open"
        assert nxt.ids[0].startswith("tools.disk~p") is not scan, (scan, nxt)


def test_reading_a_page_of_the_target_reaches_it_and_says_so(b: Any) -> None:
    m = _paged(b)
    pages = {i: f"text of {i}" for i in ("tools.disk~p1", "tools.disk~p2", "tools.mounts")}
    cases = [NavCase(query=QUERY, target="tools.disk"), NavCase(query=QUERY, target="tools.mounts")]
    report = run_eval(m, cases, make_navigator("subtree-scan"), resolver=dict_resolver(pages))
    paged, other = report.cases
    assert paged.success and paged.path[-1].startswith("tools.disk~p")
    assert paged.path[-1] != paged.target and "part of it" in paged.stop_reason
    # the other document is read after the paged one was closed, and its page 2 never
    assert other.success and other.path[-2:] == ("tools.disk~p1", "tools.mounts")
    assert other.looks == ("close:tools.disk~p1", "close:tools.disk")


def test_search_ranks_a_leaf_by_the_branch_lines_above_it(b: Any) -> None:
    """Two leaves with the same line under different branches: the query word "network"
    is in one branch line (and in a leaf elsewhere, so it has an IDF), and it decides.
    Single-line matching cannot order the leaves."""
    nodes = {
        "a": {"title": "Archives", "what": "Compress files", "when": "saving room",
              "children": ["a.x"]},
        "b": {"title": "Transfer", "what": "Network tools", "when": "other machines",
              "children": ["b.y"]},
        "c": {"title": "Settings", "what": "Machine setup", "when": "setup", "children": ["c.z"]},
        "c.z": _leaf("Cards", "Network card settings", "drivers", payload={"ref": "node://c.z"}),
        "a.x": _leaf("Pack", "Pack files quickly", "bundles", payload={"ref": "node://a.x"}),
        "b.y": _leaf("Pack", "Pack files quickly", "bundles", payload={"ref": "node://b.y"}),
    }  # fmt: skip
    m = load_manifest(b.doc(nodes, ["a", "b", "c"]))
    assert DescriptorSearch(m).search("pack files for the network", 2) == ["b.y", "a.x"]
    single = KeywordSearch(m).search("pack files for the network", 5)
    assert single.index("a.x") < single.index("b.y")  # a tie it breaks by position


def test_search_gives_one_hit_per_document_and_never_reads_payloads(b: Any) -> None:
    m = _paged(b)
    hits = DescriptorSearch(m).search(QUERY, 8)
    assert hits[0] in ("tools.disk~p1", "tools.disk~p2") and hits[1:] == ["tools.mounts"]
    assert DescriptorSearch(_manifest(b)).search("zebra", 5) == []  # a payload-only word


def test_the_runtime_searches_the_descriptor_index_by_default(b: Any) -> None:
    m = _manifest(b)
    s = _session(m)
    assert s.runtime.search("restore a database dump", 2) == ["docs.restore", "docs.backup"]
    shown = s.search("restore a database dump", 2)
    assert "docs.restore" in shown and s.spent > 0  # the hits are disclosed and charged
