"""The main-job bench reads the README's first command and the smoke's summary block."""

from __future__ import annotations

from pathlib import Path

import pytest

from picocontext_diagnostics.bench.main_job import (
    ROOT,
    MainJobError,
    parse_summary,
    readme_command,
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
