"""Content-addressed summary store: ``<root>/sha256/ab/<hex>``, atomic, verified, collectable.

Writes go to a temporary file in the same directory and are renamed into place, so a process
crash leaves either the whole blob or nothing under its address (``fsync=True`` also syncs the
bytes first, for power-loss durability at a large cost per blob; without it a torn blob after a
power cut is caught by the verified read below; ``Distiller.repair`` then drops the nodes
that reference it so the next sync rebuilds them). Every read re-hashes the bytes:
a blob that does not hash to its address raises :class:`CorruptBlob` and is never served. GC is
mark-and-sweep: the caller passes the live addresses (the summary hashes of live nodes) and only
unreferenced blobs older than the grace period are removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from picocontext.distill.errors import CorruptBlob, InvalidHash, MissingBlob, StoreError

ALGORITHM = "sha256"
DEFAULT_GRACE_SECONDS = 3600.0
_ADDRESS = re.compile(r"^sha256:([0-9a-f]{64})$")
_TMP_PREFIX = ".tmp-"


def address_of(data: bytes) -> str:
    return f"{ALGORITHM}:{hashlib.sha256(data).hexdigest()}"


def parse_address(address: str) -> str:
    """The hex digest of ``sha256:<64 hex>``; anything else is an :class:`InvalidHash`."""
    match = _ADDRESS.match(address)
    if match is None:
        raise InvalidHash(f"{address!r} is not a CAS address (sha256:<64 lowercase hex>).")
    return match.group(1)


class GCReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    scanned: int = 0
    live: int = 0
    removed: int = 0
    kept_in_grace: int = 0
    temp_removed: int = 0
    missing_live: tuple[str, ...] = ()


class BlobStore:
    """A directory of immutable blobs. Thread-safe; counts reads and writes for the tests."""

    def __init__(self, root: str | Path, fsync: bool = False) -> None:
        self.root = Path(root)
        self.fsync = fsync
        try:
            (self.root / ALGORITHM).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"Cannot create the summary store at {self.root}: {exc}") from exc
        self._lock = threading.Lock()
        self._dirs: set[str] = set()
        self.reads = 0
        self.writes = 0

    def path_of(self, address: str) -> Path:
        digest = parse_address(address)
        return self.root / ALGORITHM / digest[:2] / digest

    def store(self, data: bytes) -> str:
        """Store ``data`` once and return its address; storing existing bytes is a no-op."""
        address = address_of(data)
        path = self.path_of(address)
        if path.exists() and self._intact(path, address):
            # A reused blob may be unreferenced right now; renewing its mtime restarts the GC
            # grace period so a concurrent collection cannot remove it before the row lands.
            with contextlib.suppress(OSError):
                os.utime(path)
            return address
        if path.parent.name not in self._dirs:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._dirs.add(path.parent.name)
        tmp = path.parent / f"{_TMP_PREFIX}{path.name}.{os.getpid()}.{threading.get_ident()}"
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                if self.fsync:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise StoreError(f"Cannot write summary blob {address}: {exc}") from exc
        with self._lock:
            self.writes += 1
        return address

    @staticmethod
    def _intact(path: Path, address: str) -> bool:
        """Existing bytes are reused only if they still hash to the address (a torn or
        tampered blob is overwritten by the good bytes)."""
        try:
            return address_of(path.read_bytes()) == address
        except OSError:
            return False

    def store_text(self, text: str) -> str:
        return self.store(text.encode("utf-8"))

    def retrieve(self, address: str) -> bytes:
        """The verified bytes at ``address``; corrupt or missing blobs raise, never return."""
        path = self.path_of(address)
        with self._lock:
            self.reads += 1
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise MissingBlob(address) from None
        except OSError as exc:
            raise StoreError(f"Cannot read summary blob {address}: {exc}") from exc
        actual = address_of(data)
        if actual != address:
            raise CorruptBlob(address, f"its bytes hash to {actual}")
        return data

    def retrieve_text(self, address: str) -> str:
        data = self.retrieve(address)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptBlob(address, f"not UTF-8: {exc}") from exc

    def exists(self, address: str) -> bool:
        return self.path_of(address).exists()

    def addresses(self) -> Iterator[str]:
        base = self.root / ALGORITHM
        for sub in sorted(base.iterdir()) if base.exists() else []:
            if not sub.is_dir():
                continue
            for path in sorted(sub.iterdir()):
                if not path.name.startswith(_TMP_PREFIX) and len(path.name) == 64:
                    yield f"{ALGORITHM}:{path.name}"

    def __len__(self) -> int:
        return sum(1 for _ in self.addresses())

    def gc(
        self,
        live: Iterable[str],
        grace_seconds: float = DEFAULT_GRACE_SECONDS,
        now: float | None = None,
    ) -> GCReport:
        """Remove blobs not in ``live`` whose mtime is older than the grace period, and stale
        temporary files left by crashed writers. Live addresses that are missing are reported."""
        live_set = {a for a in live if a}
        now = time.time() if now is None else now
        scanned = removed = in_grace = tmp_removed = 0
        base = self.root / ALGORITHM
        for sub in sorted(base.iterdir()) if base.exists() else []:
            if not sub.is_dir():
                continue
            for path in sorted(sub.iterdir()):
                try:
                    age = now - path.stat().st_mtime
                except FileNotFoundError:
                    continue
                if path.name.startswith(_TMP_PREFIX):
                    if age > grace_seconds:
                        with contextlib.suppress(FileNotFoundError):
                            path.unlink()
                            tmp_removed += 1
                    continue
                scanned += 1
                if f"{ALGORITHM}:{path.name}" in live_set:
                    continue
                if age <= grace_seconds:
                    in_grace += 1
                    continue
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed += 1
        missing = tuple(sorted(a for a in live_set if not self.path_of(a).exists()))
        return GCReport(
            scanned=scanned,
            live=len(live_set),
            removed=removed,
            kept_in_grace=in_grace,
            temp_removed=tmp_removed,
            missing_live=missing,
        )
