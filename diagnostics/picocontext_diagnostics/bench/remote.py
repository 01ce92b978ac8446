"""``scripts/bench.sh remote``: one evaluation through the in-process MLX backend and through
``mlx_lm.server`` (same model directory, same configuration), then ``--workers 1`` against
``--workers 2`` on one server: run times, the remote overhead in %, whether every output is
the same, and the machine's load while it ran. Prints one JSON line.

Each remote run gets a freshly started server, so no run profits from prompts another run
left in the server's cache. Times are the reports' ``elapsed_seconds`` (episodes only: model
loading and server start are excluded) plus each command's wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from picocontext.models import openblas_preload_env
from picocontext_diagnostics import cli
from picocontext_diagnostics.evaluation import EvaluationReport

DEFAULT_CONFIG: dict[str, Any] = {
    "description": "remote bench: two policies, two steps, short outputs",
    "scenario": "retention",
    "seeds": [17],
    "repetitions": 2,
    "step_count": 2,
    "noise_lines": 4,
    "policies": ["append-only", "editable"],
    "limits": {
        "context_window": 4096,
        "turn_tokens": 24000,
        "episode_tokens": 80000,
        "decision_output_tokens": 96,
        "completion_output_tokens": 48,
    },
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serve_mlx_lm(model_dir: Path, workdir: Path, timeout: float = 120.0) -> Iterator[str]:
    """``mlx_lm.server`` for ``model_dir`` on 127.0.0.1 at a free port; yields the base URL
    and always kills the server's process group. OpenBLAS is preloaded as in process. The
    Hugging Face cache is an empty directory
    in ``workdir`` with offline mode on (its /v1/models needs the directory; nothing is
    fetched)."""
    port = free_port()
    cache = workdir / "hf-cache"
    cache.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", **blas_env()}
    log_path = workdir / f"mlx-server-{port}.log"
    command = [sys.executable, "-m", "mlx_lm", "server", "--model", str(model_dir)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "WARNING"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            _wait_healthy(port, process, timeout, log_path)
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            _stop(process)


def blas_env() -> dict[str, str]:
    """``LD_PRELOAD`` of the OpenBLAS the in-process backend preloads (Linux), so the server
    runs MLX's CPU matrix products as fast as the in-process backend does; the comparison is
    meaningless otherwise (the reference BLAS bundled with mlx is many times slower)."""
    return openblas_preload_env()


def _wait_healthy(
    port: int, process: subprocess.Popen[bytes], timeout: float, log_path: Path
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
            raise RuntimeError(f"mlx_lm.server exited with {process.returncode}: {tail}")
        url = f"http://127.0.0.1:{port}/health"
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as answer:
            if answer.status == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"mlx_lm.server did not answer /health within {timeout:.0f} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


def run_eval(argv: list[str], output: Path) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    out, err = io.StringIO(), io.StringIO()
    # --traces: the bench compares the token ids every call sent across engines.
    code = cli.run([*argv, "--output", str(output), "--quiet", "--traces"], out, err)
    wall = time.perf_counter() - started
    if code not in (0, cli.EXIT_CHECKS_FAILED):
        raise RuntimeError(f"picocontext-eval {' '.join(argv)} failed: {err.getvalue()}")
    report = EvaluationReport.from_json(output.read_text(encoding="utf-8"))
    return {
        "report": report,
        "run_seconds": round(report.elapsed_seconds, 2),
        "wall_seconds": round(wall, 2),
        "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def outputs(report: EvaluationReport) -> list[Any]:
    """Everything the model produced and every prompt it was given, run by run."""
    return [
        [
            (s.answer, [a.model_text for a in s.attempts], [c.token_ids for c in s.calls])
            for s in r.steps
        ]
        for r in report.results
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench.sh remote", description=__doc__)
    parser.add_argument("--model", default="smollm2-135m", help="a picocontext model name")
    parser.add_argument("--config", help="evaluation configuration (default: a small one)")
    args = parser.parse_args(argv)
    from picocontext.models import resolve_model

    model_dir = resolve_model(args.model).path
    with tempfile.TemporaryDirectory(prefix="picocontext-remote-") as tmp:
        work = Path(tmp)
        config = Path(args.config) if args.config else work / "config.json"
        if not args.config:
            config.write_text(json.dumps(DEFAULT_CONFIG), encoding="utf-8")
        common = ["--config", str(config)]
        local = run_eval(["--backend", "mlx", "--model", args.model, *common], work / "mlx.json")
        remote: dict[int, dict[str, Any]] = {}
        for workers in (1, 2):
            with serve_mlx_lm(model_dir, work) as url:
                remote_argv = ["--backend", "openai", "--base-url", url, "--model", str(model_dir)]
                remote_argv += [*common, "--workers", str(workers)]
                remote[workers] = run_eval(remote_argv, work / f"remote-{workers}.json")
    print(json.dumps(summary(args.model, local, remote)))
    return 0


def summary(model: str, local: dict[str, Any], remote: dict[int, dict[str, Any]]) -> dict[str, Any]:
    one, two = remote[1], remote[2]
    checks = [n for n in one["report"].provenance.model_notes if n.startswith("remote calls")]
    return {
        "bench": "remote",
        "model": model,
        "cpus": os.cpu_count(),
        "results": len(local["report"].results),
        "in_process": {k: v for k, v in local.items() if k != "report"},
        "server_workers_1": {k: v for k, v in one.items() if k != "report"},
        "server_workers_2": {k: v for k, v in two.items() if k != "report"},
        "remote_overhead_percent": round(100 * (one["run_seconds"] / local["run_seconds"] - 1), 1),
        "workers_2_speedup": round(one["run_seconds"] / two["run_seconds"], 2),
        "same_outputs_in_process_vs_server": outputs(local["report"]) == outputs(one["report"]),
        "same_outputs_workers_1_vs_2": outputs(one["report"]) == outputs(two["report"]),
        "server_token_check": checks[0] if checks else "missing",
    }


if __name__ == "__main__":
    sys.exit(main())
