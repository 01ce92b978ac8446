"""Conversation episodes and metrics: isolated questions, evidence recall on the exact
prompt, the oracle bound, per-question failures, and ``picocontext-eval --conversation``."""

from __future__ import annotations

import io
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from picocontext.models import ByteCounter
from picocontext_diagnostics import cli as eval_cli
from picocontext_diagnostics.cli import run
from picocontext_diagnostics.conversations.command import EXIT_FAILED, bytes_per_token
from picocontext_diagnostics.conversations.conversation_runner import (
    ORACLE,
    ConversationRunner,
    conversation_budget,
)
from picocontext_diagnostics.conversations.extractive_backend import (
    UNKNOWN,
    DeterministicConversationBackend,
    best_sentence,
)
from picocontext_diagnostics.conversations.format import (
    FORMAT,
    MAX_BYTES,
    Conversation,
    load_conversation,
    parse_conversation,
)
from picocontext_diagnostics.conversations.scores import (
    ConversationReport,
    bootstrap_interval,
    exact_match,
    normalize_answer,
    token_f1,
)
from picocontext_diagnostics.policies import BUILTIN_POLICIES

RESOURCES = Path(__file__).resolve().parents[2] / "resources" / "conversations"
# The eval command's exit code for a refused command line is the CLI's rule (picocontext eval).
USAGE_EXIT = int(getattr(eval_cli, "EXIT_USAGE", 1))
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
    assert code in (0, EXIT_FAILED), err.getvalue()
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
        (["--backend", "gpu"], "--backend must be"),
        (["--profile", "state"], "--profile does not apply with --conversation"),
        (["--model", "x"], "only to --backend mlx"),
    ],
)
def test_cli_usage_errors(argv: list[str], message: str) -> None:
    err = io.StringIO()
    code = run(["--conversation", str(RESOURCES / "bike-shop.json"), *argv], io.StringIO(), err)
    assert code == USAGE_EXIT and message in err.getvalue()


def test_cli_refuses_a_transcript_without_questions(tmp_path: Path) -> None:
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    err = io.StringIO()
    assert run(["--conversation", str(chat)], io.StringIO(), err) == 2
    assert "has no questions — add questions" in err.getvalue()


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
    assert run(["--window", "4096"], io.StringIO(), err) == USAGE_EXIT
    assert "--window applies only with --conversation" in err.getvalue()


def cli_report(tmp_path: Path, *argv: str) -> tuple[int, str, ConversationReport]:
    out, err = io.StringIO(), io.StringIO()
    path = tmp_path / "r.json"
    code = run([*argv, "--output", str(path), "--quiet"], out, err)
    assert path.exists(), err.getvalue()
    return code, out.getvalue(), ConversationReport.from_json(path.read_text())


def test_the_first_run_compares_at_token_scale(tmp_path: Path) -> None:
    code, text, report = cli_report(tmp_path, "--conversation", str(RESOURCES / "bike-shop.json"))
    assert code == 0 and not any(r.failure for r in report.results)
    assert (report.window_tokens, report.bytes_per_token) == (4_096, 4)
    assert report.budget.context_window == 16_384
    assert report.budget.completion_output_tokens == 512 * 4
    assert any("16,384 bytes at 4 bytes per token" in note for note in report.notes)
    assert "window 4,096 tokens = 16,384 bytes at 4 bytes per token" in text


def test_bytes_per_token_sets_the_rule(tmp_path: Path) -> None:
    _, _, report = cli_report(
        tmp_path,
        "--conversation",
        str(RESOURCES / "bike-shop.json"),
        "--bytes-per-token",
        "1",
        "--window",
        "4096",
        "--policies",
        "retrieval",
    )
    assert report.budget.context_window == 4_096 and report.bytes_per_token == 1


