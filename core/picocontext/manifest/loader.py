"""Identity-revalidated manifest caching: revalidate, never expire on a clock.

The caller supplies a fetcher that reaches the origin; the loader keeps the identity
bookkeeping and guarantees that a changed identity always wins. Beyond the peer, bodies are
validated before they are cached (a malformed body is never stored), each cached file carries
a checksum of its body, and a corrupt or tampered file is detected, dropped and refetched
instead of being served. FileStore writes are atomic and safe against concurrent writers (a
unique temporary file per write, then ``os.replace``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from picocontext.manifest.errors import LoaderError, ManifestInvalid
from picocontext.manifest.model import Manifest
from picocontext.manifest.validate import DEFAULT_LIMITS, Limits, load_manifest

Identity = str


class ManifestKey(BaseModel):
    """What you want. The budget is part of the key; identity is shared across budgets."""

    model_config = ConfigDict(frozen=True)

    source_id: str
    budget: str

    def cache_slug(self) -> str:
        raw = f"{self.source_id}@{self.budget}"
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", raw)[:80]
        return f"{safe}.{hashlib.sha256(raw.encode('utf-8')).hexdigest()[:8]}"


class FetchOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    not_modified: bool
    identity: Identity | None = None
    manifest: dict[str, Any] | None = None

    @classmethod
    def unchanged(cls) -> FetchOutcome:
        return cls(not_modified=True)

    @classmethod
    def fresh(cls, identity: Identity, manifest: Mapping[str, Any]) -> FetchOutcome:
        return cls(not_modified=False, identity=identity, manifest=dict(manifest))


class StoredManifest(BaseModel):
    model_config = ConfigDict(frozen=True)

    identity: Identity
    manifest: dict[str, Any]


Fetcher = Callable[[ManifestKey, Identity | None], FetchOutcome]
AsyncFetcher = Callable[[ManifestKey, Identity | None], Awaitable[FetchOutcome]]


class ManifestStore(Protocol):
    def get(self, key: ManifestKey) -> StoredManifest | None: ...

    def put(self, key: ManifestKey, identity: Identity, manifest: Mapping[str, Any]) -> None: ...

    def drop(self, key: ManifestKey) -> None: ...


def _canonical(manifest: Mapping[str, Any]) -> bytes:
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def identity_of(manifest: Mapping[str, Any]) -> Identity:
    """``source.content_hash`` when present, else a sha256 of the canonical body."""
    source = manifest.get("source")
    if isinstance(source, Mapping):
        h = source.get("content_hash")
        if isinstance(h, str) and h:
            return h
    return "sha256:" + hashlib.sha256(_canonical(manifest)).hexdigest()


class MemoryStore:
    """Process-local store; thread-safe."""

    def __init__(self) -> None:
        self._data: dict[str, StoredManifest] = {}
        self._lock = threading.Lock()

    def get(self, key: ManifestKey) -> StoredManifest | None:
        with self._lock:
            return self._data.get(key.cache_slug())

    def put(self, key: ManifestKey, identity: Identity, manifest: Mapping[str, Any]) -> None:
        with self._lock:
            self._data[key.cache_slug()] = StoredManifest(
                identity=identity, manifest=dict(manifest)
            )

    def drop(self, key: ManifestKey) -> None:
        with self._lock:
            self._data.pop(key.cache_slug(), None)


class FileStore:
    """One JSON file per key: ``{identity, checksum, manifest}``. A file that is unreadable,
    not the expected shape or whose checksum does not match its body is a miss."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory).expanduser()

    def path(self, key: ManifestKey) -> Path:
        return self.directory / f"{key.cache_slug()}.json"

    def get(self, key: ManifestKey) -> StoredManifest | None:
        try:
            raw = json.loads(self.path(key).read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(raw, dict):
            return None
        identity, checksum, body = raw.get("identity"), raw.get("checksum"), raw.get("manifest")
        if not isinstance(identity, str) or not isinstance(body, dict):
            return None
        if checksum != hashlib.sha256(_canonical(body)).hexdigest():
            return None
        return StoredManifest(identity=identity, manifest=body)

    def put(self, key: ManifestKey, identity: Identity, manifest: Mapping[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        body = dict(manifest)
        record = {
            "identity": identity,
            "checksum": hashlib.sha256(_canonical(body)).hexdigest(),
            "manifest": body,
        }
        fd, tmp = tempfile.mkstemp(
            prefix=f".{key.cache_slug()}.", suffix=".tmp", dir=self.directory
        )
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(record, fh, ensure_ascii=False)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path(key))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def drop(self, key: ManifestKey) -> None:
        self.path(key).unlink(missing_ok=True)


class _LoaderCore:
    def __init__(self, store: ManifestStore | None, limits: Limits) -> None:
        self.store: ManifestStore = store if store is not None else MemoryStore()
        self.limits = limits
        self._parsed: dict[tuple[str, str], Manifest] = {}

    def cached(self, key: ManifestKey) -> StoredManifest | None:
        hit = self.store.get(key)
        if hit is None:
            return None
        try:
            self._parse(key, hit)
        except ManifestInvalid:
            # Corrupt or no longer valid under our rules: never serve it; force a refetch.
            self.store.drop(key)
            return None
        return hit

    def _parse(self, key: ManifestKey, stored: StoredManifest) -> Manifest:
        slot = (key.cache_slug(), stored.identity)
        hit = self._parsed.get(slot)
        if hit is None:
            hit = load_manifest(stored.manifest, self.limits)
            self._parsed = {k: v for k, v in self._parsed.items() if k[0] != slot[0]}
            self._parsed[slot] = hit
        return hit

    def settle(
        self, key: ManifestKey, cached: StoredManifest | None, outcome: FetchOutcome
    ) -> Manifest:
        if outcome.not_modified:
            if cached is None:
                raise LoaderError(
                    f"{key.source_id}@{key.budget}: the fetcher answered 'unchanged' but "
                    "nothing is cached; it must return fresh content when known_identity is None"
                )
            return self._parse(key, cached)
        if not outcome.identity or outcome.manifest is None:
            raise LoaderError(
                f"{key.source_id}@{key.budget}: a fresh outcome needs an identity and a body"
            )
        try:
            manifest = load_manifest(outcome.manifest, self.limits)
        except ManifestInvalid as exc:
            raise LoaderError(
                f"{key.source_id}@{key.budget}: the origin sent an invalid manifest (not cached): "
                + "; ".join(exc.errors[:5])
            ) from exc
        if (
            cached is None
            or cached.identity != outcome.identity
            or (cached.manifest != outcome.manifest)
        ):
            self.store.put(key, outcome.identity, outcome.manifest)
        stored = StoredManifest(identity=outcome.identity, manifest=outcome.manifest)
        self._parsed[(key.cache_slug(), stored.identity)] = manifest
        return manifest


class ManifestLoader:
    """``load(key)`` always asks the fetcher, passing the cached identity."""

    def __init__(
        self, fetch: Fetcher, store: ManifestStore | None = None, limits: Limits = DEFAULT_LIMITS
    ) -> None:
        self.fetch = fetch
        self._core = _LoaderCore(store, limits)

    @property
    def store(self) -> ManifestStore:
        return self._core.store

    def load(self, key: ManifestKey) -> Manifest:
        cached = self._core.cached(key)
        outcome = self.fetch(key, cached.identity if cached else None)
        return self._core.settle(key, cached, outcome)

    def load_dict(self, key: ManifestKey) -> dict[str, Any]:
        return self.load(key).to_dict()


class AsyncManifestLoader:
    """Same contract with an awaited fetcher; the store stays synchronous (local and fast)."""

    def __init__(
        self,
        fetch: AsyncFetcher,
        store: ManifestStore | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self.fetch = fetch
        self._core = _LoaderCore(store, limits)

    @property
    def store(self) -> ManifestStore:
        return self._core.store

    async def load(self, key: ManifestKey) -> Manifest:
        cached = self._core.cached(key)
        outcome = await self.fetch(key, cached.identity if cached else None)
        return self._core.settle(key, cached, outcome)
