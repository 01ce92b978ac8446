"""The remote backend end to end against a real ``mlx_lm.server`` on 127.0.0.1 serving the
tiny random-weight model: the same prompts and greedy outputs as the in-process backend, the
server's prompt-token counts equal the local ones, and ``picocontext-eval --backend openai``
writes a report whose content does not depend on ``--workers``."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from picocontext import ModelInput, Phase

pytest.importorskip("mlx_lm")
pytest.importorskip("transformers")

from openai_stub import mlx_server
from picocontext.models.mlx_backend import MLXModel
from picocontext.models.openai_backend import OpenAIBackend
from picocontext.models.tiny import write_tiny_model
from picocontext_diagnostics import cli
from picocontext_diagnostics.evaluation import EvaluationReport

pytestmark = pytest.mark.mlx

CONFIG = {
    "scenario": "retention",
    "seeds": [17],
    "repetitions": 1,
    "step_count": 2,
    "noise_lines": 2,
    "policies": ["append-only", "editable"],
    "limits": {
        "context_window": 4096,
        "turn_tokens": 24000,
        "episode_tokens": 80000,
        "decision_output_tokens": 24,
        "completion_output_tokens": 16,
    },
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    model_dir = write_tiny_model(tmp_path_factory.mktemp("served-tiny"))
    for url in mlx_server(model_dir, tmp_path_factory.mktemp("mlx-server")):
        yield url, model_dir


def test_server_and_in_process_backend_agree_token_for_token(
    served: tuple[str, Path], lamp: Any
) -> None:
    url, model_dir = served
    remote = OpenAIBackend.connect(url, str(model_dir))
    local = MLXModel.load(model_dir, prefix_cache=False)
    try:
        for phase in (Phase.COMPLETION, Phase.EDIT):
            model_input = ModelInput(context=lamp(), phase=phase)
            prompt = remote.prepare(model_input)
            assert prompt.token_ids == local.prepare(model_input).token_ids
            theirs = remote.generate(prompt, 12)
            ours = local.generate(local.prepare(model_input), 12)
            assert (theirs.text, theirs.generated_tokens) == (ours.text, ours.generated_tokens)
            assert theirs.reached_token_limit == ours.reached_token_limit
    finally:
        local.close()
    a = remote.accounting()
    assert (a.calls, a.prompt_checked, a.prompt_mismatch_count) == (2, 2, 0)
    assert a.prefill_reported == 2  # mlx_lm.server reports cached_tokens


def eval_report(url: str, model_dir: Path, tmp_path: Path, *extra: str) -> EvaluationReport:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG), encoding="utf-8")
    output = tmp_path / f"report{'-'.join(extra)}.json"
    out, err = io.StringIO(), io.StringIO()
    argv = ["--backend", "openai", "--base-url", url, "--model", str(model_dir)]
    code = cli.run([*argv, "--config", str(config), "--output", str(output), *extra], out, err)
    assert code in (0, 3), err.getvalue()  # 3: ran, a check failed
    return EvaluationReport.from_json(output.read_text(encoding="utf-8"))


def without_timings(report: EvaluationReport) -> list[dict[str, Any]]:
    """Results with the timing and server-cache fields removed (they depend on scheduling)."""
    volatile = {"elapsed_seconds", "prefill_tokens"}

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in volatile}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return [strip(r.model_dump(mode="json")) for r in report.results]


def test_an_episode_runs_end_to_end_with_the_servers_counts_checked(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    url, model_dir = served
    report = eval_report(url, model_dir, tmp_path)
    p = report.provenance
    assert (p.backend, p.model, p.token_unit.startswith("model tokens")) == (
        "openai",
        str(model_dir),
        True,
    )
    calls = sum(len(s.calls) for r in report.results for s in r.steps)
    assert calls > 0
    check = next(n for n in p.model_notes if n.startswith("remote calls"))
    assert check == (
        f"remote calls: {calls}; server prompt tokens equal the local count on {calls} of "
        f"{calls} reported (0 calls without usage)"
    )
    inputs = sum(c.token_count for r in report.results for s in r.steps for c in s.calls)
    assert inputs == sum(r.input_tokens for r in report.results)


def test_two_workers_give_the_same_report_content(served: tuple[str, Path], tmp_path: Path) -> None:
    url, model_dir = served
    one = eval_report(url, model_dir, tmp_path)
    two = eval_report(url, model_dir, tmp_path, "--workers", "2")
    assert [r.order for r in two.results] == [r.order for r in one.results]
    assert without_timings(two) == without_timings(one)
    assert any("2 concurrent workers" in n for n in two.provenance.model_notes)
