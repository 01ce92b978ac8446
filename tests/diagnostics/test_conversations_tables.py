"""The tables command pools questions over reports, by conversation, group and kind, so the
documented LoCoMo tables come from a command instead of hand arithmetic."""

from __future__ import annotations

import argparse
import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from picocontext.models import ByteCounter
from picocontext_diagnostics.conversations.conversation_runner import (
    ORACLE,
    ConversationRunner,
    conversation_budget,
)
from picocontext_diagnostics.conversations.extractive_backend import (
    DeterministicConversationBackend,
)
from picocontext_diagnostics.conversations.format import load_conversation
from picocontext_diagnostics.conversations.scores import ConversationReport
from picocontext_diagnostics.conversations.tables import Group, main, parse_group, tables
from picocontext_diagnostics.policies import BUILTIN_POLICIES

RESOURCES = Path(__file__).resolve().parents[2] / "resources" / "conversations"


def report(name: str, window: int = 1_536) -> ConversationReport:
    conversation = load_conversation(RESOURCES / f"{name}.json")
    runner = ConversationRunner(ByteCounter(), DeterministicConversationBackend())
    policies = [ORACLE, BUILTIN_POLICIES["sliding-window"]]
    return runner.run(conversation, policies, conversation_budget(window, 4))


def mean_recall(reports: list[ConversationReport], policy: str) -> float:
    results = [r for rep in reports for r in (*rep.results, *rep.reference_results)]
    mine = [r.evidence_recall for r in results if r.policy == policy]
    return sum(mine) / len(mine)


def test_rows_are_policies_and_the_reference_and_all_pools_the_questions() -> None:
    reports = [report("moving-house", 256), report("bike-shop", 256)]
    text = tables(reports, [Group("both", ("moving-house", "bike-shop"))])
    by_conversation, by_kind = text.strip().split("\n\n")
    lines = by_conversation.split("\n")
    asked = sum(r.questions_asked for r in reports)
    assert lines[0].startswith("| policy | moving-house (")
    assert lines[0].endswith(f"| both ({asked}) | all ({asked}) |")
    assert [line.split(" | ")[0] for line in lines[2:]] == [
        "| oracle",
        "| sliding-window",
        "| bm25-packer",
    ]
    window_row = lines[3].strip("| ").split(" | ")
    pooled = f"{mean_recall(reports, 'sliding-window'):.2f}"
    assert window_row[-1] == f"**{pooled}**" and window_row[-2] == pooled
    oracle = f"{mean_recall(reports, 'oracle'):.2f}"
    assert lines[2].endswith(f"| **{oracle}** |")
    kinds = {q.category or "uncategorized" for r in reports for q in r.results}
    assert all(f"{k} (" in by_kind.split("\n")[0] for k in kinds)


def test_a_group_naming_an_unknown_conversation_is_refused() -> None:
    with pytest.raises(ValueError, match="no report holds"):
        tables([report("moving-house")], [Group("x", ("locomo-26",))])
    with pytest.raises(ValueError, match="metric"):
        tables([report("moving-house")], metric="speed")
    with pytest.raises(argparse.ArgumentTypeError):
        parse_group("no-equals-sign")
    assert parse_group("tuned=a, b") == Group("tuned", ("a", "b"))


def test_the_command_reads_reports(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(report("moving-house").to_json())
    out = io.StringIO()
    with redirect_stdout(out):
        assert main([str(path), "--group", "one=moving-house", "--metric", "answer_f1"]) == 0
    assert "| one (" in out.getvalue() and "| bm25-packer |" in out.getvalue()
