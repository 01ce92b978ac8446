"""Markdown tables quote evaluation reports exactly; bad files are clear errors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from picocontext_diagnostics import cli
from picocontext_diagnostics.errors import InvalidConfiguration
from picocontext_diagnostics.tables import HEADER, load_report, main, markdown_table


@pytest.fixture(scope="module")
def report_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tables") / "retention.json"
    out, err = io.StringIO(), io.StringIO()
    argv = ["--profile", "retention-four", "--bytes-per-token", "4", "--output", str(path)]
    assert cli.run([*argv, "--quiet"], out, err) == 0, err.getvalue()
    return path


def test_rows_quote_the_summary(report_path: Path) -> None:
    report = load_report(report_path)
    table = markdown_table([report, report])
    lines = table.splitlines()
    assert "\n".join(lines[:2]) == HEADER
    policies = report["summary"]["policies"]
    assert len(lines) == 2 + 2 * len(policies)
    for line, entry in zip(lines[2:], policies, strict=False):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == "retention ×4, seeds 17, 29" and cells[1] == entry["policy"]
        episodes = entry["episodes"]
        assert cells[2].startswith(f"{episodes['successes']}/{episodes['trials']} (")
        assert cells[4] == f"{entry['total_input_tokens']:,}"
        assert cells[5] == f"{entry['total_prefill_tokens']:,}"
        assert cells[7] == str(entry["tool_calls"])


def test_main_prints_the_table_and_rejects_other_files(
    report_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(report_path)]) == 0
    assert capsys.readouterr().out.startswith(HEADER)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"kind": "something-else"}), encoding="utf-8")
    assert main([str(other)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("picocontext tables: error: ") and len(err.splitlines()) == 1
    assert "is not a picocontext evaluation report" in err
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(InvalidConfiguration, match="is not a JSON evaluation report"):
        load_report(broken)
    with pytest.raises(InvalidConfiguration, match="cannot read"):
        load_report(tmp_path / "missing.json")
    assert main([]) == 2


def test_a_report_missing_a_quoted_field_is_one_clear_line(
    report_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(report_path.read_text(encoding="utf-8"))
    del data["summary"]["policies"][0]["total_input_tokens"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data), encoding="utf-8")
    assert main([str(old)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("picocontext tables: error: ")
    assert len(err.splitlines()) == 1 and "total_input_tokens" in err and "Traceback" not in err


def test_setup_columns_and_a_later_row_replacing_an_earlier_one(report_path: Path) -> None:
    report = load_report(report_path)
    rerun = json.loads(json.dumps(report))
    rerun["summary"]["policies"] = [
        dict(entry, total_input_tokens=7) for entry in rerun["summary"]["policies"][-1:]
    ]
    replaced = rerun["summary"]["policies"][0]["policy"]
    table = markdown_table([report, rerun], setup=True, latest=True, names=["a.json", "b.json"])
    lines = table.splitlines()
    assert lines[0].startswith("| model | decoding | task | policy |")
    body = [line for line in lines[2:] if line.startswith("| ")]
    assert len(body) == len(report["summary"]["policies"])  # replaced in place, not added
    row = next(line for line in body if f"| {replaced} |" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    model = report["provenance"]["model"]
    assert cells[:2] == [model, report["provenance"]["decoding"]] and cells[6] == "7"
    assert body[-1] == row  # the replaced row keeps its place
    assert f"* Replaced: {replaced} ({model}" in table and "from b.json, replacing a.json" in table
    # without --latest both rows stay, and nothing is noted
    plain = markdown_table([report, rerun], setup=True)
    assert "Replaced" not in plain and plain.count(f"| {replaced} |") == 2


def test_another_seed_is_another_row_even_with_latest(report_path: Path) -> None:
    report = load_report(report_path)
    other = json.loads(json.dumps(report))
    other["configuration"]["seeds"] = [31]
    table = markdown_table([report, other], setup=True, latest=True)
    assert "Replaced" not in table
    assert "retention ×4, seed 31" in table and "retention ×4, seeds 17, 29" in table
