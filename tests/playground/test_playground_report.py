"""The text report: every section a reader needs, exact texts, atomic writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from picocontext_playground.comparison import PrintEvents, run_comparison
from picocontext_playground.model_loader import scripted_model
from picocontext_playground.results import ComparisonResult, prefetch_text
from picocontext_playground.settings import ComparisonSettings, Task
from picocontext_playground.textreport import facts_text, render_report, write_atomically


def result_for(task: Task, pressure: bool = False) -> ComparisonResult:
    settings = ComparisonSettings(task=task, pressure=pressure)
    return run_comparison(settings, scripted_model(), PrintEvents(lambda _line: None))


def test_episode_report_has_header_summaries_and_every_step() -> None:
    result = result_for(Task.RETENTION)
    text = render_report(result)
    lines = text.split("\n")
    head = lines[: lines.index("SUMMARY")]  # the verdict, then what was run
    assert head[0] == "PicoContext playground report"
    assert "Task: Exact retention" in head
    assert (
        "Model: Scripted deterministic model (rules, no weights) (scripted-deterministic)" in head
    )
    assert any(line.startswith("Settings: Exact retention · normal context") for line in head)
    assert any(line.startswith("Budget per turn: window 16,384") for line in head)
    assert "Episode allowance: 320,000" in text and "Noise lines per update: 12" in text
    assert f"Status: {result.status}" in text
    for outcome in result.outcomes:
        assert f"{outcome.title} · {outcome.label}: completed" in text
        assert f"POLICY {outcome.label} ({outcome.policy.name})" in text
        for step in outcome.steps:
            assert f"Expected: {facts_text(step.expected)}" in text
            assert f"Retained: {facts_text(step.retained)}" in text
            assert step.run is not None and step.run.final_prompt is not None
            # the exact next input, verbatim, with its size
            assert step.run.final_prompt.rendered in text
            count = step.run.final_prompt.token_count
            assert f"EXACT NEXT INPUT ({count:,} tokens)" in text
    assert text.endswith("\n")


def test_attempts_show_model_output_and_arguments() -> None:
    result = result_for(Task.STATE_UPDATES)
    text = render_report(result)
    edit = result.outcomes[1]
    run = edit.steps[0].run
    assert run is not None and run.attempts
    attempt = run.attempts[0]
    block = (
        f"Attempt 1: {attempt.outcome.value} — {attempt.detail}\nMODEL OUTPUT\n"
        "(no text; tool call only)\nARGUMENTS\n" + attempt.arguments
    )
    assert block in text
    assert "Attempts: none (no decision call in this mode)" in text  # the baseline
    assert run.diff in text


def test_failures_and_missing_steps_are_spelled_out() -> None:
    result = result_for(Task.RETENTION, pressure=True)
    text = render_report(result)
    base = result.outcomes[0]
    assert base.failure is not None
    assert f"Exact retention · Append-only: {base.failure}" in text
    assert "answer=FAILED" in text and f"failure={base.failure}" in text
    assert "EXACT NEXT INPUT\n(no completion call was made)" in text
    assert "Noise lines per update: 48" in text


def test_order_lookup_report_has_diff_and_working_context() -> None:
    text = render_report(result_for(Task.ORDER_LOOKUP))
    assert "Task: Order lookup" in text
    assert "Deleted earlier-result (tool)" in text
    assert "WORKING CONTEXT · revision 1" in text
    assert "[latest-result · tool · result for stock-latest]" in text
    assert "Episode allowance" not in text


def test_atomic_write_replaces_whole_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "report.txt"
    write_atomically(target, b"first")
    write_atomically(target, "second ✓".encode())
    assert target.read_text(encoding="utf-8") == "second ✓"
    assert [p.name for p in target.parent.iterdir()] == ["report.txt"]


def test_atomic_write_failure_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "report.txt"
    write_atomically(target, b"kept")

    with pytest.raises(TypeError):
        write_atomically(target, 42)  # type: ignore[arg-type]
    assert target.read_bytes() == b"kept"
    assert [p.name for p in tmp_path.iterdir()] == ["report.txt"]


def test_tool_policies_list_every_navigation_and_digest_call() -> None:
    """Navigated and distilled columns report the verbs they called, each with its arguments,
    verdict and result, in the summary, the step lines and the step blocks; what the archive
    navigator opened for the model before it read is listed first, apart from its calls."""
    settings = ComparisonSettings(
        task=Task.RETENTION, pressure=True, policies=("navigated", "distilled")
    )
    result = run_comparison(settings, scripted_model(), PrintEvents(lambda _line: None))
    text = render_report(result)
    navigated, distilled = result.outcomes
    # under pressure archived history must be opened: here the prefetch does it for the model
    assert "open" in {t.name for t in (*navigated.prefetch_steps, *navigated.tool_steps)}
    assert navigated.calls_text.endswith(prefetch_text(navigated.prefetch_steps))
    for step in navigated.steps:
        assert step.run is not None
        for i, call in enumerate(step.run.prefetch_steps, start=1):
            assert f"Prefetch {i}: {call.name} {call.arguments}" in text
    for outcome in result.outcomes:
        steps = outcome.tool_steps
        if steps:
            assert outcome.calls_text.startswith(f"tool calls {len(steps)}: ")
            assert outcome.calls_text.replace(" · ", "; ") in text
        for step in outcome.steps:
            run = step.run
            assert run is not None
            if not run.tool_steps:
                # the distilled map often suffices: said so, not hidden
                assert "Attempts: none (no tool call: answered from what it was shown)" in text
                continue
            assert f"tools={len(run.tool_steps)}" in text
            first = run.tool_steps[0]
            verdict = "ok" if first.ok else "refused"
            assert f"Call 1: {first.name} {first.arguments} -> {verdict}" in text
    assert distilled.label == "Distilled"


def test_tool_call_summary_counts_verbs_and_refusals() -> None:
    from picocontext.report import ToolStep
    from picocontext_playground.comparison import clip_result
    from picocontext_playground.results import tool_calls_text

    steps = [
        ToolStep(step=0, name="open", arguments='{"id":"a"}', ok=True, result="x"),
        ToolStep(step=1, name="close", arguments='{"id":"a"}', ok=True, result="y"),
        ToolStep(step=2, name="open", arguments='{"id":"b"}', ok=False, result="no"),
    ]
    assert tool_calls_text(steps) == "tool calls 3: open \u00d72, close \u00d71 (1 refused)"
    assert tool_calls_text([]) == "tool calls 0"
    assert clip_result("") == "(empty result)"
    assert clip_result("abcdef", limit=4) == "abcd… (+2 more characters in the prompt)"


def test_the_engine_is_warmed_once_before_the_first_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first column must not carry the engine's one-time costs (on the main job about
    2.5 s of append-only's step 1) that the next column is spared."""
    model = scripted_model()
    log: list[str] = []

    class Engine:
        def warm_up(self) -> None:
            log.append("warm")

        def reset_cache(self) -> None:
            log.append("cold")

    model.raw = Engine()  # an in-process engine's hooks; the calls stay the stand-in's
    generate = model.backend.generate

    def logged(*args: Any, **kwargs: Any) -> Any:
        log.append("call")
        return generate(*args, **kwargs)

    monkeypatch.setattr(model.backend, "generate", logged)
    settings = ComparisonSettings(task=Task.STATE_UPDATES, policies=("append-only", "editable"))
    result = run_comparison(settings, model, PrintEvents(lambda _line: None))
    assert result.completed and len(result.outcomes) == 2
    assert log.count("warm") == 1 and log[:2] == ["warm", "cold"]
    assert log.count("cold") == 2 and "call" in log  # each policy still starts cold
