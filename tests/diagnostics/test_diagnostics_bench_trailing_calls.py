"""``scripts/bench.sh trailing-calls``: one-line bad input, and a real run through llama.cpp on
the suite's tiny random-weight GGUF that shows the prefix was reused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picocontext_diagnostics.bench.trailing_calls import main, trailer


def test_the_trailer_has_the_words_asked_for() -> None:
    assert trailer(3) == "Answer in a."
    assert len(trailer(40).split()) == 40


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--sizes", "4,x"], "comma-separated word counts"),
        (["--sizes", "0"], "at least 1"),
        (["--repeats", "0"], "--repeats must be at least 1"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


def test_a_model_directory_that_is_not_one_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("xllamacpp")
    assert main(["--engine", "llamacpp", "--model-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a llama.cpp model directory" in err and len(err.splitlines()) == 1


def test_a_trailing_call_computes_only_its_trailer(
    tiny_gguf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "trailing.json"
    argv = ["--engine", "llamacpp", "--model-dir", str(tiny_gguf_dir), "--output", str(out)]
    argv += ["--sizes", "4,40", "--repeats", "1", "--context-window", "12000"]
    assert main(argv) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["benchmark"] == "trailing-calls" and last["engine"] == "llamacpp"
    assert last["prefix_tokens"] > 1000 and last["full_prefill_tps"] > 0
    assert last["prefix_tokens"] // 2 < last["shared_tokens"] < last["prefix_tokens"]
    short, long = last["rows"]
    assert (short["words"], long["words"]) == (4, 40)
    assert 0 < short["trailer_tokens"] < long["trailer_tokens"]
    for row in (short, long):
        # the cached prefix is not computed again: only the trailer (and at most the few
        # template tokens before it that the previous call's reply replaced) is
        assert row["trailer_tokens"] <= row["prefilled_tokens"] <= row["trailer_tokens"] + 8
        assert row["wall_s"] >= row["prefill_s"] > 0 and row["overhead_s"] >= 0
    assert json.loads(out.read_text())["rows"] == last["rows"]
