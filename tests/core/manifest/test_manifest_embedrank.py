"""The embedding-ranked navigator: verbs chosen from fused ranks, every step charged by the
session, descriptors embedded (never payloads), the on-disk cache, and bad embedder output.

The embedder here is a fake with a tiny hand-made "meaning": words map to four concepts, so
"shrink" lands near "scale down" without sharing a word -- what a model's hidden states add."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from picocontext.manifest.embedrank import (
    CachedEmbedder,
    EmbeddingError,
    EmbedNavigator,
    descriptor_text,
    mean_pool,
    rrf,
)
from picocontext.manifest.eval import NavCase, run_eval
from picocontext.manifest.model import Manifest
from picocontext.manifest.routing import MODEL_NAVIGATORS, NAVIGATORS, SCAN_K, make_navigator
from picocontext.manifest.runtime import dict_resolver
from picocontext.manifest.session import ModeConfig, NavSession
from picocontext.manifest.validate import load_manifest

FULL = ModeConfig(view_level="full", inline_small_leaves=False)
CONCEPTS = {
    "small": {"smaller", "shrink", "scale", "down", "fewer", "large"},
    "image": {"picture", "image", "photo", "pixels", "snapshot"},
    "border": {"border", "frame", "frames", "decorate", "edges"},
    "net": {"machine", "copy", "files", "transfer", "answers"},
}
QUERY = "make a picture smaller"
BODIES = {
    "img.resize": "convert -resize 50% in.png out.png",
    "img.frame": "convert -border 10 in.png out.png",
    "img.crop": "convert -crop 10x10 in.png out.png",
    "net.copy": "scp a b:",
}


class FakeEmbedder:
    """Concept counts plus a constant dimension (the shared direction real hidden states
    have); records every text it is asked about."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.calls = 0

    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls += 1
        self.seen.extend(texts)
        out = np.full((len(texts), len(CONCEPTS) + 1), 4.0, dtype=np.float32)
        out[:, : len(CONCEPTS)] = 0.0
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                for col, words in enumerate(CONCEPTS.values()):
                    out[row, col] += word in words
        unit: npt.NDArray[np.float32] = out / np.linalg.norm(out, axis=1, keepdims=True)
        return unit


def _leaf(title: str, what: str, when: str, nid: str) -> dict[str, Any]:
    return {"title": title, "what": what, "when": when, "tokens": 40,
            "payload": {"ref": f"node://{nid}"}}  # fmt: skip


def _manifest(b: Any) -> Manifest:
    """``img.frame`` says "picture" twice (the best BM25 line); ``img.resize`` says it once
    but means the query; ``img.crop`` shares no word with it but is close in meaning."""
    nodes = {
        "img": {"title": "Graphics", "what": "Image tools", "when": "working on photos",
                "children": ["img.resize", "img.frame", "img.crop"]},
        "net": {"title": "Network", "what": "Remote tools", "when": "another machine",
                "children": ["net.copy"]},
        "img.resize": _leaf("Resize", "Scale an image down to fewer pixels",
                            "a picture is too large", "img.resize"),
        "img.frame": _leaf("Frames", "Draw a border around a picture", "decorate a picture",
                           "img.frame"),
        "img.crop": _leaf("Crop", "Cut away the edges", "trim", "img.crop"),
        "net.copy": _leaf("Copy", "Copy files to another machine", "transfer", "net.copy"),
    }  # fmt: skip
    return load_manifest(b.doc(nodes, ["img", "net"]))


def _session(m: Manifest, bodies: dict[str, str] = BODIES) -> NavSession:
    return NavSession(m, config=FULL, resolver=dict_resolver(bodies))


def _nav(m: Manifest, embedder: Any = None) -> EmbedNavigator:
    nav = EmbedNavigator(embedder or FakeEmbedder())
    nav.prepare(m)
    return nav


def test_it_searches_first_then_opens_the_best_fused_hit(b: Any) -> None:
    m = _manifest(b)
    s = _session(m)
    nav = _nav(m)
    first = nav.decide(QUERY, s.runtime.peek(), s.budget_remaining)
    assert first.verb == "search" and first.query == QUERY and first.k == SCAN_K
    spent, shown = s.spent, s.shown_tokens
    text = s.search(first.query, first.k)
    assert "img.frame" in text and "img.resize" in text
    assert s.spent - spent == s.shown_tokens - shown == s.runtime.counter.count(text)
    follow = nav.decide(QUERY, s.runtime.peek(), s.budget_remaining)
    assert (follow.verb, follow.ids) == ("open", ("img.resize",))
    # words alone pick the other hit: the gain is the embedding's
    scan = make_navigator("subtree-scan")
    scan.prepare(m)
    assert scan.decide(QUERY, s.runtime.peek(), s.budget_remaining).ids == ("img.frame",)


def test_it_walks_down_to_a_leaf_the_search_did_not_show(b: Any) -> None:
    m = _manifest(b)
    report = run_eval(
        m,
        [NavCase(query="shrink a snapshot", target="img.resize")],
        make_navigator("subtree-embed", embedder=FakeEmbedder()),
        resolver=dict_resolver(BODIES),
    )
    case = report.cases[0]
    assert case.success and case.looks == ("search",) and case.path == ("img", "img.resize")
    assert case.tokens_to_answer is not None and case.shown_tokens >= case.tokens_to_answer


def test_it_closes_a_read_leaf_that_was_not_it(b: Any) -> None:
    m = _manifest(b)
    s = _session(m)
    nav = _nav(m)
    s.search(QUERY, SCAN_K)
    before = s.spent
    s.open("img.resize")
    close = nav.decide(QUERY, s.runtime.peek(), s.budget_remaining)
    assert (close.verb, close.ids) == ("close", ("img.resize",))
    assert s.close("img.resize") > 0 and s.spent == before
    nxt = nav.decide(QUERY, s.runtime.peek(), s.budget_remaining)
    assert nxt.verb == "open" and nxt.ids != ("img.resize",)


