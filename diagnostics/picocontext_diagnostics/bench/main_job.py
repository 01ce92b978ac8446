"""``scripts/bench.sh main-job``: time the README's first command and say how each policy did.

The command is read from the README's first code block (so the bench and the README cannot
drift apart), run from the repository root exactly as a user would run it, with any extra
arguments appended (``scripts/bench.sh main-job --pressure``). Wall time covers everything
the user waits for: venv check, model check and the comparison itself. The per-policy outcome
comes from the summary block the smoke prints (``<task> · <policy>: <state>`` followed by
``Checks passed: context a/n; answers b/n``); the per-policy costs (``wall_s``,
``prefill_tokens``, ``input_tokens``, ``edits``, ``keeps``) come from the JSON report the bench
asks the run to write next to its own output (unless the command already names a report), and
``ratios`` divides editable's by append-only's when both ran (``ratios_common_steps`` over
only the steps both answered, since append-only stops when it runs out of window). The whole
output goes to a log file next to the JSON; the last line printed is one JSON object. A run
that does not complete (a bad argument, a crash) writes ``<out>.failed.json`` and its log
beside it instead, and leaves the last completed run's JSON, log and report alone.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picocontext_diagnostics.bench.engines import cpu

ROOT = Path(__file__).resolve().parents[3]
LIMIT_SECONDS = 300.0
_HEADER = re.compile(r"^(?P<task>.+?) · (?P<policy>.+?): (?P<state>.+)$")
_CHECKS = re.compile(
    r"^\s+Checks passed: context (?P<context>\d+/\d+); answers (?P<answers>\d+/\d+)"
)
_STEP = re.compile(r"^\s+(?P<step>step-\d+): context=(?P<context>\w+), answer=(?P<answer>\w+)")


class MainJobError(Exception):
    """The README has no runnable first command, or the run printed no summary."""


def readme_command(readme: Path) -> list[str]:
    """The first command of the README's first fenced code block, without its comment."""
    text = readme.read_text(encoding="utf-8")
    block = re.search(r"^```[a-z]*\n(?P<body>.*?)^```", text, flags=re.M | re.S)
    if block is None:
        raise MainJobError(f"{readme} has no fenced code block")
    for line in block.group("body").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            return words
    raise MainJobError(f"{readme}: the first code block holds no command")


def parse_summary(output: str) -> dict[str, dict[str, Any]]:
    """Per policy label: the final state, the check counts and each step's two checks.

    A summary block is a ``<task> · <policy>: <state>`` line directly followed by its
    ``Checks passed`` line (status lines of the same shape are not)."""
    policies: dict[str, dict[str, Any]] = {}
    lines = output.splitlines()
    current: dict[str, Any] | None = None
    for line, following in zip(lines, [*lines[1:], ""], strict=True):
        header = _HEADER.match(line)
        checks = _CHECKS.match(following)
        if header and checks and not line.startswith(" "):
            current = {"state": header["state"], "context": checks["context"]}
            current |= {"answers": checks["answers"], "steps": {}}
            policies[header["policy"]] = current
            continue
        step = _STEP.match(line)
        if current is not None and step:
            current["steps"][step["step"]] = f"context {step['context']}, answer {step['answer']}"
        elif current is not None and not line.startswith(" "):
            current = None
    return policies


# What the bench sums over a policy's steps from the run's JSON report, by output key.
_COSTS = {
    "prefill_tokens": "prefill_tokens",
    "input_tokens": "input_tokens",
    "generated_tokens": "generated_tokens",
    "edits": "edit_calls",
    "keeps": "keep_calls",
}