def test_every_report_carries_the_bm25_reference_line(tmp_path: Path) -> None:
    code, text, report = cli_report(
        tmp_path,
        "--conversation",
        str(RESOURCES / "moving-house.json"),
        "--window",
        "1024",
        "--policies",
        "sliding-window,retrieval",
    )
    assert code == 0
    assert [s.policy for s in report.summary] == ["sliding-window", "retrieval"]
    assert report.reference is not None and report.reference.policy == "bm25-packer"
    assert len(report.reference_results) == report.questions_asked
    assert all(r.policy == "bm25-packer" for r in report.reference_results)
    ref = report.reference.overall.evidence_recall.mean
    window = report.summary[0].overall.evidence_recall.mean
    assert f"recall vs bm25-packer {window - ref:+.2f}" in text
    assert "Reference line (plain BM25" in text and "  bm25-packer: evidence recall" in text
    # the packer fills the same budget: it never sends a prompt past the room
    room = report.budget.context_window - report.budget.completion_output_tokens
    assert all(0 < r.prompt_tokens <= room for r in report.reference_results)


def test_recall_by_kind_and_the_facts_lost_view(tmp_path: Path) -> None:
    _, text, report = cli_report(
        tmp_path,
        "--conversation",
        str(RESOURCES / "moving-house.json"),
        "--window",
        "1024",
        "--policies",
        "sliding-window,compaction",
    )
    kinds = {q.category for q in load_conversation(RESOURCES / "moving-house.json").questions}
    for scores in report.summary:
        assert set(scores.by_category) == kinds
        results = [r for r in report.results if r.policy == scores.policy]
        assert scores.facts_lost == {
            r.question_id: tuple(m.turn_id for m in r.misses) for r in results if r.misses
        }
        for kind, part in scores.by_category.items():
            assert part.questions == sum(r.category == kind for r in results)
    assert "    recall by kind: multi-hop" in text
    window = next(s for s in report.summary if s.policy == "sliding-window")
    assert window.facts_lost  # a 1k-token window drops some evidence of moving-house
    question, turns = next(iter(window.facts_lost.items()))
    assert f"    {question}: {', '.join(turns)} (dropped by the window)" in text


def test_questions_without_kinds_print_no_kind_line(tmp_path: Path) -> None:
    doc = json.loads((RESOURCES / "bike-shop.json").read_text())
    for question in doc["questions"]:
        question.pop("category", None)
    path = tmp_path / "plain.json"
    path.write_text(json.dumps(doc))
    _, text, report = cli_report(tmp_path, "--conversation", str(path), "--policies", "oracle")
    assert set(report.summary[0].by_category) == {"uncategorized"}
    assert "recall by kind" not in text


def _bad_files() -> list[tuple[str, Any, str]]:
    good = json.loads((RESOURCES / "bike-shop.json").read_text())
    no_turns = json.loads(json.dumps(good))
    no_turns["sessions"][1]["turns"] = []
    bad_date = json.loads(json.dumps(good))
    bad_date["sessions"][0]["date"] = "the Monday after"
    ghost = json.loads(json.dumps(good))
    ghost["questions"][0]["evidence"] = ["s9-t99"]
    twice = json.loads(json.dumps(good))
    twice["sessions"][1]["turns"][0]["id"] = twice["sessions"][0]["turns"][0]["id"]
    no_sessions = dict(good, sessions=[])
    return [
        ("empty", "", "the file is empty — a conversation is a JSON object"),
        ("object", "{}", 'no "format" field — '),
        ("no-sessions", no_sessions, "has no sessions and so no turns — add a session"),
        ("no-turns", no_turns, f"session {good['sessions'][1]['id']!r} has no turns — "),
        ("date", bad_date, "'the Monday after', which does not parse — write an ISO 8601"),
        ("ghost", ghost, "names evidence ['s9-t99'] that is not a turn id — list the ids"),
        ("twice", twice, "duplicate turn id"),
    ]


