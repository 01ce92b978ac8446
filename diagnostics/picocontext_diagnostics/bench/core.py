"""``scripts/bench.sh core``: edit validation and prompt preparation on 64- and 1,024-record
contexts (median of repeated runs, measured side by side in one process)."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from picocontext import (
    Delete,
    Edit,
    ModelInput,
    Phase,
    Record,
    Replace,
    Role,
    Scope,
    Snapshot,
    ToolCall,
    WorkingContext,
    __version__,
    decode_edit_payload,
    edit_payload,
)
from picocontext.models import ByteCounter

SCOPE = Scope(user_id="bench", conversation_id="core", branch_id="main")


def history(n_records: int) -> Snapshot:
    """Instructions, task, then assistant/tool groups with ~600-byte results."""
    records = [
        Record(id="instructions", role=Role.SYSTEM, body="Keep exact facts."),
        Record(id="task", role=Role.USER, protected=True, body="Track the ledger."),
    ]
    i = 0
    while len(records) < n_records:
        records.append(
            Record(
                id=f"call-{i}",
                role=Role.ASSISTANT,
                body=f"Fetching page {i}.",
                tool_calls=(ToolCall(id=f"c-{i}", name="ledger", arguments=f'{{"page":{i}}}'),),
            )
        )
        records.append(
            Record(
                id=f"result-{i}",
                role=Role.TOOL,
                tool_call_id=f"c-{i}",
                body=f"FACT entry{i}=value-{i}\n" + "sensor idle; nothing new. " * 22,
            )
        )
        i += 1
    return Snapshot(scope=SCOPE, records=tuple(records[:n_records]))


def thirty_two_ops(snapshot: Snapshot) -> list[Replace | Delete]:
    """16 group deletions (32 ops would be 16 groups) mixed with replacements: 32 operations."""
    groups = [r.id for r in snapshot.records if r.id.startswith("call-")]
    ops: list[Replace | Delete] = []
    for gid in groups[:8]:
        n = gid.split("-")[1]
        ops += [Delete(record_id=gid), Delete(record_id=f"result-{n}")]
    for gid in groups[8:24]:
        n = gid.split("-")[1]
        ops.append(Replace(record_id=f"result-{n}", body=f"FACT entry{n}=value-{n}"))
    return ops[:32]


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def measure(counter: ByteCounter, size: int, repeat: int) -> dict[str, float]:
    snap = history(size)
    ctx = WorkingContext.start(snap)
    ops = thirty_two_ops(snap)
    assert len(ops) == 32, len(ops)
    payload = edit_payload(0, ops)
    edit = Edit(scope=SCOPE, base_revision=0, operations=tuple(ops))
    completion = ModelInput(context=snap, phase=Phase.COMPLETION)
    decision = ModelInput(context=snap, phase=Phase.EDIT)
    return {
        "apply_32_op_edit_ms": median_ms(lambda: ctx.apply(edit), repeat),
        "decode_and_apply_32_op_payload_ms": median_ms(
            lambda: ctx.apply(decode_edit_payload(payload, SCOPE)), repeat
        ),
        "prepare_completion_prompt_ms": median_ms(lambda: counter.prepare(completion), repeat),
        "prepare_decision_prompt_ms": median_ms(lambda: counter.prepare(decision), repeat),
        "prompt_bytes": float(counter.prepare(completion).token_count),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.sh core", description=__doc__)
    parser.add_argument("--output", type=Path, default=Path("out/bench/core.json"))
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args(argv)
    counter = ByteCounter()
    results: dict[str, dict[str, float]] = {}
    for size in (64, 1_024):
        results[f"records_{size}"] = measure(counter, size, args.repeat)
    report = {
        "benchmark": "core",
        "picocontext": __version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "repeat": args.repeat,
        "counter": "ByteCounter (UTF-8 bytes, not model tokens)",
        "results": results,
        "target": "32-op edit on 1,024 records validates in < 5 ms",
        "target_met": results["records_1024"]["decode_and_apply_32_op_payload_ms"] < 5.0,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