def report_costs(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per policy label: wall seconds, step count and the summed usage of its steps."""
    out: dict[str, dict[str, Any]] = {}
    for policy in report.get("policies") or ():
        steps = policy.get("steps") or ()
        row: dict[str, Any] = {
            "name": str(policy.get("name") or ""),
            "wall_s": round(float(policy.get("elapsed_seconds") or 0.0), 1),
            "steps_run": sum(1 for s in steps if s.get("ran")),
            "planned_steps": policy.get("planned_steps"),
        }
        for key, field in _COSTS.items():
            row[key] = sum(int(s.get(field) or 0) for s in steps)
        out[str(policy.get("label") or policy.get("name"))] = row
    return out


def step_costs(report: dict[str, Any]) -> dict[str, list[dict[str, Any] | None]]:
    """Per policy name: each step's costs (:func:`_step_costs`), for the common-step ratios."""
    return {
        str(policy.get("name") or ""): [_step_costs(s) for s in policy.get("steps") or ()]
        for policy in report.get("policies") or ()
    }


def _step_costs(step: dict[str, Any]) -> dict[str, Any] | None:
    """One step's wall seconds and prefilled tokens, or ``None`` when it made no model call
    (not run, or refused by the window before its answer)."""
    if not step.get("ran") or not int(step.get("input_tokens") or 0):
        return None
    return {
        "wall_s": float(step.get("elapsed_seconds") or 0.0),
        "prefill_tokens": int(step.get("prefill_tokens") or 0),
        "input_tokens": int(step.get("input_tokens") or 0),
    }


def merge(
    summary: dict[str, dict[str, Any]], costs: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Each policy's checks (``answers``, ``context``, per-step) joined with its costs, keyed
    by policy name (``append-only``; the summary's label when the report did not name it)."""
    merged: dict[str, dict[str, Any]] = {}
    for label in [*summary, *(c for c in costs if c not in summary)]:
        cost = dict(costs.get(label, {}))
        name = cost.pop("name", "") or label.lower().replace(" ", "-")
        merged[name] = {"label": label, **cost, **summary.get(label, {})}
    return merged


def ratios(policies: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """editable / append-only for wall time and the token counts (``None`` when a side did
    not run or spent nothing)."""
    mine, base = policies.get("editable"), policies.get("append-only")
    if not mine or not base:
        return {}
    out: dict[str, float | None] = {}
    for key in ("wall_s", "prefill_tokens", "input_tokens"):
        a, b = mine.get(key), base.get(key)
        out[key] = round(a / b, 2) if isinstance(a, int | float) and b else None
    return out


def common_step_ratios(per_step: dict[str, list[dict[str, Any] | None]]) -> dict[str, Any]:
    """editable / append-only over only the steps where both made model calls (``per_step``
    by policy name, :func:`step_costs`): the runs differ in length when append-only runs out
    of window, and the whole-run ratios then also charge editable for the steps it could
    still run."""
    mine, base = per_step.get("editable"), per_step.get("append-only")
    if not mine or not base:
        return {}
    pairs = [(a, b) for a, b in zip(mine, base, strict=False) if a is not None and b is not None]
    out: dict[str, Any] = {"steps": len(pairs)}
    for key in ("wall_s", "prefill_tokens", "input_tokens"):
        a, b = sum(p[0][key] for p in pairs), sum(p[1][key] for p in pairs)
        out[key] = round(a / b, 2) if pairs and b else None
    return out


def run(command: Sequence[str], log: Path) -> tuple[int, float, str]:
    """Run ``command`` from the repository root, teeing its output into ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    chunks: list[str] = []
    with log.open("w", encoding="utf-8") as sink:
        process = subprocess.Popen(
            list(command),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        assert process.stdout is not None
        for line in process.stdout:
            chunks.append(line)
            sink.write(line)
            sink.flush()
            print(f"[{time.perf_counter() - started:6.0f} s] {line.rstrip()}", file=sys.stderr)
        code = process.wait()
    return code, time.perf_counter() - started, "".join(chunks)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/bench.sh main-job",
        description="Time the README's first command; extra arguments are appended to it.",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "main-job.json")
    parser.add_argument("--limit", type=float, default=LIMIT_SECONDS, help="seconds allowed")
    args, extra = parser.parse_known_args(argv)
    try:
        command = [*readme_command(ROOT / "README.md"), *extra]
    except (OSError, MainJobError) as exc:
        print(f"main-job: {exc}", file=sys.stderr)
        return 2
    report_path: Path | None = None
    if "--report" not in command and any(w.startswith("--episode-smoke") for w in command):
        report_path = args.out.with_suffix(".report.json")
        command = [*command, "--report", str(report_path)]
    # The run logs to a scratch file first: a run that fails (a bad argument, a crash) must not
    # overwrite the log, the JSON or the report of the last run that completed.
    scratch = args.out.with_suffix(".running.log")
    started = time.time()
    code, seconds, output = run(command, scratch)
    report: dict[str, Any] = {}
    # Only a report this run wrote counts; an older one at the same path is another run's.
    if report_path is not None and report_path.is_file():
        try:
            if report_path.stat().st_mtime >= started - 1.0:  # coarse file clocks
                report = json.loads(report_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(
                f"main-job: could not read the run's report {report_path}: {exc}", file=sys.stderr
            )
    policies = merge(parse_summary(output), report_costs(report))
    # 3 is the smoke's "ran to the end, a policy failed a check": the job is built so that
    # append-only runs out of window, so that is a completed run, not a broken one.
    completed = code in (0, 3) and bool(policies)
    line = {
        "benchmark": "main-job",
        "command": shlex.join(command),
        "exit_code": code,
        "wall_seconds": round(seconds, 1),
        "limit_seconds": args.limit,
        "within_limit": completed and seconds <= args.limit,
        "policies": policies,
        "ratios": ratios(policies),
        "ratios_common_steps": common_step_ratios(step_costs(report)),
        "cpu": cpu(),
    }
    out = args.out if completed else args.out.with_suffix(".failed.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(line, indent=2) + "\n", encoding="utf-8")
    log = out.with_suffix(".log")
    scratch.replace(log)
    print(json.dumps(line, separators=(",", ":")))
    if not completed:
        last = next((t.strip() for t in reversed(output.splitlines()) if t.strip()), "")
        said = f"; its last line: {last[:300]}" if last else ""
        print(
            f"main-job: the run did not complete (exit code {code}"
            f"{'' if policies else ', no per-policy summary'}){said}. Its output is in {log}; "
            f"{args.out} is left as it was.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