@pytest.mark.parametrize(("name", "content", "message"), _bad_files())
def test_bad_conversation_files_are_one_line_exit_2(
    tmp_path: Path, name: str, content: Any, message: str
) -> None:
    path = tmp_path / f"{name}.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    out, err = io.StringIO(), io.StringIO()
    code = run(["--conversation", str(path), "--output", str(tmp_path / "r.json")], out, err)
    lines = err.getvalue().splitlines()
    assert code == 2 and len(lines) == 1, err.getvalue()
    assert lines[0].startswith(f"picocontext-eval: error: {path}: ")
    assert message in lines[0] and "Traceback" not in err.getvalue()
    assert not (tmp_path / "r.json").exists()


def test_a_file_over_the_size_limit_is_one_line_exit_2(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with big.open("wb") as handle:
        handle.truncate(MAX_BYTES + 1)
    err = io.StringIO()
    assert run(["--conversation", str(big)], io.StringIO(), err) == 2
    line = err.getvalue().strip()
    assert "\n" not in line and "larger than the 8,000,000-byte limit — split it" in line


def synthetic(questions: int = 40, sessions: int = 8, turns: int = 30) -> Conversation:
    """A generated conversation (seeded): facts about where things were left, among filler
    turns, and one single-hop question per fact; for timing, not for scores."""
    rng = random.Random(7)
    filler = ["We should plan the weekend.", "It rained again.", "Work is busy this month."]
    items = ["bicycle", "passport", "umbrella", "guitar", "laptop", "camera", "kettle", "lamp"]
    places = ["attic", "garage", "office", "kitchen", "cellar", "car", "studio", "garden"]
    doc: dict[str, Any] = {"format": FORMAT, "id": "synthetic", "speakers": ["Robin", "Bot"]}
    doc["sessions"], doc["questions"] = [], []
    for s in range(sessions):
        rows = []
        for t in range(turns):
            tid, text = f"s{s}-t{t}", " ".join(rng.choices(filler, k=2))
            if t % 2 == 0 and len(doc["questions"]) < questions and rng.random() < 0.45:
                item, place = rng.choice(items), rng.choice(places)
                text = f"I left the {item} number {len(doc['questions'])} in the {place}."
                doc["questions"].append(
                    {
                        "id": f"q{len(doc['questions'])}",
                        "question": f"Where is the {item} number {len(doc['questions'])}?",
                        "answer": f"in the {place}",
                        "evidence": [tid],
                    }
                )
            rows.append({"id": tid, "speaker": ["Robin", "Bot"][t % 2], "text": text})
        doc["sessions"].append({"id": f"s{s}", "date": f"2026-03-{s + 1:02d}", "turns": rows})
    return parse_conversation(json.dumps(doc))


def test_forty_questions_times_eight_policies_in_under_30_seconds() -> None:
    conversation = synthetic()
    assert len(conversation.questions) == 40
    registry = {**BUILTIN_POLICIES, ORACLE.name: ORACLE}
    policies = [registry[n] for n in ALL.split(",")]
    runner = ConversationRunner(ByteCounter(), DeterministicConversationBackend())
    started = time.perf_counter()
    report = runner.run(conversation, policies, conversation_budget(4_096, 4), bytes_per_token=4)
    assert time.perf_counter() - started < 30
    assert report.reference is not None and len(report.results) == 8 * 40


def test_a_run_with_failed_questions_exits_3_and_still_writes_the_report(tmp_path: Path) -> None:
    code, _, report = cli_report(
        tmp_path,
        "--conversation",
        str(RESOURCES / "bike-shop.json"),
        "--window",
        "256",
        "--policies",
        "append-only",
    )
    assert code == EXIT_FAILED == 3 and all(r.failure for r in report.results)


def test_only_a_byte_counter_is_scaled() -> None:
    class ModelTokens:
        """Stands for a model's counter: anything that is not the byte counter."""

    assert bytes_per_token({}, ByteCounter()) == 4
    assert bytes_per_token({"bytes-per-token": "2"}, ByteCounter()) == 2
    assert bytes_per_token({"bytes-per-token": "2"}, ModelTokens()) is None  # type: ignore[arg-type]
