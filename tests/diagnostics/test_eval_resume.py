"""`picocontext eval --resume`: a run killed at any episode continues from its journal and
ends with the report an uninterrupted run writes (timings aside)."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from picocontext_diagnostics import cli
from picocontext_diagnostics.evaluation import EvaluationResult
from picocontext_diagnostics.evaluation.journal import Journal
from timeless import timeless

# 16 seeds x 4 repetitions x 2 policies: 128 results of a few milliseconds each, so a kill
# after a random delay lands at a random episode.
CONFIG = {
    "schema_version": 1,
    "seeds": list(range(1, 17)),
    "repetitions": 4,
    "step_count": 4,
    "policies": ["append-only", "editable"],
}


def run_eval(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def results(path: Path) -> Any:
    data = json.loads(path.read_text(encoding="utf-8"))
    return timeless(data["results"]), timeless(data["summary"])


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG), encoding="utf-8")
    return path


def test_a_run_killed_at_random_ten_times_resumes_to_the_same_report(
    tmp_path: Path, config: Path
) -> None:
    baseline = tmp_path / "baseline.json"
    assert run_eval("--config", str(config), "--output", str(baseline), "--quiet")[0] == 0
    expected = results(baseline)
    rng = random.Random(7)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    reused_counts = []
    for attempt in range(10):
        output = tmp_path / f"run-{attempt}.json"
        journal = output.with_name(output.name + ".journal.jsonl")
        command = [sys.executable, "-m", "picocontext_diagnostics.cli", "--config", str(config)]
        process = subprocess.Popen(
            [*command, "--output", str(output), "--quiet"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        deadline = time.monotonic() + 60
        while not journal.exists() or journal.stat().st_size == 0:
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.8))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        if output.exists():  # it finished before the kill: nothing to resume
            continue
        code, out, err = run_eval(
            "--config", str(config), "--output", str(output), "--quiet", "--resume"
        )
        assert code == 0, err
        assert out.splitlines()[1].startswith("Resuming: ")
        reused_counts.append(int(out.splitlines()[1].split()[1]))
        assert results(output) == expected
        assert not journal.exists()  # the report holds every result now
    assert len(reused_counts) >= 5 and len(set(reused_counts)) >= 3  # killed at different points


def test_a_torn_last_line_is_dropped_with_one_line_and_the_rest_reused(
    tmp_path: Path, config: Path
) -> None:
    full = tmp_path / "full.json"
    assert run_eval("--config", str(config), "--output", str(full), "--quiet")[0] == 0
    output = tmp_path / "torn.json"
    journal = output.with_name(output.name + ".journal.jsonl")
    # A journal of the same run cut by a kill: header, 5 whole results, half of the sixth.
    code, _, _ = run_eval("--config", str(config), "--output", str(output), "--quiet")
    report = json.loads(output.read_text(encoding="utf-8"))
    output.unlink()
    header = _header_of(config, tmp_path)
    lines = [json.dumps(header)] + [json.dumps(r) for r in report["results"][:6]]
    journal.write_text("\n".join(lines[:6]) + "\n" + lines[6][: len(lines[6]) // 2], "utf-8")
    code, out, err = run_eval(
        "--config", str(config), "--output", str(output), "--quiet", "--resume"
    )
    assert code == 0, err
    assert "Resuming: 5 of 128 results reused" in out
    assert err.count("\n") == 1 and "dropped a torn journal line" in err
    assert results(output) == results(full)


def _header_of(config: Path, tmp_path: Path) -> dict[str, Any]:
    """The header the command writes, read from a journal it started (then removed)."""
    probe = tmp_path / "probe.json"
    journal = probe.with_name(probe.name + ".journal.jsonl")
    command = [sys.executable, "-m", "picocontext_diagnostics.cli", "--config", str(config)]
    process = subprocess.Popen(
        [*command, "--output", str(probe), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not journal.exists() or b"\n" not in journal.read_bytes():
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.005)
    process.kill()
    process.wait(timeout=30)
    header: dict[str, Any] = json.loads(journal.read_bytes().split(b"\n")[0])
    return header


def test_a_journal_of_another_configuration_is_refused_and_left_untouched(
    tmp_path: Path, config: Path
) -> None:
    output = tmp_path / "r.json"
    journal = output.with_name(output.name + ".journal.jsonl")
    other = {**_header_of(config, tmp_path), "config_sha256": "0" * 64}
    journal.write_text(json.dumps(other) + "\n", encoding="utf-8")
    before = journal.read_bytes()
    code, _, err = run_eval("--config", str(config), "--output", str(output), "--resume")
    assert code == 2
    assert err.count("\n") == 1 and "config_sha256 differ" in err
    assert journal.read_bytes() == before and not output.exists()


def test_a_rerun_without_resume_never_overwrites_an_interrupted_journal(
    tmp_path: Path, config: Path
) -> None:
    output = tmp_path / "r.json"
    journal = output.with_name(output.name + ".journal.jsonl")
    journal.write_text(json.dumps(_header_of(config, tmp_path)) + "\n", encoding="utf-8")
    before = journal.read_bytes()
    code, _, err = run_eval("--config", str(config), "--output", str(output))
    assert code == 2 and "add --resume" in err and err.count("\n") == 1
    assert journal.read_bytes() == before


def test_journal_resume_reads_back_what_append_wrote(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    header = {"kind": "picocontext-evaluation-journal", "version": 1, "x": 1}
    Journal.start(path, header, EvaluationResult, lambda r: r.order).close()
    again = Journal.resume(path, header, EvaluationResult, lambda r: r.order)
    assert again.results == {} and again.dropped is None
    again.close()
    with pytest.raises(Exception, match="interrupted run"):
        Journal.start(path, header, EvaluationResult, lambda r: r.order)
