"""``scripts/bench.sh eval``: the largest allowed deterministic evaluation plan (128 steps) per
scenario — run time, report size, and JSON write/read time — so the harness's own overhead is
known before a model's time is added to it."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from picocontext import __version__
from picocontext_diagnostics.backends import deterministic_backend, provenance
from picocontext_diagnostics.episodes.fixtures import Scenario
from picocontext_diagnostics.evaluation import (
    EvaluationConfig,
    EvaluationLimits,
    EvaluationReport,
    EvaluationRunner,
)


def measure(scenario: Scenario, noise_lines: int, repeat: int) -> dict[str, Any]:
    config = EvaluationConfig(
        scenario=scenario,
        seeds=(17, 29),
        repetitions=4,
        step_count=8,
        noise_lines=noise_lines,
        limits=EvaluationLimits(
            context_window=32_768, turn_tokens=500_000, episode_tokens=2_000_000
        ),
    )
    runs: list[float] = []
    writes: list[float] = []
    reads: list[float] = []
    size = 0
    passed = False
    calls = 0
    for _ in range(repeat):
        handle = deterministic_backend()
        runner = EvaluationRunner(config, handle.counter, handle.backend, provenance(handle))
        started = time.perf_counter()
        report = runner.run()
        runs.append(time.perf_counter() - started)
        started = time.perf_counter()
        text = report.to_json()
        writes.append(time.perf_counter() - started)
        started = time.perf_counter()
        EvaluationReport.from_json(text)
        reads.append(time.perf_counter() - started)
        size = len(text.encode("utf-8"))
        passed = report.passed
        calls = sum(len(s.calls) for r in report.results for s in r.steps)
    return {
        "scenario": scenario.value,
        "noise_lines": noise_lines,
        "planned_steps": config.planned_steps,
        "dispatched_calls": calls,
        "all_passed": passed,
        "run_seconds_median": statistics.median(runs),
        "to_json_seconds_median": statistics.median(writes),
        "from_json_seconds_median": statistics.median(reads),
        "report_bytes": size,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.sh eval", description=__doc__)
    parser.add_argument("--output", type=Path, default=Path("out/bench/eval.json"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    rows = [
        measure(scenario, noise, max(1, args.repeat)) for scenario in Scenario for noise in (12, 48)
    ]
    for row in rows:
        print(
            f"{row['scenario']:>13}, noise {row['noise_lines']:>2}: "
            f"{row['planned_steps']} steps, {row['dispatched_calls']} calls, "
            f"run {row['run_seconds_median']:.3f} s, to_json "
            f"{row['to_json_seconds_median']:.3f} s, from_json "
            f"{row['from_json_seconds_median']:.3f} s, {row['report_bytes'] / 1e6:.1f} MB, "
            f"passed {row['all_passed']}"
        )
    report = {
        "benchmark": "eval",
        "picocontext_version": __version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "repeat": args.repeat,
        "rows": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"Saved {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
