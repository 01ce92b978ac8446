"""Markdown tables of evidence recall over several conversation reports.

``python -m picocontext_diagnostics.conversations.tables r26.json r30.json ...
[--group tuned=locomo-26,locomo-44] [--metric evidence_recall|answer_f1]`` reads
``picocontext eval --conversation ... --output`` reports and prints two tables: per policy and
conversation (and per group of conversations), and per policy and question kind. The
reference line (the plain BM25 packer) is a row like the policies. "all" and each group pool
the questions (a mean over questions, not over conversations), which is how a published
number over a benchmark is read; the conversations differ in size (81 to 199 questions on
LoCoMo), so a mean of means would weigh a short one as much as a long one.

It exists so that the tables in ``docs/conversations.md`` come from a command anyone can
rerun, not from arithmetic done by hand.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from picocontext_diagnostics.conversations.scores import ConversationReport, QuestionResult

METRICS = ("evidence_recall", "answer_f1")
UNCATEGORIZED = "uncategorized"


@dataclass(frozen=True)
class Group:
    """A named set of conversation ids whose questions are pooled into one column."""

    name: str
    conversations: tuple[str, ...]


def parse_group(text: str) -> Group:
    """``NAME=id,id`` as a :class:`Group`."""
    name, sep, ids = text.partition("=")
    members = tuple(i.strip() for i in ids.split(",") if i.strip())
    if not sep or not name.strip() or not members:
        raise argparse.ArgumentTypeError(f"{text!r}: write a group as NAME=id,id")
    return Group(name.strip(), members)


def _rows(report: ConversationReport) -> dict[str, list[QuestionResult]]:
    """Each policy's results, the reference's last under its own name."""
    rows: dict[str, list[QuestionResult]] = {}
    for result in report.results:
        rows.setdefault(result.policy, []).append(result)
    for result in report.reference_results:
        rows.setdefault(result.policy, []).append(result)
    return rows


def _mean(results: Sequence[QuestionResult], metric: str) -> str:
    if not results:
        return ""
    return f"{sum(float(getattr(r, metric)) for r in results) / len(results):.2f}"


def tables(
    reports: Sequence[ConversationReport],
    groups: Sequence[Group] = (),
    metric: str = "evidence_recall",
) -> str:
    """The two markdown tables (by conversation, by kind) for ``reports``."""
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r}: choose one of {', '.join(METRICS)}")
    known = {r.conversation_id for r in reports}
    for group in groups:
        missing = [c for c in group.conversations if c not in known]
        if missing:
            raise ValueError(f"group {group.name!r} names {missing}, which no report holds")
    policies: list[str] = []
    by: dict[tuple[str, str], list[QuestionResult]] = {}
    for report in reports:
        for policy, results in _rows(report).items():
            if policy not in policies:
                policies.append(policy)
            by.setdefault((policy, report.conversation_id), []).extend(results)
    ids = [r.conversation_id for r in reports]
    sizes = {r.conversation_id: r.questions_asked for r in reports}
    head = [f"{i} ({sizes[i]})" for i in ids]
    head += [f"{g.name} ({sum(sizes[c] for c in g.conversations)})" for g in groups]
    head.append(f"all ({sum(sizes.values())})")
    lines = [f"| policy | {' | '.join(head)} |", "|---|" + "---|" * len(head)]
    for policy in policies:
        cells = [_mean(by.get((policy, i), []), metric) for i in ids]
        for group in groups:
            pooled = [r for c in group.conversations for r in by.get((policy, c), [])]
            cells.append(_mean(pooled, metric))
        every = [r for i in ids for r in by.get((policy, i), [])]
        cells.append(f"**{_mean(every, metric)}**")
        lines.append(f"| {policy} | {' | '.join(cells)} |")
    kinds = sorted(
        {r.category or UNCATEGORIZED for results in by.values() for r in results},
    )
    pooled_by_kind: dict[tuple[str, str], list[QuestionResult]] = {}
    for (policy, _), results in by.items():
        for r in results:
            pooled_by_kind.setdefault((policy, r.category or UNCATEGORIZED), []).append(r)
    first = policies[0] if policies else ""
    counts = [len(pooled_by_kind.get((first, k), [])) for k in kinds]
    lines += [
        "",
        f"| policy | {' | '.join(f'{k} ({n})' for k, n in zip(kinds, counts, strict=True))} |",
    ]
    lines.append("|---|" + "---|" * len(kinds))
    for policy in policies:
        cells = [_mean(pooled_by_kind.get((policy, k), []), metric) for k in kinds]
        lines.append(f"| {policy} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m picocontext_diagnostics.conversations.tables",
        description=(__doc__ or "").split("\n\n")[0],
    )
    parser.add_argument("reports", type=Path, nargs="+", metavar="REPORT")
    parser.add_argument(
        "--group", type=parse_group, action="append", default=[], metavar="NAME=ID,ID"
    )
    parser.add_argument("--metric", choices=METRICS, default="evidence_recall")
    args = parser.parse_args(argv)
    try:
        reports = [ConversationReport.from_json(p.read_bytes()) for p in args.reports]
        print(tables(reports, args.group, args.metric), end="")
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
