"""``scripts/bench.sh tool-calls`` on the tiny random model: every probe renders through the
model's template, runs, is judged, and the last line printed is the one JSON summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picocontext import ModelResponse, ModelToolCall, Phase
from picocontext_diagnostics.bench import tool_calls
from picocontext_diagnostics.decision_probes import default_probes_path


def test_probe_set_covers_every_kind_and_renders_valid_inputs() -> None:
    probes = tool_calls.load_probes()
    kinds = {p.kind for p in probes.probes}
    assert kinds == {
        "tool_choice",
        "argument_copy",
        "stale_delete",
        "keep",
        "navigation",
        "distill",
    }
    for probe in probes.probes:
        model_input = tool_calls.probe_input(probes, probe)
        if probe.kind in tool_calls.DECISION_KINDS:
            assert model_input.phase is Phase.EDIT
            assert set(probe.expect.delete) <= set(model_input.context.unprotected_ids)
        else:
            names = [t["function"]["name"] for t in model_input.tools or []]
            assert model_input.phase is Phase.TOOLS and probe.expect.tool in names


def reply(name: str, arguments: dict[str, object], clipped: bool = False) -> ModelResponse:
    call = ModelToolCall(name=name, arguments=json.dumps(arguments))
    return ModelResponse(tool_calls=(call,), reached_token_limit=clipped)


def test_judging_is_strict() -> None:
    probes = tool_calls.load_probes()
    by_id = {p.id: p for p in probes.probes}
    copy = by_id["copy-order-code"]
    model_input = tool_calls.probe_input(probes, copy)

    def judge(response: ModelResponse) -> tuple[bool, bool, bool]:
        v = tool_calls.judge_tool(model_input, response, copy.expect)
        return v["valid"], v["right_tool"], v["right_args"]

    assert judge(reply("find_order", {"order_id": "KX-7302-BB"})) == (True, True, True)
    assert judge(reply("find_order", {"order_id": "KX-7302-B"})) == (True, True, False)
    assert judge(reply("get_weather", {"city": "KX"})) == (True, False, False)
    assert judge(reply("find_order", {"order": "KX-7302-BB"})) == (False, False, False)
    assert judge(reply("find_order", {"order_id": "KX-7302-BB"}, clipped=True))[0] is False
    assert judge(ModelResponse(text="Order KX-7302-BB is on its way.")) == (False, False, False)
    stale = by_id["stale-price"]
    snapshot = tool_calls.probe_input(probes, stale).context

    def decide(response: ModelResponse) -> tuple[bool, bool, bool]:
        v = tool_calls.judge_decision(snapshot, response, stale.expect)
        return v["valid"], v["right_tool"], v["right_args"]

    ops = [{"action": "delete", "recordID": "n1"}]
    assert decide(reply("edit_context", {"baseRevision": 1, "operations": ops})) == (
        True,
        True,
        True,
    )
    two = [*ops, {"action": "delete", "recordID": "n2"}]
    assert decide(reply("edit_context", {"baseRevision": 1, "operations": two}))[2] is False
    assert decide(reply("keep_context", {"baseRevision": 1})) == (True, False, False)
    assert decide(reply("keep_context", {"baseRevision": 0}))[0] is False  # stale revision


@pytest.mark.mlx
def test_bench_runs_on_the_tiny_model_and_prints_its_line_last(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("mlx_lm")
    pytest.importorskip("llguidance")
    from picocontext.models.tiny import write_tiny_model

    model_dir = write_tiny_model(tmp_path / "tiny")
    output = tmp_path / "tool_calls.json"
    for decoding in ("free", "constrained"):
        argv = ["--model-dir", str(model_dir), "--engine", "mlx", "--decoding", decoding]
        argv += ["--limit", "4"]
        assert tool_calls.main([*argv, "--max-tokens", "24", "--output", str(output)]) == 0
        last = capsys.readouterr().out.strip().splitlines()[-1]
        summary = json.loads(last)
        assert summary["decoding"] == decoding and summary["n"] == 4
        assert summary["model"] == "tiny"
        for key in ("valid_rate", "right_tool_rate", "right_args_rate"):
            assert 0.0 <= summary[key] <= 1.0
        assert summary["right_args_rate"] <= summary["right_tool_rate"] <= summary["valid_rate"]
        assert summary["seconds_per_call"] > 0
        written = json.loads(output.read_text(encoding="utf-8"))
        assert len(written["rows"]) == 4 and written["environment"]["decoding"] == decoding


@pytest.mark.mlx
def test_decision_probes_run_on_the_tiny_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The outcome path on a real backend: the policy's decision runs, the line says how
    many probes were judged and the exact rate."""
    pytest.importorskip("mlx_lm")
    pytest.importorskip("llguidance")
    from picocontext.models.tiny import write_tiny_model

    model_dir = write_tiny_model(tmp_path / "tiny")
    argv = ["--model-dir", str(model_dir), "--engine", "mlx", "--decoding", "constrained"]
    argv += ["--probes", str(default_probes_path()), "--limit", "2", "--max-tokens", "24"]
    assert tool_calls.main([*argv, "--output", str(tmp_path / "out.json")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["n"] == summary["decision_n"] == 2
    assert 0.0 <= summary["decision_exact_rate"] <= 1.0
