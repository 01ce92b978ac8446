"""Conversation episodes and metrics: isolated questions, evidence recall on the exact
prompt, the oracle bound, per-question failures, and ``picocontext-eval --conversation``."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from picocontext.models import ByteCounter
from picocontext_diagnostics.cli import run
from picocontext_diagnostics.conversations import load_conversation, parse_conversation
from picocontext_diagnostics.conversations_backend import (
    UNKNOWN,
    DeterministicConversationBackend,
    best_sentence,
)
from picocontext_diagnostics.conversations_eval import (
    ORACLE,
    ConversationReport,
    ConversationRunner,
    bootstrap_interval,
    conversation_budget,
    exact_match,
    normalize_answer,
    token_f1,
)
from picocontext_diagnostics.policies import BUILTIN_POLICIES

RESOURCES = Path(__file__).resolve().parents[2] / "resources" / "conversations"
ALL = "oracle,append-only,sliding-window,compaction,retrieval,editable,navigated,distilled"


def test_answer_normalization_exact_match_and_f1() -> None:
    assert normalize_answer("The  White Peonies, and eucalyptus!") == "white peonies and eucalyptus"
    assert exact_match("an Ines.", "Ines")
    assert not exact_match("Ines Silva", "Ines")
    assert token_f1("Ines Silva", "Ines") == pytest.approx(2 / 3)
    assert token_f1("", "Ines") == 0.0
    assert token_f1("a", "the") == 1.0  # both empty after normalization


def test_bootstrap_is_seeded_and_bounded() -> None:
    values = [0.0, 1.0, 1.0, 0.5, 0.0]
    assert bootstrap_interval(values) == bootstrap_interval(values)
    low, high = bootstrap_interval(values)
    assert 0.0 <= low <= sum(values) / len(values) <= high <= 1.0
    assert bootstrap_interval([]) == (0.0, 1.0)


def test_extractive_rule_prefers_the_later_of_equal_matches() -> None:
    texts = ["The booster is on March 20.", "The booster moved to March 27."]
    assert best_sentence("When is the booster?", texts) == "The booster moved to March 27."
    assert best_sentence("What about zebras?", texts) == UNKNOWN


def report_for(names: str, window: int, questions: int | None = None) -> ConversationReport:
    conversation = load_conversation(RESOURCES / "moving-house.json")
    registry = {**BUILTIN_POLICIES, ORACLE.name: ORACLE}
    policies = [registry[n] for n in names.split(",")]
    runner = ConversationRunner(ByteCounter(), DeterministicConversationBackend())
    return runner.run(conversation, policies, conversation_budget(window), questions)


def test_questions_are_isolated_and_recall_reads_the_exact_prompt() -> None:
    report = report_for("oracle,append-only,sliding-window", 16_384)
    questions = load_conversation(RESOURCES / "moving-house.json").questions
    for result in report.results:
        others = [q.question for q in questions if q.id != result.question_id]
        assert not any(text in result.prompt for text in others)
        assert result.question in result.prompt
    oracle = [r for r in report.results if r.policy == "oracle"]
    assert all(r.evidence_recall == 1.0 and r.failure is None for r in oracle)
    for result in report.results:
        present = {e for e in result.evidence if e in result.evidence_present}
        assert result.evidence_recall == len(present) / len(result.evidence)
        assert {m.turn_id for m in result.misses} == set(result.evidence) - present


def test_a_small_window_loses_evidence_and_says_where_it_went() -> None:
    report = report_for("sliding-window,compaction,retrieval", 4_096)
    by_policy = {s.policy: s for s in report.summary}
    window = [r for r in report.results if r.policy == "sliding-window"]
    assert any(m.reason == "dropped by the window" for r in window for m in r.misses)
    compaction = [r for r in report.results if r.policy == "compaction"]
    assert any(m.reason == "summarized away" for r in compaction for m in r.misses)
    assert by_policy["compaction"].update_input_tokens > 0  # the summaries were charged
    assert sum(u.maintenance_calls for u in report.updates["compaction"]) >= 1
    assert by_policy["retrieval"].overall.evidence_recall.mean > (
        by_policy["sliding-window"].overall.evidence_recall.mean
    )


def test_a_question_longer_than_the_window_is_a_per_question_failure() -> None:
    doc = json.loads((RESOURCES / "moving-house.json").read_text())
    doc["questions"][0]["question"] = "Why? " * 800
    conversation = parse_conversation(json.dumps(doc))
    runner = ConversationRunner(ByteCounter(), DeterministicConversationBackend())
    report = runner.run(
        conversation,
        [ORACLE, BUILTIN_POLICIES["retrieval"]],
        conversation_budget(2_048),
        questions=2,
    )
    first = [r for r in report.results if r.question_id == "q1"]
    assert all(r.failure and "context window" in r.failure for r in first)
    assert all(r.evidence_recall == 0.0 and r.misses for r in first)
    assert all(r.failure is None for r in report.results if r.question_id == "q2")


def test_cli_scores_every_policy_on_a_bundled_file_quickly(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    path = tmp_path / "r.json"
    started = time.perf_counter()
    code = run(
        [
            "--conversation",
            str(RESOURCES / "bike-shop.json"),
            "--policies",
            ALL,
            "--backend",
            "deterministic",
            "--window",
            "4096",
            "--output",
            str(path),
            "--quiet",
        ],
        out,
        err,
    )
    assert time.perf_counter() - started < 60
    assert code in (0, 2), err.getvalue()
    data: dict[str, Any] = json.loads(path.read_text())
    assert data["kind"] == "picocontext-conversation-evaluation"
    assert [s["policy"] for s in data["summary"]] == ALL.split(",")
    for scores in data["summary"]:
        for part in (scores["overall"], *scores["by_category"].values()):
            assert {
                "evidence_recall",
                "answer_f1",
                "exact_match",
                "input_tokens",
                "prefill_tokens",
                "generated_tokens",
            } <= set(part)
    assert ConversationReport.from_json(path.read_text()).questions_asked == 9
    assert "Saved" in out.getvalue()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--window", "10"], "--window must be"),
        (["--policies", "oracle,nope"], "unknown policy 'nope'"),
        (["--questions", "0"], "--questions must be"),
        (["--questions", "many"], "--questions must be an integer"),
        (["--backend", "gpu"], "--backend must be deterministic, mlx or llamacpp"),
        (["--profile", "state"], "--profile does not apply with --conversation"),
        (["--model", "x"], "only to --backend mlx"),
    ],
)
def test_cli_errors_exit_1(argv: list[str], message: str) -> None:
    err = io.StringIO()
    code = run(["--conversation", str(RESOURCES / "bike-shop.json"), *argv], io.StringIO(), err)
    assert code == 1 and message in err.getvalue()


def test_cli_refuses_a_transcript_without_questions(tmp_path: Path) -> None:
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    err = io.StringIO()
    assert run(["--conversation", str(chat)], io.StringIO(), err) == 1
    assert "has no questions" in err.getvalue()


def test_the_deterministic_readers_look_into_older_history() -> None:
    report = report_for("navigated,distilled", 16_384, questions=3)
    for result in report.results:
        assert result.failure is None, result.failure
        assert result.tool_calls >= 1
        assert result.evidence_recall == 1.0
    control = report_for("sliding-window", 16_384, questions=3)
    assert all(r.tool_calls == 0 for r in control.results)


def test_cli_help_goes_to_out() -> None:
    out = io.StringIO()
    assert run(["--conversation", "x", "--help"], out, io.StringIO()) == 0
    assert "--window TOKENS" in out.getvalue()


def test_conversation_flags_need_a_conversation() -> None:
    err = io.StringIO()
    assert run(["--window", "4096"], io.StringIO(), err) == 1
    assert "--window applies only with --conversation" in err.getvalue()
