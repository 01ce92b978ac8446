"""``scripts/bench.sh engines``: the agreement measure, the last line's shape, one-line bad
input, and one real pair through llama.cpp on the suite's tiny random-weight GGUF."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from picocontext_diagnostics.bench import engines
from picocontext_diagnostics.bench.engines import agreement, compare, main


def test_identical_outputs_agree_fully_and_only_the_first_32_tokens_count() -> None:
    assert agreement([1, 2, 3], [1, 2, 3]) == {"greedy_agreement": 1.0, "token_match_rate": 1.0}
    assert agreement([], []) == {"greedy_agreement": 1.0, "token_match_rate": 1.0}
    long_a = list(range(40))
    long_b = [*range(32), 99, 99]
    assert agreement(long_a, long_b)["greedy_agreement"] == 1.0


def test_agreement_is_the_common_prefix_and_match_rate_counts_every_equal_position() -> None:
    a = [1, 2, 3, 4, 5, 6, 7, 8]
    b = [1, 2, 9, 4, 5, 6, 7, 8]
    assert agreement(a, b) == {"greedy_agreement": 0.25, "token_match_rate": 0.875}
    # a shorter output is measured against the longer one
    assert agreement([1, 2], [1, 2, 3, 4]) == {"greedy_agreement": 0.5, "token_match_rate": 0.5}
    assert agreement([5], [6])["greedy_agreement"] == 0.0


def row(engine: str, model: str, prefill: float, decode: float, ids: list[int]) -> dict[str, Any]:
    return {
        "engine": engine,
        "model": model,
        "load_s": 1.0,
        "prefill_tps": prefill,
        "decode_tps": decode,
        "peak_rss_mb": 100.0,
        "prompt_sha256": "same",
        "output_ids": ids,
    }


def test_compare_adds_agreement_and_the_llamacpp_over_mlx_ratios() -> None:
    rows = [
        row("mlx", "qwen2.5-coder-1.5b", 30.0, 1.5, [1, 2, 3, 4]),
        row("llamacpp", "qwen2.5-coder-1.5b", 60.0, 12.0, [1, 2, 7, 4]),
        row("llamacpp", "qwen2.5-coder-0.5b", 100.0, 20.0, [1]),
    ]
    ratios = compare(rows)
    assert rows[0]["greedy_agreement"] == rows[1]["greedy_agreement"] == 0.5
    assert rows[0]["same_prompt"] is True and rows[2]["greedy_agreement"] is None
    assert ratios == [
        {
            "model": "qwen2.5-coder-1.5b",
            "decode_ratio": 8.0,
            "prefill_ratio": 2.0,
            "meets_bar": True,
        }
    ]


def test_different_prompts_are_not_compared_and_a_slow_engine_misses_the_bar() -> None:
    rows = [
        row("mlx", "qwen2.5-coder-1.5b", 30.0, 1.5, [1]),
        row("llamacpp", "qwen2.5-coder-1.5b", 40.0, 3.0, [1]),
    ]
    rows[1]["prompt_sha256"] = "other"
    ratios = compare(rows)
    assert rows[0]["same_prompt"] is False and rows[0]["greedy_agreement"] is None
    assert ratios[0]["meets_bar"] is False


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--engines", "vllm"], "unknown engine 'vllm'"),
        (["--engines", "llamacpp", "--models", "gpt-9"], "unknown model 'gpt-9'"),
        (["--engines", ","], "--engines is empty"),
        (["--model-dir", "."], "pass --engines with one"),
        (["--engines", "llamacpp", "--model-dir", "no/such/dir"], "is not a directory"),
        (["--max-tokens", "1"], "--max-tokens must be at least 2"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("engines: ") and needle in err and len(err.splitlines()) == 1


def test_a_missing_engine_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda _name: None)
    assert main(["--engines", "llamacpp"]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'picocontext[llamacpp]'" in err and len(err.splitlines()) == 1


def test_one_real_pair_through_llamacpp_prints_the_row_as_the_last_line(
    tiny_gguf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "engines.json"
    argv = ["--engines", "llamacpp", "--model-dir", str(tiny_gguf_dir), "--output", str(out)]
    # the tiny vocabulary needs about 2.7x the tokens of Qwen's for the same prompts
    argv += ["--context-window", "12000", "--max-tokens", "4", "--decision-tokens", "40"]
    argv += ["--omp-wait-policy", "passive"]
    assert main(argv) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["benchmark"] == "engines" and last["ratios"] == []
    (got,) = last["rows"]
    wanted = {"engine", "model", "load_s", "prefill_tps", "decode_tps", "peak_rss_mb"}
    assert wanted | {"greedy_agreement", "constrained_valid"} <= set(got)
    assert got["engine"] == "llamacpp" and got["greedy_agreement"] is None
    assert got["prefill_tokens"] == got["prompt_tokens"] > 1000  # a cold, full prefill
    assert got["load_s"] > 0 and got["peak_rss_mb"] > 10 and got["omp_wait_policy"] == "PASSIVE"
    assert [c["call"] for c in got["constrained_calls"]] == ["append-only", "editable"]
    assert isinstance(got["constrained_valid"], bool)
    assert json.loads(out.read_text())["rows"][0]["prompt_sha256"] == got["prompt_sha256"]


def test_a_pair_that_fails_to_load_is_an_error_row_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("xllamacpp")
    argv = ["--engines", "llamacpp", "--model-dir", str(tmp_path), "--output", str(tmp_path / "o")]
    assert main(argv) == 1
    (got,) = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert "not a llama.cpp model directory" in got["error"]


def test_the_cpu_is_named_with_the_vector_extensions_it_has(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC\ncpu family\t: 26\n"
        "flags\t\t: fpu sse avx2 fma f16c avx512f avx512_vnni\n",
        encoding="utf-8",
    )
    real_open = open

    def fake_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        return real_open(info if path == "/proc/cpuinfo" else path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)
    assert engines.cpu() == {
        "model": "AMD EPYC",
        "family": "26",
        "simd": ["avx2", "fma", "f16c", "avx512f", "avx512_vnni"],
    }
    assert engines.environment()["cpu"]["family"] == "26"
    info.unlink()  # no /proc (macOS): the platform's own name, no extensions claimed
    assert engines.cpu()["simd"] == [] and engines.cpu()["model"]
