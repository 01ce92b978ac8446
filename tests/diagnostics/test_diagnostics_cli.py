"""picocontext-eval: flags, defaults, provenance, exit codes, the mlx branch (checklist 96)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext import CancelToken, ModelInput, ModelResponse, PreparedPrompt
from picocontext.models import ByteCounter
from picocontext_diagnostics import backends, cli
from picocontext_diagnostics.backends import resolve_backend
from picocontext_diagnostics.episodes.notebook_backend import DeterministicNotebookBackend
from picocontext_diagnostics.errors import BackendSetupError
from picocontext_diagnostics.evaluation import EvaluationReport

RESOURCES = Path(__file__).resolve().parents[2] / "resources"


@pytest.fixture(autouse=True)
def _data_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs without --output write (reports, journals) under the test's folder, never the
    user's data folder."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))


def run_cli(*argv: str, cancel: CancelToken | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.run(list(argv), out, err, cancel)
    return code, out.getvalue(), err.getvalue()


def write_config(tmp_path: Path, **fields: Any) -> Path:
    data: dict[str, Any] = {
        "seeds": [17],
        "repetitions": 2,
        "step_count": 2,
        # Model tokens: the deterministic backend multiplies them by --bytes-per-token (4).
        "limits": {"context_window": 8_192, "turn_tokens": 125_000, "episode_tokens": 500_000},
    }
    data.update(fields)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_passing_run_writes_the_report_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PICOCONTEXT_SOURCE_REVISION", "abc123")
    output = tmp_path / "nested" / "report.json"
    code, out, err = run_cli("--config", str(write_config(tmp_path)), "--output", str(output))
    assert (code, err) == (0, "")
    first, *lines = out.splitlines()
    assert str(output) in first  # where the report goes, said first
    assert lines[0] == (
        "1: seed 17, repetition 0, append-only: context 2/2, answer 2/2, "
        + lines[0].split("answer 2/2, ")[1]
    )
    assert lines[1].startswith(
        "2: seed 17, repetition 0, editable: context 2/2, answer 2/2, input "
    )
    assert lines[2].startswith("3: seed 17, repetition 1, editable:")
    assert any(line.startswith("  append-only: episodes 2/2 = 100% [95% CI") for line in lines)
    assert any("exact McNemar p = 1" in line for line in lines)
    assert lines[-1] == f"Saved {output}"
    report = EvaluationReport.from_json(output.read_text(encoding="utf-8"))
    p = report.provenance
    assert (p.backend, p.model, p.model_revision) == (
        "deterministic",
        "deterministic-notebook",
        "1",
    )
    assert p.token_unit.startswith("UTF-8 bytes") and p.source_revision == "abc123"
    assert p.prefix_cache == "not applicable" and p.constrained_decisions == "not applicable"
    assert p.operating_system and p.python_version.startswith("3.")
    assert not list(output.parent.glob("*.partial"))


def test_steps_flag_prints_one_line_per_step(tmp_path: Path) -> None:
    code, out, _ = run_cli(
        "--config", str(write_config(tmp_path)), "--output", str(tmp_path / "s.json"), "--steps"
    )
    assert code == 0
    step_lines = [line for line in out.splitlines() if line.startswith("  step-")]
    assert len(step_lines) == 2 * 2 * 2  # repetitions × policies × steps
    assert step_lines[0].startswith("  step-1: context ok, answer ok, edits 0, keeps 0, input ")
    assert "edits 1" in step_lines[2]


def test_failing_run_keeps_the_report_and_exits_3(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        noise_lines=50,
        step_count=4,
        limits={"context_window": 2_500, "turn_tokens": 125_000, "episode_tokens": 500_000},
    )
    output = tmp_path / "r.json"
    code, out, _ = run_cli("--config", str(config), "--output", str(output), "--quiet")
    assert code == 3
    assert "failure:" not in out  # quiet hides per-result lines
    report = EvaluationReport.from_json(output.read_text(encoding="utf-8"))
    assert not report.passed and any(r.failure for r in report.results)


def test_default_deterministic_run_uses_wide_byte_limits(tmp_path: Path) -> None:
    # 8,192 / 125,000 / 500,000 tokens at the default 4 bytes per token; the note saying so
    # is in the report's provenance, not on stderr.
    output = tmp_path / "d.json"
    code, _, err = run_cli("--output", str(output), "--quiet")
    assert (code, err) == (0, "")
    report = EvaluationReport.from_json(output.read_text(encoding="utf-8"))
    assert any("multiplied by 4" in note for note in report.provenance.model_notes)
    config = report.configuration
    assert (
        config.limits.context_window,
        config.limits.turn_tokens,
        config.limits.episode_tokens,
    ) == (
        32_768,
        500_000,
        2_000_000,
    )
    assert config.seeds == (17, 29) and config.repetitions == 3


def test_profiles_run(tmp_path: Path) -> None:
    # The bundled profiles use the 4,096-token app budget: 16,384 bytes at the default
    # --bytes-per-token 4, and 4,096 bytes (a pressure test) with --bytes-per-token 1.
    code, out, _ = run_cli(
        "--profile", "retention", "--output", str(tmp_path / "p.json"), "--quiet"
    )
    assert code in (0, 3) and "summarize" in out
    data = json.loads((tmp_path / "p.json").read_text(encoding="utf-8"))
    assert data["configuration"]["limits"]["context_window"] == 4 * 4_096
    code, _, _ = run_cli(
        "--profile",
        "retention",
        "--bytes-per-token",
        "1",
        "--output",
        str(tmp_path / "b.json"),
        "--quiet",
    )
    assert code in (0, 3)
    data = json.loads((tmp_path / "b.json").read_text(encoding="utf-8"))
    assert data["configuration"]["limits"]["context_window"] == 4_096


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bogus"], "unknown option --bogus"),
        (["stray"], "unexpected argument 'stray'"),
        (["--backend"], "--backend needs a value"),
        (["--backend", "--quiet"], "--backend needs a value"),
        (["--output="], "needs a non-empty value"),
        (["--quiet", "--quiet"], "--quiet given more than once"),
        (["--backend", "mlx", "--backend=mlx"], "--backend given more than once"),
        (["--backend", "gpu"], "--backend must be "),
        (["--profile", "huge"], "--profile must be one of"),
        (["--config", "a.json", "--profile", "state"], "either --config or --profile"),
        (["--model", "x"], "--model applies only to --backend mlx"),
        (["--prefix-cache", "on"], "--prefix-cache applies only to --backend mlx"),
        (["--kv-shift"], "--kv-shift applies only to --backend llamacpp"),
        (["--backend", "mlx", "--kv-shift"], "--kv-shift applies only to --backend llamacpp"),
        (["--backend", "mlx", "--constrained", "yes"], "--constrained must be on or off"),
        (["--quiet=1"], "--quiet takes no value"),
    ],
)
def test_bad_flags_exit_2_with_a_prefixed_message(argv: list[str], message: str) -> None:
    code, out, err = run_cli(*argv)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("picocontext-eval: error: ") and message in err
    assert err.rstrip().endswith(" — see picocontext-eval --help")


def test_bad_configs_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    code, _, err = run_cli("--config", str(missing))
    assert code == 2 and "cannot read" in err
    bad = write_config(tmp_path, repetitions=0)
    code, _, err = run_cli("--config", str(bad))
    assert code == 2 and "repetitions" in err
    big = tmp_path / "big.json"
    big.write_text(" " * 1_000_001, encoding="utf-8")
    code, _, err = run_cli("--config", str(big))
    assert code == 2 and "limit" in err
    code, _, err = run_cli("--config", str(write_config(tmp_path, policies=["wandering"])))
    assert code == 2 and "unknown policy 'wandering'" in err


def test_unwritable_output_exits_2_before_anything_runs(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    code, out, err = run_cli(
        "--config", str(write_config(tmp_path)), "--output", str(blocker / "r.json")
    )
    assert code == 2 and out == ""
    assert err == (
        f"picocontext-eval: error: {blocker / 'r.json'}: cannot be created, {blocker} is not "
        "a folder\n"
    )


@pytest.mark.parametrize("kind", ["folder", "fifo", "device"])
def test_an_output_that_is_not_a_file_is_refused_before_anything_runs(
    tmp_path: Path, kind: str
) -> None:
    target = {"folder": tmp_path, "fifo": tmp_path / "r.fifo", "device": tmp_path / "null"}[kind]
    if kind == "fifo":
        os.mkfifo(target)
    if kind == "device":
        # A link, so that a regression replaces the link, never the system's /dev/null.
        target.symlink_to("/dev/null")
    argv = ["--config", str(write_config(tmp_path)), "--output", str(target)]
    code, out, err = run_cli(*argv)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"picocontext-eval: error: {target}: is ") and "file to write" in err
    conversation = RESOURCES / "conversations" / "moving-house.json"
    code, out, err = run_cli("--conversation", str(conversation), "--output", str(target))
    assert code == 2 and out == "" and "file to write" in err


def test_help_and_interrupt(tmp_path: Path) -> None:
    code, out, _ = run_cli("--help")
    assert code == 0 and out.startswith("usage: picocontext-eval") and "Exit codes" in out
    token = CancelToken()
    token.cancel()
    code, _, err = run_cli(
        "--config", str(write_config(tmp_path)), "--output", str(tmp_path / "x.json"), cancel=token
    )
    assert code == 130 and "interrupted" in err and not (tmp_path / "x.json").exists()


def test_console_script_entry_point(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "picocontext_diagnostics.cli", "--bogus"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "unknown option" in result.stderr


# -- the mlx branch ---------------------------------------------------------------------------


class FakeModel:
    """Stands in for an MLX model object: counter and backend in one, with settings."""

    def __init__(self, name: str | None) -> None:
        self.name = name
        self.counter = ByteCounter()
        self.inner = DeterministicNotebookBackend()
        self.prefix_cache = True
        self.constrained = False
        self.closed = False

    def prepare(self, model_input: ModelInput) -> PreparedPrompt:
        return self.counter.prepare(model_input)

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        return self.inner.generate(prompt, max_tokens, cancel)

    def describe(self) -> dict[str, Any]:
        return {
            "model": f"fake/{self.name}",
            "modelRevision": "r1",
            "sampling": "greedy",
            "prefixCache": self.prefix_cache,
            "constrainedDecisions": self.constrained,
        }

    def close(self) -> None:
        self.closed = True


def test_mlx_branch_resolves_a_counter_backend_and_records_its_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[FakeModel] = []

    def load_model(
        name: str | None = None,
        *,
        model_dir: str | None = None,
        prefix_cache: bool = True,
        constrained: bool = False,
        log: Any = None,
        engine: str = "mlx",
    ) -> FakeModel:
        assert engine == "mlx"
        made.append(FakeModel(name or model_dir))
        made[-1].prefix_cache, made[-1].constrained = prefix_cache, constrained
        return made[-1]

    import picocontext.models as models

    monkeypatch.setattr(models, "load_model", load_model, raising=False)
    output = tmp_path / "m.json"
    code, _, err = run_cli(
        "--backend",
        "mlx",
        "--model",
        "tiny",
        "--prefix-cache",
        "off",
        "--constrained",
        "on",
        "--config",
        str(write_config(tmp_path)),
        "--output",
        str(output),
    )
    assert (code, err) == (0, "")
    p = EvaluationReport.from_json(output.read_text(encoding="utf-8")).provenance
    assert (p.backend, p.model, p.model_revision) == ("mlx", "fake/tiny", "r1")
    assert (p.prefix_cache, p.constrained_decisions) == ("off", "on")
    assert p.token_unit == "model tokens" and p.sampling.startswith("greedy")
    assert made[0].closed


def test_mlx_branch_without_a_loader_is_a_clear_setup_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(backends, "RESOLVER_NAMES", ("no_such_loader",))
    with pytest.raises(BackendSetupError, match="no model loader"):
        resolve_backend("mlx")
    code, _, err = run_cli("--backend", "mlx")
    assert code == 1 and "no model loader" in err and len(err.splitlines()) == 1


def test_mlx_branch_rejects_objects_that_are_not_counter_and_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import picocontext.models as models

    monkeypatch.setattr(models, "load_model", lambda **kw: object(), raising=False)
    with pytest.raises(BackendSetupError, match="not a token counter and backend"):
        resolve_backend("mlx")


def test_deterministic_backend_refuses_model_settings() -> None:
    with pytest.raises(BackendSetupError, match="apply only to --backend mlx"):
        resolve_backend("deterministic", model="x")
    with pytest.raises(BackendSetupError, match="unknown backend"):
        resolve_backend("cuda")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "--backend",
                "mlx",
                "deterministic",
                "--quiet",
                "--model",
                "--config",
                "--profile",
                "state",
                "-h",
            ]
        )
        | st.text(max_size=8),
        max_size=6,
    )
)
def test_argument_parser_only_ever_raises_usage_errors(argv: list[str]) -> None:
    try:
        args = cli.parse_args(argv)
    except cli.UsageError as exc:
        assert exc.message
        return
    assert set(args) <= {
        "steps",
        "help",
        "backend",
        "config",
        "profile",
        "model",
        "prefix-cache",
        "constrained",
        "output",
        "quiet",
    }


@pytest.mark.mlx
def test_real_mlx_path_on_the_tiny_model(tmp_path: Path) -> None:
    """The whole CLI on a real (random-weight) MLX model directory: exact token ids, usage and
    provenance come from the model; a random model fails, which must give exit code 3."""
    pytest.importorskip("mlx_lm")
    from picocontext.models.tiny import write_tiny_model  # core's test-model writer

    directory = write_tiny_model(tmp_path / "tiny-model")
    config = write_config(
        tmp_path,
        repetitions=1,
        step_count=1,
        noise_lines=1,
        limits={"decision_output_tokens": 8, "completion_output_tokens": 8, "decision_attempts": 1},
    )
    output = tmp_path / "mlx.json"
    code, out, err = run_cli(
        "--backend",
        "mlx",
        "--model",
        str(directory),
        "--config",
        str(config),
        "--output",
        str(output),
        "--traces",
    )
    assert code == 3, err
    report = EvaluationReport.from_json(output.read_text(encoding="utf-8"))
    p = report.provenance
    assert (p.backend, p.model, p.token_unit) == ("mlx", "tiny-model", "model tokens")
    assert (p.prefix_cache, p.constrained_decisions) == ("on", "off")
    calls = [c for r in report.results for s in r.steps for c in s.calls]
    assert calls and all(c.token_count == len(c.token_ids) > 0 for c in calls)
    assert all(r.prefill_tokens <= r.input_tokens for r in report.results)
    assert f"Saved {output}" in out


def test_bare_decoding_switches_mean_on() -> None:
    args = cli.parse_args(["--backend", "mlx", "--constrained", "--prefix-cache", "off"])
    assert (args["constrained"], args["prefix-cache"]) == ("on", "off")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--workers", "nan"], "--workers"),
        (["--workers", "-1"], "--workers"),
        (["--bytes-per-token", "inf"], "--bytes-per-token"),
        (["--bytes-per-token", "1e1"], "--bytes-per-token"),
        (["--conversation", "c.json", "--window", "nan"], "--window"),
        (["--conversation", "c.json", "--questions", "-1"], "--questions"),
    ],
)
def test_numeric_flags_refuse_nan_inf_and_negatives_in_one_line(argv: list[str], flag: str) -> None:
    code, out, err = run_cli(*argv)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"picocontext-eval: error: {flag} must be")