def test_every_step_of_a_walk_is_charged(b: Any) -> None:
    m = _manifest(b)
    report = run_eval(
        m,
        [NavCase(query=QUERY, target="img.crop")],
        make_navigator("subtree-embed", embedder=FakeEmbedder()),
        resolver=dict_resolver(BODIES),
    )
    case = report.cases[0]
    assert case.success and case.path[-1] == "img.crop"
    assert "close:img.resize" in case.looks  # read, not it, closed before going on
    assert case.tokens_to_answer is not None and case.shown_tokens >= case.tokens_to_answer


def test_payloads_are_never_embedded_and_never_matter(b: Any) -> None:
    m = _manifest(b)
    routes = []
    for secret in ("", " zebra shrink picture smaller"):
        fake = FakeEmbedder()
        bodies = {k: v + secret for k, v in BODIES.items()}
        report = run_eval(
            m,
            [NavCase(query=QUERY + " zebra", target="img.crop")],
            make_navigator("subtree-embed", embedder=fake),
            resolver=dict_resolver(bodies),
        )
        routes.append((report.cases[0].path, report.cases[0].looks))
        descriptors = {descriptor_text(m.get(i)) for i in m.leaf_ids}
        assert set(fake.seen) == descriptors | {QUERY + " zebra"}
        assert not any("zebra" in t or "convert" in t for t in descriptors)
    assert routes[0] == routes[1]


def test_descriptor_text_is_the_descriptor_only(b: Any) -> None:
    m = _manifest(b)
    text = descriptor_text(m.get("img.resize"))
    assert text == "Resize. Scale an image down to fewer pixels. a picture is too large"
    assert "node://" not in text


def test_a_second_run_asks_the_embedder_nothing(b: Any, tmp_path: Path) -> None:
    m = _manifest(b)
    path = tmp_path / "emb.npz"
    cases = [NavCase(query=QUERY, target="img.resize"), NavCase(query="shrink", target="img.crop")]
    routes = []
    for _ in range(2):
        fake = FakeEmbedder()
        cached = CachedEmbedder(fake, model_id="fake-1", path=path)
        report = run_eval(m, cases, make_navigator("subtree-embed", embedder=cached))
        cached.save()
        routes.append([c.path for c in report.cases])
        calls = fake.calls
    assert calls == 0 and cached.embedded == 0 and cached.cached == len(m.leaf_ids) + 2
    assert routes[0] == routes[1]
    other = FakeEmbedder()
    CachedEmbedder(other, model_id="fake-2", path=path)(["Resize"])
    assert other.calls == 1  # the key holds the model id


def test_saving_keeps_what_another_run_saved(tmp_path: Path) -> None:
    path = tmp_path / "emb.npz"
    first, second = (CachedEmbedder(FakeEmbedder(), model_id="m", path=path) for _ in range(2))
    first(["Resize"])
    second(["Crop"])
    first.save()
    second.save()
    assert set(CachedEmbedder.load(path)) == {first.key("Resize"), first.key("Crop")}


def test_a_missing_or_broken_cache_file_is_an_empty_cache(tmp_path: Path) -> None:
    assert CachedEmbedder.load(tmp_path / "none.npz") == {}
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    assert CachedEmbedder.load(bad) == {}


@pytest.mark.parametrize(
    ("shape", "message"),
    [((3,), "one row per text"), ((2, 5), "one row per text"), ((4, 0), "one row per text")],
)
def test_a_wrong_shape_is_a_clear_error(b: Any, shape: tuple[int, ...], message: str) -> None:
    m = _manifest(b)
    nav = EmbedNavigator(lambda texts: np.zeros(shape, dtype=np.float32))
    with pytest.raises(EmbeddingError, match=message):
        nav.prepare(m)


def test_nan_and_a_query_of_another_width_are_clear_errors(b: Any) -> None:
    m = _manifest(b)
    with pytest.raises(EmbeddingError, match="NaN"):
        EmbedNavigator(lambda t: np.full((len(t), 3), np.nan)).prepare(m)

    def widths(texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.ones((len(texts), 3 if len(texts) > 1 else 4), dtype=np.float32)

    nav = _nav(m, widths)
    s = _session(m)
    with pytest.raises(EmbeddingError, match="one embedder for both"):
        nav.decide(QUERY, s.runtime.peek(), s.budget_remaining)


def test_rrf_rewards_agreement_and_needs_no_scale() -> None:
    fused = rrf(["a", "b", "c"], ["b", "c", "a"])
    assert max(fused, key=lambda k: fused[k]) == "b"
    assert rrf(["a"], ["b", "a"])["a"] > rrf(["a"], ["b", "a"])["b"]


def test_mean_pool_normalises_and_checks_widths() -> None:
    pooled = mean_pool([np.array([[3.0, 0.0], [3.0, 8.0]]), np.zeros((0, 2))], 2)
    assert np.allclose(pooled, [[0.6, 0.8], [0.0, 0.0]])
    with pytest.raises(EmbeddingError, match="expected"):
        mean_pool([np.zeros((2, 3))], 2)


def test_it_is_named_and_needs_an_embedder() -> None:
    assert "subtree-embed" in MODEL_NAVIGATORS and "subtree-embed" not in NAVIGATORS
    assert make_navigator("subtree-embed", embedder=FakeEmbedder()).name == "subtree-embed"
    with pytest.raises(ValueError, match="needs an embedder"):
        make_navigator("subtree-embed")
