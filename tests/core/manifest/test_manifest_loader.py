"""Loader: identity revalidation, corrupt caches refetched, atomic FileStore, async loader."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from picocontext.manifest.errors import LoaderError
from picocontext.manifest.loader import (
    AsyncManifestLoader,
    FetchOutcome,
    FileStore,
    ManifestKey,
    ManifestLoader,
    MemoryStore,
    identity_of,
)

KEY = ManifestKey(source_id="homelab/main docs", budget="4k")


class Origin:
    """A fake origin that answers conditional requests and records them."""

    def __init__(self, body: dict[str, Any], identity: str, conditional: bool = True) -> None:
        self.body = body
        self.identity = identity
        self.conditional = conditional
        self.calls: list[str | None] = []

    def __call__(self, key: ManifestKey, known: str | None) -> FetchOutcome:
        self.calls.append(known)
        if self.conditional and known == self.identity:
            return FetchOutcome.unchanged()
        return FetchOutcome.fresh(self.identity, self.body)


def test_identity_of(b: Any) -> None:
    d = b.tree_doc()
    assert identity_of(d).startswith("sha256:") and identity_of(d) == identity_of(dict(d))
    d["source"]["content_hash"] = "sha256:abc"
    assert identity_of(d) == "sha256:abc"


def test_cache_slug_is_safe_and_distinct() -> None:
    slug = KEY.cache_slug()
    assert "/" not in slug and " " not in slug
    assert slug != ManifestKey(source_id="homelab/main docs", budget="32k").cache_slug()
    assert (
        ManifestKey(source_id="a/b", budget="1").cache_slug()
        != ManifestKey(source_id="a_b", budget="1").cache_slug()
    )


def test_unchanged_reuses_cache_and_changed_identity_wins(b: Any) -> None:
    origin = Origin(b.tree_doc(), "v1")
    loader = ManifestLoader(origin)
    first = loader.load(KEY)
    assert loader.load(KEY) is first  # parsed once, reused on 304
    assert origin.calls == [None, "v1"]
    changed = b.tree_doc()
    changed["nodes"]["a"]["what"] = "Changed alpha"
    origin.body, origin.identity = changed, "v2"
    assert loader.load(KEY).get("a").what == "Changed alpha"
    assert origin.calls[-1] == "v1"


def test_dumb_fetcher_still_invalidates(b: Any) -> None:
    origin = Origin(b.tree_doc(), "v1", conditional=False)
    loader = ManifestLoader(origin)
    loader.load(KEY)
    origin.body = {**b.tree_doc(), "full_tokens": 5}
    origin.identity = "v2"
    assert loader.load(KEY).full_tokens == 5


def test_contract_violations(b: Any) -> None:
    with pytest.raises(LoaderError, match="nothing is cached"):
        ManifestLoader(lambda k, i: FetchOutcome.unchanged()).load(KEY)
    with pytest.raises(LoaderError, match="identity and a body"):
        ManifestLoader(lambda k, i: FetchOutcome(not_modified=False)).load(KEY)


def test_invalid_body_is_never_cached(b: Any) -> None:
    store = MemoryStore()
    bad = b.tree_doc()
    bad["root"]["children"] = ["a", "a"]
    with pytest.raises(LoaderError, match="invalid manifest"):
        ManifestLoader(lambda k, i: FetchOutcome.fresh("v1", bad), store).load(KEY)
    assert store.get(KEY) is None


def test_filestore_round_trip_and_corruption_refetch(b: Any, tmp_path: Any) -> None:
    store = FileStore(tmp_path / "cache")
    origin = Origin(b.tree_doc(), "v1")
    ManifestLoader(origin, store).load(KEY)
    path = store.path(KEY)
    assert json.loads(path.read_text())["identity"] == "v1"
    # a fresh process: the identity is sent, nothing transferred
    fresh = ManifestLoader(origin, FileStore(tmp_path / "cache"))
    fresh.load(KEY)
    assert origin.calls[-1] == "v1"
    # corrupt: truncated JSON -> miss -> refetch with no identity
    path.write_text(path.read_text()[:50])
    ManifestLoader(origin, store).load(KEY)
    assert origin.calls[-1] is None
    # tampered body with a stale checksum -> miss, never served
    record = json.loads(path.read_text())
    record["manifest"]["nodes"]["a"]["what"] = "tampered"
    path.write_text(json.dumps(record))
    assert store.get(KEY) is None
    m = ManifestLoader(origin, store).load(KEY)
    assert m.get("a").what != "tampered" and origin.calls[-1] is None


def test_cached_but_now_invalid_body_is_dropped(b: Any, tmp_path: Any) -> None:
    store = FileStore(tmp_path)
    bad = b.tree_doc()
    bad["nodes"]["lost"] = b.node(payload={"ref": "node://lost"})
    store.put(KEY, "v1", bad)  # e.g. written by an older, laxer version
    origin = Origin(b.tree_doc(), "v1")
    ManifestLoader(origin, store).load(KEY)
    assert origin.calls == [None]


def test_filestore_concurrent_writers_never_leave_a_torn_file(b: Any, tmp_path: Any) -> None:
    store = FileStore(tmp_path)
    bodies = []
    for i in range(8):
        d = b.tree_doc()
        d["full_tokens"] = i
        bodies.append(d)
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            for _ in range(15):
                store.put(KEY, f"v{i}", bodies[i])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    got = store.get(KEY)
    assert got is not None and got.manifest["full_tokens"] == int(got.identity[1:])
    assert [p.name for p in tmp_path.iterdir()] == [store.path(KEY).name]


def test_async_loader(b: Any) -> None:
    origin = Origin(b.tree_doc(), "v1")

    async def fetch(key: ManifestKey, known: str | None) -> FetchOutcome:
        await asyncio.sleep(0)
        return origin(key, known)

    loader = AsyncManifestLoader(fetch)

    async def go() -> None:
        a = await loader.load(KEY)
        again = await loader.load(KEY)
        assert a is again and origin.calls == [None, "v1"]

    asyncio.run(go())
