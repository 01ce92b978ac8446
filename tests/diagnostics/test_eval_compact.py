"""`picocontext eval` reports are compact by default; `--traces` keeps every call whole."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from picocontext_diagnostics import cli
from timeless import timeless


@pytest.fixture(autouse=True)
def private_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))


def run(tmp_path: Path, name: str, *extra: str) -> dict[str, object]:
    out, err = io.StringIO(), io.StringIO()
    path = tmp_path / name
    code = cli.run(["--profile", "retention", "--output", str(path), *extra], out, err)
    assert code == 0, err.getvalue()
    assert out.getvalue().splitlines()[0] == f"Report: {path}"  # where it goes, first
    data: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
    data["_bytes"] = path.stat().st_size
    return data


def test_a_default_report_keeps_counts_and_the_final_context_but_not_the_traces(
    tmp_path: Path,
) -> None:
    compact = run(tmp_path, "compact.json")
    whole = run(tmp_path, "whole.json", "--traces")
    for report, traced in ((compact, False), (whole, True)):
        results = report["results"]
        assert isinstance(results, list)
        for result in results:
            assert result["revised"]["records"]  # what the policy ended with, always
            assert (result["original"] is not None) is traced
            for step in result["steps"]:
                assert step["calls"] and all(c["token_count"] > 0 for c in step["calls"])
                assert all(bool(c["rendered_prompt"]) is traced for c in step["calls"])
                assert bool(step["incoming"]) is traced
    assert timeless(compact["summary"]) == timeless(whole["summary"])
    assert int(str(compact["_bytes"])) * 3 < int(str(whole["_bytes"]))


def test_quiet_prints_a_few_lines_and_json_prints_one_object(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    argv = ["--profile", "pressure", "--policies", "append-only,editable,summarize", "--quiet"]
    code = cli.run([*argv, "--output", str(tmp_path / "q.json")], out, err)
    assert code == cli.EXIT_CHECKS_FAILED  # append-only runs out of window under pressure
    assert len(out.getvalue().splitlines()) == 6  # path, summary head, 3 policies, saved
    out, err = io.StringIO(), io.StringIO()
    code = cli.run([*argv[:-1], "--json", "--output", str(tmp_path / "j.json")], out, err)
    summary = json.loads(out.getvalue())
    assert summary["report"] == str(tmp_path / "j.json") and summary["passed"] is False
    assert err.getvalue().startswith("Report: ")


def test_a_conversation_run_prints_its_report_path_first_and_json_on_request(
    tmp_path: Path,
) -> None:
    conversation = Path(__file__).resolve().parents[2] / "resources/conversations/bike-shop.json"
    argv = ["--conversation", str(conversation), "--output", str(tmp_path / "c.json")]
    out, err = io.StringIO(), io.StringIO()
    assert cli.run([*argv, "--quiet"], out, err) == 0, err.getvalue()
    assert out.getvalue().splitlines()[0] == f"Report: {tmp_path / 'c.json'}"
    out, err = io.StringIO(), io.StringIO()
    assert cli.run([*argv, "--json"], out, err) == 0, err.getvalue()
    summary = json.loads(out.getvalue())
    assert summary["passed"] is True and summary["summary"] and summary["reference"]
