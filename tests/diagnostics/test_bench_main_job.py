"""The main-job bench reads the README's first command and the smoke's summary block."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from picocontext_diagnostics.bench import main_job
from picocontext_diagnostics.bench.main_job import (
    ROOT,
    MainJobError,
    common_step_ratios,
    merge,
    parse_summary,
    ratios,
    readme_command,
    report_costs,
    step_costs,
)

SUMMARY = """\
Exact retention · step-2: context passed, answer passed
Exact retention · Append-only: Token budget exceeded: input plus reserved output
  Checks passed: context 4/4; answers 3/4
  Prompt: 2,923 -> 7,746
  step-1: context=passed, answer=passed, prompt=2,923->2,923, edits=0, keeps=0
  step-4: context=passed, answer=FAILED, prompt=7,746->7,746, edits=0, keeps=0
Report: out/x.txt
Exact retention · Editable: completed
  Checks passed: context 1/4; answers 0/4
  step-1: context=FAILED, answer=FAILED, prompt=2,923->2,299, edits=1, keeps=0
"""


def test_summary_blocks_are_read_per_policy_and_status_lines_are_not() -> None:
    policies = parse_summary(SUMMARY)
    assert list(policies) == ["Append-only", "Editable"]
    assert policies["Append-only"]["state"].startswith("Token budget exceeded")
    assert policies["Append-only"]["answers"] == "3/4"
    assert policies["Append-only"]["steps"] == {
        "step-1": "context passed, answer passed",
        "step-4": "context passed, answer FAILED",
    }
    assert policies["Editable"] == {
        "state": "completed",
        "context": "1/4",
        "answers": "0/4",
        "steps": {"step-1": "context FAILED, answer FAILED"},
    }


def test_the_command_is_the_readmes_first_one() -> None:
    command = readme_command(ROOT / "README.md")
    assert command[0] == "scripts/run-example.sh"
    assert (ROOT / command[0]).is_file()


def test_a_readme_without_a_code_block_is_a_clear_error(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# nothing to run\n", encoding="utf-8")
    with pytest.raises(MainJobError, match="no fenced code block"):
        readme_command(readme)


REPORT = {
    "policies": [
        {
            "name": "append-only",
            "label": "Append-only",
            "elapsed_seconds": 10.04,
            "planned_steps": 4,
            "steps": [
                {
                    "ran": True,
                    "prefill_tokens": 900,
                    "input_tokens": 1000,
                    "generated_tokens": 9,
                    "elapsed_seconds": 8.0,
                },
                {"ran": False, "prefill_tokens": 0, "input_tokens": 0, "generated_tokens": 0},
            ],
        },
        {
            "name": "editable",
            "label": "Editable",
            "elapsed_seconds": 12.0,
            "planned_steps": 4,
            "steps": [
                {
                    "ran": True,
                    "prefill_tokens": 1200,
                    "input_tokens": 3000,
                    "generated_tokens": 20,
                    "edit_calls": 1,
                    "keep_calls": 0,
                    "elapsed_seconds": 10.0,
                },
                {"ran": True, "prefill_tokens": 150, "input_tokens": 1000, "keep_calls": 1},
            ],
        },
    ]
}


def test_costs_are_summed_per_policy_and_joined_with_the_checks_by_name() -> None:
    policies = merge(parse_summary(SUMMARY), report_costs(REPORT))
    assert list(policies) == ["append-only", "editable"]
    base, mine = policies["append-only"], policies["editable"]
    assert base["wall_s"] == 10.0 and base["steps_run"] == 1
    assert base["prefill_tokens"] == 900 and base["answers"] == "3/4"
    assert mine["edits"] == 1 and mine["keeps"] == 1
    assert mine["input_tokens"] == 4000 and mine["prefill_tokens"] == 1350
    assert mine["context"] == "1/4" and mine["label"] == "Editable"
    assert ratios(policies) == {"wall_s": 1.2, "prefill_tokens": 1.5, "input_tokens": 4.0}


def test_common_step_ratios_compare_only_the_steps_both_answered() -> None:
    per_step = step_costs(REPORT)
    # append-only's second step made no call, so only the first step is compared
    assert common_step_ratios(per_step) == {
        "steps": 1,
        "wall_s": 1.25,
        "prefill_tokens": 1.33,
        "input_tokens": 3.0,
    }
    assert common_step_ratios({"editable": per_step["editable"]}) == {}


def test_ratios_need_both_columns() -> None:
    assert ratios({"editable": {"wall_s": 3.0}}) == {}
    assert ratios({"editable": {"wall_s": 3.0}, "append-only": {"wall_s": 0}}) == {
        "wall_s": None,
        "prefill_tokens": None,
        "input_tokens": None,
    }


def _fake_job(monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """The README's first command replaced by a short Python script."""
    monkeypatch.setattr(main_job, "readme_command", lambda _readme: [sys.executable, "-c", script])


def test_a_run_that_fails_leaves_the_last_completed_result_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "main-job.json"
    out.write_text('{"kept": true}\n', encoding="utf-8")
    out.with_suffix(".log").write_text("the good run\n", encoding="utf-8")
    _fake_job(
        monkeypatch, "import sys; print('error: unrecognized arguments: --bogus'); sys.exit(2)"
    )
    assert main_job.main(["--out", str(out), "--bogus"]) == 1
    captured = capsys.readouterr()
    line = json.loads(captured.out.strip().splitlines()[-1])
    # a run that failed in a second is not "within the limit"
    assert line["exit_code"] == 2 and line["within_limit"] is False and line["policies"] == {}
    assert "exit code 2" in captured.err and "--bogus" in captured.err
    assert out.read_text(encoding="utf-8") == '{"kept": true}\n'
    assert out.with_suffix(".log").read_text(encoding="utf-8") == "the good run\n"
    assert json.loads(out.with_suffix(".failed.json").read_text(encoding="utf-8")) == line
    assert "--bogus" in out.with_suffix(".failed.log").read_text(encoding="utf-8")
    assert not out.with_suffix(".running.log").exists()


def test_a_completed_run_writes_its_result_and_counts_the_limit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "main-job.json"
    _fake_job(monkeypatch, f"import sys; print({SUMMARY!r}); sys.exit(3)")
    assert main_job.main(["--out", str(out)]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["exit_code"] == 3 and line["within_limit"] is True
    assert set(line["policies"]) == {"append-only", "editable"}
    # speeds differ by machine: the line names the CPU that produced them
    assert line["cpu"]["model"] and isinstance(line["cpu"]["simd"], list)
    assert json.loads(out.read_text(encoding="utf-8")) == line
    assert "Checks passed" in out.with_suffix(".log").read_text(encoding="utf-8")
    assert main_job.main(["--out", str(out), "--limit", "0"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["within_limit"] is False
