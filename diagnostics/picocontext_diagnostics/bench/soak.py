"""``scripts/bench.sh soak``: 1,000 deterministic episodes through ``picocontext eval``.

A careful comparison needs on the order of a thousand episodes; this runs that many through
the command users run (journal, workers, report), in this process, and says what it cost:
episodes per second, resident memory before and after (growth is what a longer run would
add), and the report's size. The last line is one JSON object:
``{"benchmark": "soak", "episodes", "episodes_per_s", "rss_start_mb", "rss_end_mb",
"report_mb", ...}``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from picocontext_diagnostics import cli

POLICIES = ("append-only", "editable")
REPETITIONS = 4


def rss_mb() -> float:
    """Resident memory now (Linux ``/proc``; the peak from ``getrusage`` elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (2**20 if sys.platform == "darwin" else 2**10)


def soak_config(episodes: int) -> dict[str, Any]:
    """Seeds × 4 repetitions × 2 policies = ``episodes`` (rounded up to a multiple of 8)."""
    seeds = -(-episodes // (REPETITIONS * len(POLICIES)))
    return {
        "schema_version": 1,
        "description": f"soak: {episodes} deterministic episodes",
        "seeds": list(range(1, seeds + 1)),
        "repetitions": REPETITIONS,
        "step_count": 4,
        "policies": list(POLICIES),
        "max_planned_steps": seeds * REPETITIONS * len(POLICIES) * 4,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench.sh soak", description=__doc__)
    parser.add_argument("--episodes", type=int, default=1_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("out") / "bench" / "soak.json")
    args = parser.parse_args(argv)
    if not 8 <= args.episodes <= 1_000_000:
        print("soak: --episodes must be 8...1,000,000", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="picocontext-soak-") as folder:
        config = Path(folder) / "soak-config.json"
        config.write_text(json.dumps(soak_config(args.episodes)), encoding="utf-8")
        report = Path(folder) / "soak-report.json"
        start_rss = rss_mb()
        started = time.perf_counter()
        out, err = io.StringIO(), io.StringIO()
        command = ["--config", str(config), "--output", str(report), "--quiet"]
        code = cli.run([*command, "--workers", str(args.workers)], out, err)
        seconds = time.perf_counter() - started
        end_rss = rss_mb()
        if code not in (0, cli.EXIT_CHECKS_FAILED):
            print(f"soak: picocontext eval failed ({code}): {err.getvalue().strip()}")
            return 1
        episodes = len(json.loads(report.read_text(encoding="utf-8"))["results"])
        line = {
            "benchmark": "soak",
            "episodes": episodes,
            "workers": args.workers,
            "seconds": round(seconds, 1),
            "episodes_per_s": round(episodes / seconds, 1),
            "rss_start_mb": round(start_rss, 1),
            "rss_end_mb": round(end_rss, 1),
            "rss_growth_mb": round(end_rss - start_rss, 1),
            "report_mb": round(report.stat().st_size / 2**20, 2),
            "exit_code": code,
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(line, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
