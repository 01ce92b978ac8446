"""Markdown tables from evaluation reports, so a README or results page quotes exactly what
the JSON says (``picocontext tables REPORT.json ...``, or
``python -m picocontext_diagnostics.tables REPORT.json ...``).

One row per (task, policy): episodes passed and answer steps passed with their Wilson 95 %
intervals, total input tokens dispatched, prefill tokens actually computed, generated tokens,
tool calls and wall time. Reports are read with the same size limit and schema check as
everywhere else; a file that is not an evaluation report is an error naming the file.

``--setup`` adds the model and decoding columns (a page that compares models or free and
constrained decoding). ``--latest`` lets a later report's row replace an earlier one with the
same model, decoding, task and policy -- one policy re-run after a fix -- and says so under
the table, so a replaced row is never silent.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picocontext import InputFileError, read_text_bounded
from picocontext.cli import error_line, run_command
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


SETUP_HEADER = (
    "| model | decoding | task | policy | episodes passed | answer steps passed | input tokens "
    "| prefill tokens | generated | tool calls | wall time |\n"
    "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
)


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
    """Scenario, steps and the seeds: the same task on another seed is another episode, so
    its row must neither look like nor replace the first seed's."""
    config = report["configuration"]
    base = f"{config['scenario']} ×{config['step_count']}"
    seeds = [str(s) for s in config.get("seeds") or ()]
    if not seeds:
        return base
    return f"{base}, {'seed' if len(seeds) == 1 else 'seeds'} {', '.join(seeds)}"


RowKey = tuple[str, str, str, str]  # model, decoding, task, policy


def _setup(report: dict[str, Any]) -> tuple[str, str]:
    provenance = report.get("provenance") or {}
    return str(provenance.get("model", "?")), str(provenance.get("decoding", "?"))


def keyed_rows(report: dict[str, Any], setup: bool = False) -> list[tuple[RowKey, str]]:
    """One (key, markdown row) per policy of one report, in the configuration's policy order;
    the key is (model, decoding, task, policy)."""
    task = task_name(report)
    model, decoding = _setup(report)
    lead = f"| {model} | {decoding} " if setup else ""
    out = []
    for entry in report["summary"]["policies"]:
        generated = round(entry["mean_generated_tokens"] * entry["episodes"]["trials"])
        row = (
            f"{lead}| {task} | {entry['policy']} | {_rate(entry['episodes'])} "
            f"| {_rate(entry['answer_steps'])} | {entry['total_input_tokens']:,} "
            f"| {entry['total_prefill_tokens']:,} | {generated:,} | {entry['tool_calls']:,} "
            f"| {_seconds(entry['total_elapsed_seconds'])} |"
        )
        out.append(((model, decoding, task, str(entry["policy"])), row))
    return out


def rows(report: dict[str, Any], setup: bool = False) -> list[str]:
    """One markdown row per policy of one report, in the configuration's policy order."""
    return [row for _, row in keyed_rows(report, setup)]


def markdown_table(
    reports: Sequence[dict[str, Any]],
    *,
    setup: bool = False,
    latest: bool = False,
    names: Sequence[str] = (),
) -> str:
    """The header and every report's rows; with ``latest`` a later report's row replaces an
    earlier one with the same key, in place, and a note under the table names both files."""

    def name(index: int) -> str:
        return names[index] if index < len(names) else f"report {index + 1}"

    listed: list[str] = []
    # where each key's row stands in ``listed``, and which report wrote it
    place: dict[RowKey, tuple[int, int]] = {}
    notes: list[str] = []
    for index, report in enumerate(reports):
        for key, row in keyed_rows(report, setup):
            if latest and key in place:
                position, was = place[key]
                listed[position] = row
                where = f"from {name(index)}, replacing {name(was)}"
                notes.append(f"{key[3]} ({', '.join(key[:3])}): {where}")
            else:
                position = len(listed)
                listed.append(row)
            place[key] = (position, index)
    lines = [SETUP_HEADER if setup else HEADER, *listed]
    if notes:
        lines += ["", *(f"* Replaced: {note}." for note in notes)]
    return "\n".join(lines) + "\n"


def register(subparsers: Any) -> argparse.ArgumentParser:
    """``picocontext tables``: one markdown table from evaluation reports."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "tables",
        help="a markdown table of evaluation reports (what README/results pages quote)",
        description="One row per (task, policy) of each evaluation report, as markdown.",
    )
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json")
    parser.add_argument("--setup", action="store_true", help="add the model and decoding columns")
    parser.add_argument(
        "--latest",
        action="store_true",
        help="a later report's row replaces an earlier one for the same model, decoding, task "
        "and policy (noted under the table)",
    )
    parser.set_defaults(func=_run)
    return parser


def _run(args: argparse.Namespace) -> int:
    try:
        reports = [load_report(path) for path in args.reports]
        for path, report in zip(args.reports, reports, strict=True):
            _check_rows(path, report)
    except InvalidConfiguration as exc:
        prog = getattr(args, "command_prog", "picocontext tables")
        print(error_line(prog, exc.message), file=sys.stderr)
        return exc.exit_code
    names = [path.name for path in args.reports]
    sys.stdout.write(markdown_table(reports, setup=args.setup, latest=args.latest, names=names))
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
