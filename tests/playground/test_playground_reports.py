"""Reports by extension: the JSON run, the self-contained HTML page, the text headed by the
verdict, and paths refused before a run starts."""

from __future__ import annotations

import importlib
import json
import os
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PySide6.QtWidgets import QApplication

from picocontext_playground import cli, smoke
from picocontext_playground.comparison import PrintEvents, run_comparison
from picocontext_playground.errors import SetupError
from picocontext_playground.htmlreport import render_html
from picocontext_playground.jsonreport import SCHEMA_FILENAME, generate_schema, render_json
from picocontext_playground.model_loader import scripted_model
from picocontext_playground.reports import (
    FORMATS,
    check_report_path,
    check_writable,
    report_format,
    write_report,
)
from picocontext_playground.results import ComparisonResult
from picocontext_playground.runverdict import headline, result_verdict
from picocontext_playground.settings import ComparisonSettings, ModelChoice, Task
from picocontext_playground.textreport import render_report

jsonschema: Any = importlib.import_module("jsonschema")  # no type stubs
REPO = Path(__file__).resolve().parents[2]
FOUR = ("append-only", "editable", "navigated", "distilled")
DONE_WHEN = [
    "--episode-smoke",
    "retention",
    "--pressure",
    "--policies",
    ",".join(FOUR),
    "--backend",
    "scripted",
]


@pytest.fixture(scope="module")
def four() -> ComparisonResult:
    settings = ComparisonSettings(task=Task.RETENTION, pressure=True, policies=FOUR)
    return run_comparison(settings, scripted_model(), PrintEvents(lambda _line: None))


# -- JSON --------------------------------------------------------------------------------------
def test_json_has_the_verdict_on_top_and_the_whole_run(four: ComparisonResult) -> None:
    doc = json.loads(render_json(four))
    assert doc["format"] == "picocontext-playground-report" and doc["version"] == 1
    verdict = result_verdict(four)
    assert doc["verdict"]["winner"] == verdict.winner is not None
    assert doc["verdict"]["sentence"] == verdict.sentence
    assert doc["settings"]["policies"] == list(FOUR) and doc["settings"]["pressure"] is True
    assert doc["model"]["id"] == four.model_id and doc["model"]["token_unit"] == four.token_unit
    assert doc["decoding"]["sampling"] == "greedy"
    assert doc["budget"]["context_window"] == four.budget.context_window
    totals = {p["name"]: p for p in doc["verdict"]["policies"]}
    assert set(totals) == set(FOUR)
    assert [p["rank"] for p in doc["verdict"]["policies"]] == [1, 2, 3, 4]
    for outcome in four.outcomes:
        row = totals[outcome.policy.name]
        assert row["input_tokens"] == outcome.total_input
        assert row["generated_tokens"] == outcome.total_generated
        assert row["prefill_tokens"] == outcome.total_prefill
        assert row["model_work"] == outcome.total_prefill + outcome.total_generated
        assert row["passed"] == outcome.passed
    assert totals["append-only"]["input_change"] is None
    assert totals[verdict.winner]["passed"] is True


def test_json_carries_every_dispatched_prompt_verbatim(four: ComparisonResult) -> None:
    doc = json.loads(render_json(four))
    for outcome, policy in zip(four.outcomes, doc["policies"], strict=True):
        assert policy["name"] == outcome.policy.name
        assert len(policy["steps"]) == len(outcome.steps)
        for step, step_doc in zip(outcome.steps, policy["steps"], strict=True):
            run = step.run
            assert run is not None
            assert [p["text"] for p in step_doc["prompts"]] == [c.rendered for c in run.calls]
            assert [p["tokens"] for p in step_doc["prompts"]] == [c.token_count for c in run.calls]
            assert step_doc["input_tokens"] == run.total_input_tokens
            assert len(step_doc["tool_calls"]) == len(run.tool_steps)
    navigated = next(p for p in doc["policies"] if p["name"] == "navigated")
    assert {p["phase"] for s in navigated["steps"] for p in s["prompts"]} == {"tools"}


def test_json_validates_against_the_shipped_schema(four: ComparisonResult) -> None:
    shipped = json.loads((REPO / "resources" / "schemas" / SCHEMA_FILENAME).read_text())
    assert shipped == generate_schema()
    jsonschema.Draft202012Validator.check_schema(shipped)
    doc = json.loads(render_json(four))
    jsonschema.validate(doc, shipped)
    doc["verdict"].pop("winner")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, shipped)


