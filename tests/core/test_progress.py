"""A headless run's percentages: a bar on a terminal, a few lines in a log."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st

from picocontext.progress import LOG_STEP, ProgressEcho, split_percent

DOWNLOAD = "Downloading qwen2.5-coder-1.5b (1093 mb, 22 wheels)"


def feed(echo: ProgressEcho, stage: str, percents: list[int]) -> None:
    for p in percents:
        echo(f"{stage}: {p}%")


def test_a_log_gets_a_line_per_quarter_of_each_stage_and_every_other_line_whole() -> None:
    out = io.StringIO()
    echo = ProgressEcho(out, terminal=False)
    echo("Preparing the embedded Qwen2.5-Coder-1.5B-Instruct…")
    feed(echo, DOWNLOAD, list(range(0, 101)))
    feed(echo, "Writing weights", [i * 100 // 73 for i in range(74)])
    echo("Loading Qwen2.5-Coder-1.5B-Instruct with llama.cpp…")
    echo.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Preparing") and lines[-1].startswith("Loading")
    download = [line for line in lines if line.startswith("Downloading")]
    weights = [line for line in lines if line.startswith("Writing weights")]
    assert download == [f"{DOWNLOAD}: {p}%" for p in (0, 25, 50, 75, 100)]
    assert 2 <= len(weights) <= 100 // LOG_STEP + 1
    assert len(lines) <= 2 + 2 * (100 // LOG_STEP + 1)


def test_a_terminal_gets_one_bar_and_no_percentage_lines() -> None:
    out = io.StringIO()
    echo = ProgressEcho(out, terminal=True)
    feed(echo, DOWNLOAD, [*range(0, 101, 3), 100])
    echo("Loaded.")
    text = out.getvalue()
    assert f"{DOWNLOAD}: 3%" not in text.splitlines()
    assert "100/100" in text  # tqdm's own drawing of the finished bar
    assert text.rstrip().endswith("Loaded.")


def test_a_stage_that_goes_backwards_or_repeats_prints_nothing_new() -> None:
    out = io.StringIO()
    echo = ProgressEcho(out, terminal=False)
    feed(echo, "Fetching", [0, 0, 10, 5, 30, 30, 100, 100])
    assert out.getvalue().splitlines() == ["Fetching: 0%", "Fetching: 30%", "Fetching: 100%"]


# A status line is one line of text.
LINE = st.text(st.characters(blacklist_categories=("Cc", "Zl", "Zp")), min_size=1, max_size=40)


@given(LINE.filter(lambda s: s.strip() == s), st.integers(0, 999))
def test_split_percent_reads_the_stage_and_caps_at_100(stage: str, percent: int) -> None:
    assert split_percent(f"{stage}: {percent}%") == (stage, min(100, percent))


@given(st.text(max_size=60))
def test_split_percent_never_raises_and_ignores_lines_without_a_trailing_percent(
    text: str,
) -> None:
    parsed = split_percent(text)
    if not text.strip().endswith("%"):
        assert parsed is None
