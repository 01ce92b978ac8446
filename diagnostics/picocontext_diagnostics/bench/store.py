"""``scripts/bench.sh store``: what one small append costs a large SQLite session store.

A session of ``--records`` records (about 700-byte bodies) is saved once, then given
``--appends`` one-record appends through ``ContextSession.append_records``, exactly as a
caller would. The bench reports the database growth next to the text that was appended, the
latency of the first and the last ``--window`` appends (median and p95, both end to end and
for the store's ``save`` alone), the same store latency on a ``--baseline-records`` session (so
"independent of the record count" is a comparison, not a claim), and how long reading the
newest and a middle revision takes. The summary is printed as one JSON line, last.

Only the public API is used, so the same file measures any version of the store.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from picocontext import (
    ContextSession,
    Record,
    Role,
    Scope,
    Snapshot,
    SQLiteStore,
    WorkingContext,
    __version__,
)
from picocontext.models import ByteCounter, ScriptedBackend

SCOPE = Scope(user_id="bench", conversation_id="store", branch_id="main")
FILLER = "The greenhouse log repeats: vents idle, humidity steady, nothing to report. "


def history(n_records: int) -> Snapshot:
    """Protected instructions and task, then alternating user/assistant notes."""
    records = [
        Record(id="instructions", role=Role.SYSTEM, body="Keep exact facts."),
        Record(id="task", role=Role.USER, protected=True, body="Track the greenhouse log."),
    ]
    for i in range(len(records), n_records):
        role = Role.USER if i % 2 else Role.ASSISTANT
        records.append(Record(id=f"r{i}", role=role, body=f"FACT entry{i}={i}\n" + FILLER * 9))
    return Snapshot(scope=SCOPE, records=tuple(records[:n_records]))


class TimedStore:
    """Delegates to a SQLiteStore and keeps the duration of every ``save``."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.save_seconds: list[float] = []

    def save(self, context: WorkingContext) -> None:
        started = time.perf_counter()
        self.inner.save(context)
        self.save_seconds.append(time.perf_counter() - started)

    def load(self, scope: Scope) -> WorkingContext | None:
        return self.inner.load(scope)


def store_bytes(path: Path) -> int:
    """Size of the database file after folding the write-ahead log into it."""
    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def latency(seconds: Sequence[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return {"median_ms": round(statistics.median(ms), 3), "p95_ms": round(p95, 3)}


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def run_appends(path: Path, n_records: int, appends: int) -> dict[str, Any]:
    """Save a ``n_records`` session, then append one short record ``appends`` times."""
    with SQLiteStore(path) as inner:
        store = TimedStore(inner)
        session = ContextSession(history(n_records), ByteCounter(), ScriptedBackend(), store)
        before = store_bytes(path)
        store.save_seconds.clear()
        total: list[float] = []
        appended_text = 0
        for i in range(appends):
            record = Record(id=f"a{i}", role=Role.USER, body=f"note {i}")
            appended_text += len(record.id.encode()) + len(record.body.encode())
            started = time.perf_counter()
            session.append_records([record])
            total.append(time.perf_counter() - started)
        return {
            "before": before,
            "after": store_bytes(path),
            "appended_text": appended_text,
            "total": total,
            "save": store.save_seconds,
            "head": session.context.revision,
        }


def read_times(path: Path, repeat: int) -> dict[str, float]:
    """Each read from a store opened just before it (cold), and repeated on one open store
    (warm: whatever that store keeps between reads is allowed to help)."""
    with SQLiteStore(path) as store:
        revisions = store.revision_numbers(SCOPE)
    head, middle = revisions[-1], revisions[len(revisions) // 2]
    reads: dict[str, Callable[[SQLiteStore], object]] = {
        "load": lambda store: store.load(SCOPE),
        "load_revision_head": lambda store: store.load_revision(SCOPE, head),
        "load_revision_middle": lambda store: store.load_revision(SCOPE, middle),
    }
    out: dict[str, float] = {"head_revision": head, "middle_revision": middle}
    for name, read in reads.items():
        cold = []
        for _ in range(repeat):
            with SQLiteStore(path) as store:
                cold.append(median_seconds(functools.partial(read, store), 1))
        out[f"{name}_cold_ms"] = round(statistics.median(cold) * 1000, 3)
        with SQLiteStore(path) as store:
            read(store)
            warm = median_seconds(functools.partial(read, store), repeat)
        out[f"{name}_warm_ms"] = round(warm * 1000, 3)
    return out


def measure(workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    window = min(args.window, args.appends)
    big = run_appends(workdir / "big.db", args.records, args.appends)
    reads = read_times(workdir / "big.db", args.repeat)
    small = run_appends(workdir / "small.db", args.baseline_records, args.appends)
    growth = big["after"] - big["before"]
    return {
        "benchmark": "store",
        "picocontext": __version__,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "records": args.records,
        "appends": args.appends,
        "window": window,
        "store_bytes_before": big["before"],
        "store_bytes_after": big["after"],
        "growth_bytes": growth,
        "appended_text_bytes": big["appended_text"],
        "append_first": latency(big["total"][:window]),
        "append_last": latency(big["total"][-window:]),
        "save_first": latency(big["save"][:window]),
        "save_last": latency(big["save"][-window:]),
        "baseline_records": args.baseline_records,
        "baseline_save": latency(small["save"]),
        "baseline_append": latency(small["total"]),
        "read": reads,
        "target": "growth <= 2 MB + appended text; save latency independent of record count",
        "growth_target_met": growth <= 2_000_000 + big["appended_text"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.sh store", description=__doc__)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--appends", type=int, default=1_000)
    parser.add_argument("--window", type=int, default=100, help="appends per start/end sample")
    parser.add_argument("--baseline-records", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5, help="repetitions of each read")
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp one)")
    parser.add_argument("--output", type=Path, default=Path("out/bench/store.json"))
    args = parser.parse_args(argv)
    if args.records < 2 or args.appends < 1 or args.baseline_records < 2:
        parser.error("--records and --baseline-records need at least 2, --appends at least 1")
    args.output.parent.mkdir(parents=True, exist_ok=True)  # before the work, not after
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        report = measure(Path(tmp), args)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
