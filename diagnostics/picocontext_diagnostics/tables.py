"""Markdown tables from evaluation reports, so a README or results page quotes exactly what
the JSON says (``picocontext tables REPORT.json ...``, or
``python -m picocontext_diagnostics.tables REPORT.json ...``).

One row per (task, policy): episodes passed and answer steps passed with their Wilson 95 %
intervals, total input tokens dispatched, prefill tokens actually computed, generated tokens,
tool calls and wall time. Reports are read with the same size limit and schema check as
everywhere else; a file that is not an evaluation report is an error naming the file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picocontext import InputFileError, read_text_bounded
from picocontext.cli import run_command
from picocontext_diagnostics.errors import InvalidConfiguration

REPORT_KIND = "picocontext-evaluation"
MAX_REPORT_BYTES = 256 * 1024 * 1024
HEADER = (
    "| task | policy | episodes passed | answer steps passed | input tokens | prefill tokens "
    "| generated | tool calls | wall time |\n"
    "|---|---|---:|---:|---:|---:|---:|---:|---:|"
)


def load_report(path: Path) -> dict[str, Any]:
    """The parsed report, or a clear error (missing, too large, not JSON, wrong kind)."""
    try:
        text = read_text_bounded(path, MAX_REPORT_BYTES)
    except InputFileError as exc:  # missing, not a regular file, too large, not UTF-8
        raise InvalidConfiguration(f"cannot read {exc.message}") from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InvalidConfiguration(f"{path} is not a JSON evaluation report: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != REPORT_KIND:
        raise InvalidConfiguration(f"{path} is not a picocontext evaluation report")
    return data


def _rate(block: dict[str, Any]) -> str:
    return (
        f"{block['successes']}/{block['trials']} "
        f"({block['ci95_low'] * 100:.0f}–{block['ci95_high'] * 100:.0f} %)"
    )


def _seconds(value: float) -> str:
    if value >= 60:
        return f"{value / 60:.1f} min"
    return f"{value:.1f} s"


def task_name(report: dict[str, Any]) -> str:
    config = report["configuration"]
    return f"{config['scenario']} ×{config['step_count']}"


def rows(report: dict[str, Any]) -> list[str]:
    """One markdown row per policy of one report, in the configuration's policy order."""
    task = task_name(report)
    out = []
    for entry in report["summary"]["policies"]:
        generated = round(entry["mean_generated_tokens"] * entry["episodes"]["trials"])
        out.append(
            f"| {task} | {entry['policy']} | {_rate(entry['episodes'])} "
            f"| {_rate(entry['answer_steps'])} | {entry['total_input_tokens']:,} "
            f"| {entry['total_prefill_tokens']:,} | {generated:,} | {entry['tool_calls']:,} "
            f"| {_seconds(entry['total_elapsed_seconds'])} |"
        )
    return out


def markdown_table(reports: Sequence[dict[str, Any]]) -> str:
    """The header and every report's rows."""
    lines = [HEADER]
    for report in reports:
        lines.extend(rows(report))
    return "\n".join(lines) + "\n"


def register(subparsers: Any) -> argparse.ArgumentParser:
    """``picocontext tables``: one markdown table from evaluation reports."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "tables",
        help="a markdown table of evaluation reports (what README/results pages quote)",
        description="One row per (task, policy) of each evaluation report, as markdown.",
    )
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json")
    parser.set_defaults(func=_run)
    return parser


def _run(args: argparse.Namespace) -> int:
    try:
        reports = [load_report(path) for path in args.reports]
        for path, report in zip(args.reports, reports, strict=True):
            _check_rows(path, report)
    except InvalidConfiguration as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(markdown_table(reports))
    return 0


def _check_rows(path: Path, report: dict[str, Any]) -> None:
    """A report of an older schema lacks fields the table quotes: say which, and where."""
    try:
        rows(report)
    except (KeyError, TypeError) as exc:
        raise InvalidConfiguration(
            f"{path} lacks {exc} that the table quotes (a report of an older schema?)"
        ) from None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m picocontext_diagnostics.tables``: ``picocontext tables`` under its module
    name."""
    return run_command("tables", argv, prog="picocontext tables", registrar=register)


if __name__ == "__main__":
    raise SystemExit(main())