# -- HTML --------------------------------------------------------------------------------------
def parse_html(page: str) -> ET.Element:
    """Strict: the page must be well-formed XML once the HTML5 doctype is removed."""
    assert page.startswith("<!DOCTYPE html>\n")
    return ET.fromstring(page.removeprefix("<!DOCTYPE html>\n"))


def test_html_is_well_formed_and_needs_no_network(four: ComparisonResult) -> None:
    page = render_html(four)
    root = parse_html(page)
    assert root.tag == "html"
    assert "http" not in page  # no link, script, font, stylesheet or image from anywhere
    for element in root.iter():
        for name in ("src", "href"):
            assert name not in element.attrib, (element.tag, element.attrib)
    assert root.find("head/style") is not None and root.find("body/script") is not None


def test_html_has_the_verdict_charts_and_folded_step_details(four: ComparisonResult) -> None:
    root = parse_html(render_html(four))
    verdict = result_verdict(four)
    sentence = root.find(".//p[@id='sentence']")
    assert sentence is not None and sentence.text == headline(four, verdict)
    rows = root.findall(".//table[@id='verdict']/tbody/tr")
    assert [r.get("data-policy") for r in rows] == [r.totals.name for r in verdict.rows]
    winners = [r.get("data-policy") for r in rows if r.get("class") == "winner"]
    assert winners == [verdict.winner]
    charts = root.findall(".//svg")
    assert len(charts) == 2
    bars = [e for e in charts[0].iter("rect")]
    assert len(bars) >= sum(len(o.steps) for o in four.outcomes)
    policies = root.findall(".//details[@class='policy']")
    assert len(policies) == len(four.outcomes)
    for outcome, element in zip(four.outcomes, policies, strict=True):
        steps = element.findall("details")
        assert len(steps) == len(outcome.steps)
        assert all("open" not in d.attrib for d in element.iter("details"))
    prompt = four.outcomes[1].steps[0].run
    assert prompt is not None and prompt.final_prompt is not None
    texts = ["".join(p.itertext()) for p in root.iter("pre")]
    assert prompt.final_prompt.rendered in texts  # the exact next input, verbatim


# -- text --------------------------------------------------------------------------------------
def test_text_report_is_headed_by_the_verdict(four: ComparisonResult) -> None:
    lines = render_report(four).split("\n")
    verdict = result_verdict(four)
    assert lines[:3] == [
        "PicoContext playground report",
        "Task: Exact retention",
        f"Verdict: {headline(four, verdict)}",
    ]
    assert lines[2].startswith(f"Verdict: {verdict.sentence}")
    table_at = next(i for i, line in enumerate(lines) if line.startswith("VERDICT"))
    assert table_at < lines.index("SUMMARY")
    header = lines[table_at + 1].split()
    assert header[:3] == ["#", "Policy", "Checks"]
    ranked = [lines[table_at + 2 + i].split()[1] for i in range(len(FOUR))]
    assert ranked == [r.totals.label for r in verdict.rows]
    # the status says what finished; the conclusion is the verdict's, not "read the columns"
    status = next(line for line in lines if line.startswith("Status:"))
    assert "compare the cost" not in status and "Inspect the columns" not in status
    assert status.startswith("Status: Finished.")


# -- formats and paths -------------------------------------------------------------------------
def test_write_report_chooses_the_format_by_extension(
    four: ComparisonResult, tmp_path: Path
) -> None:
    for ext in FORMATS:
        target = tmp_path / "deep" / f"run{ext.upper()}"
        write_report(four, target)
        text = target.read_text(encoding="utf-8")
        head = {".txt": "PicoContext playground report", ".json": "{", ".html": "<!DOCTYPE"}
        assert text.startswith(head[ext])


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyzHTMLJSON.", max_size=6))
def test_only_known_extensions_are_report_formats(suffix: str) -> None:
    path = Path(f"report.{suffix}") if suffix else Path("report")
    if path.suffix.lower() in FORMATS:
        assert report_format(path) == path.suffix.lower()
    else:
        with pytest.raises(SetupError, match=r"is not a report format; use \.txt, \.json, \.html"):
            report_format(path)


