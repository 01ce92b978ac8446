"""``scripts/bench.sh store`` runs end to end on a small session and reports every figure the
issue asks for, as one JSON line last (the real sizes are for the bench, not for tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picocontext_diagnostics.bench.store import main


def test_store_bench_reports_growth_latency_and_reads_as_one_json_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "out" / "store.json"
    argv = ["--records", "60", "--appends", "8", "--window", "4", "--baseline-records", "10"]
    assert main([*argv, "--repeat", "1", "--dir", str(tmp_path), "--output", str(output)]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report == json.loads(output.read_text(encoding="utf-8"))
    assert (report["records"], report["appends"], report["window"]) == (60, 8, 4)
    assert report["growth_bytes"] == report["store_bytes_after"] - report["store_bytes_before"]
    assert report["appended_text_bytes"] == sum(len(f"a{i}note {i}") for i in range(8))
    for key in ("append_first", "append_last", "save_first", "save_last", "baseline_save"):
        assert 0 < report[key]["median_ms"] <= report[key]["p95_ms"]
    assert report["read"]["head_revision"] == 8 and report["read"]["middle_revision"] == 4
    assert report["read"]["load_revision_middle_cold_ms"] > 0
    assert list(tmp_path.iterdir()) == [tmp_path / "out"]  # the work folder was removed


def test_store_bench_refuses_sizes_it_cannot_measure(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--records", "1"])
    assert "--records" in capsys.readouterr().err