def test_unwritable_paths_are_refused_with_the_reason(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SetupError, match=r"--report .*report.json: cannot be created, .* folder"):
        check_report_path(blocker / "report.json")
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    with pytest.raises(SetupError, match="is a FIFO"):
        check_report_path(fifo)  # never renamed over: that would replace the FIFO
    device = tmp_path / "zero.png"
    device.symlink_to("/dev/zero")
    with pytest.raises(SetupError, match="is a character device"):
        check_writable(device, "--image")
    with pytest.raises(SetupError, match="is a directory"):
        check_writable(tmp_path, "--image")
    check_report_path(tmp_path / "new" / "ok.html")  # creates the folder, leaves no file
    assert list((tmp_path / "new").iterdir()) == []


def fake_smoke(calls: list[Any]) -> Any:
    def run_smoke(
        settings: ComparisonSettings, report: Path | None, image: Path | None, **_: Any
    ) -> int:
        calls.append((report, image))
        return 0

    return run_smoke


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("v.pdf", "extension .pdf is not a report format; use .txt, .json, .html"),
        ("file/v.json", "is not a folder"),
    ],
)
def test_the_command_refuses_a_bad_report_path_before_running(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    message: str,
) -> None:
    (tmp_path / "file").write_text("x")
    calls: list[Any] = []
    monkeypatch.setattr(smoke, "run_smoke", fake_smoke(calls))
    code = cli.run([*DONE_WHEN, "--report", str(tmp_path / name)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and calls == []
    assert len(err) == 1 and err[0].startswith("picocontext: error: --report ")
    assert message in err[0]


def test_the_command_refuses_an_unwritable_image_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    calls: list[Any] = []
    monkeypatch.setattr(smoke, "run_smoke", fake_smoke(calls))
    code = cli.run([*DONE_WHEN, "--image", str(tmp_path / "file" / "v.png")])
    assert code == 2 and calls == []
    assert "--image" in capsys.readouterr().err


def test_smoke_refuses_an_unwritable_report_without_running(
    qt_app: QApplication, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("x")
    lines: list[str] = []
    settings = ComparisonSettings(task=Task.ORDER_LOOKUP, model=ModelChoice.SCRIPTED)
    code = smoke.run_smoke(
        settings, tmp_path / "file" / "r.txt", None, echo=lines.append, fail=lines.append
    )
    assert code == smoke.EXIT_SETUP
    assert len(lines) == 1
    assert lines[0].startswith("picocontext app: error: cannot write output: report ")


def without_display() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}


def test_done_when_command_writes_json_with_the_verdict_and_the_png(tmp_path: Path) -> None:
    report, image = tmp_path / "out" / "v.json", tmp_path / "out" / "v.png"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "picocontext_playground",
            *DONE_WHEN,
            "--report",
            str(report),
            "--image",
            str(image),
        ],
        env={**without_display(), "QT_QPA_PLATFORM": "offscreen"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 3, proc.stderr  # ran; append-only fails a check by design
    doc = json.loads(report.read_text(encoding="utf-8"))
    winner = doc["verdict"]["winner"]
    assert winner in FOUR and len(doc["verdict"]["policies"]) == 4
    lines = proc.stdout.splitlines()
    assert doc["verdict"]["headline"] in lines  # the verdict's sentence, said once
    assert sum(line.startswith("Finished.") for line in lines) == 1
    assert image.stat().st_size > 10_000


def test_smoke_writes_the_format_its_report_path_names(
    qt_app: QApplication, tmp_path: Path
) -> None:
    settings = ComparisonSettings(task=Task.STATE_UPDATES, model=ModelChoice.SCRIPTED)
    report = tmp_path / "state.html"
    lines: list[str] = []
    assert smoke.run_smoke(settings, report, None, echo=lines.append) == smoke.EXIT_OK
    root = parse_html(report.read_text(encoding="utf-8"))
    sentence = root.find(".//p[@id='sentence']")
    assert sentence is not None and sentence.text in lines


def test_a_report_or_image_never_replaces_a_fifo_or_a_device(tmp_path: Path) -> None:
    # The window's Save report writes through the same function: renaming over a FIFO or a
    # device (as root) would destroy it, so only a regular file is ever replaced.
    from picocontext import OutputFileError
    from picocontext_playground.textreport import write_atomically

    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    device = tmp_path / "zero.png"
    device.symlink_to("/dev/zero")
    for target in (fifo, device):
        with pytest.raises(OutputFileError):
            write_atomically(target, b"report")
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and device.is_symlink()
    assert stat.S_ISCHR(Path("/dev/zero").stat().st_mode)
    write_atomically(tmp_path / "ok.txt", b"report")
    assert (tmp_path / "ok.txt").read_bytes() == b"report"
