"""``--workers``: independent episodes on a pool, results and callbacks in plan order, the
report content independent of the worker count, and the refusals (MLX in process, bad
values, openai without a server)."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from picocontext import Cancelled, CancelToken
from picocontext.models import MLX_SINGLE_WORKER, ByteCounter, ModelDescription, handle_for
from picocontext_diagnostics import cli
from picocontext_diagnostics.evaluation import EvaluationReport
from picocontext_diagnostics.parallel import run_ordered
from timeless import timeless


def sleeper(value: int, seconds: float, seen: list[int]) -> Any:
    def task(cancel: CancelToken | None) -> int:
        time.sleep(seconds)
        seen.append(value)
        return value

    return task


def test_results_and_callbacks_follow_the_plan_not_completion_order() -> None:
    finished: list[int] = []
    emitted: list[int] = []
    tasks = [sleeper(i, 0.05 * (4 - i), finished) for i in range(4)]
    assert run_ordered(tasks, workers=4, on_done=emitted.append) == [0, 1, 2, 3]
    assert emitted == [0, 1, 2, 3]
    assert finished != [0, 1, 2, 3]  # they really ran concurrently


def test_one_worker_runs_in_order_on_the_callers_thread() -> None:
    threads: list[str] = []

    def task(cancel: CancelToken | None) -> str:
        threads.append(threading.current_thread().name)
        return "x"

    assert run_ordered([task, task], workers=1) == ["x", "x"]
    assert set(threads) == {threading.current_thread().name}


def test_a_failing_task_stops_the_others() -> None:
    stopped = threading.Event()

    def boom(cancel: CancelToken | None) -> int:
        raise ValueError("bad episode")

    def patient(cancel: CancelToken | None) -> int:
        assert cancel is not None
        for _ in range(100):
            if cancel.cancelled:
                stopped.set()
                raise Cancelled()
            time.sleep(0.01)
        return 1

    with pytest.raises(ValueError, match="bad episode"):
        run_ordered([patient, boom], workers=2)
    assert stopped.is_set()


def test_the_callers_cancel_reaches_every_worker() -> None:
    cancel = CancelToken()

    def patient(token: CancelToken | None) -> int:
        assert token is not None
        while not token.cancelled:
            time.sleep(0.01)
        raise Cancelled()

    threading.Timer(0.1, cancel.cancel).start()
    with pytest.raises(Cancelled):
        run_ordered([patient, patient, patient], workers=3, cancel=cancel)


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return cli.run(list(argv), out, err), out.getvalue(), err.getvalue()


def test_the_report_does_not_depend_on_the_worker_count(tmp_path: Path) -> None:
    reports = []
    for workers in ("1", "3"):
        output = tmp_path / f"w{workers}.json"
        code, _out, err = run_cli(
            "--profile", "retention", "--workers", workers, "--output", str(output)
        )
        assert code in (0, 3), err
        reports.append(EvaluationReport.from_json(output.read_text(encoding="utf-8")))
    one, three = (r.model_dump(mode="json") for r in reports)
    assert len(one["results"]) > 3
    assert timeless(one["results"]) == timeless(three["results"])
    assert timeless(one["summary"]) == timeless(three["summary"])
    scale = "token limits of the configuration multiplied by 4"
    assert [n[: len(scale)] for n in one["provenance"]["model_notes"]] == [scale]
    assert any("3 concurrent workers" in n for n in three["provenance"]["model_notes"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backend", "mlx", "--workers", "2"], "the in-process backends (mlx, llamacpp) hold"),
        (["--backend", "llamacpp", "--workers", "2"], "the in-process backends (mlx, llamacpp)"),
        (["--workers", "0"], "--workers must be an integer 1...64"),
        (["--workers", "many"], "--workers must be an integer 1...64"),
        (["--base-url", "http://127.0.0.1:1/v1"], "--base-url applies only to --backend openai"),
        (["--backend", "openai", "--model", "m"], "--backend openai needs --base-url URL"),
        (["--backend", "openai", "--base-url", "http://x/v1"], "needs --base-url URL and --model"),
        (
            ["--backend", "openai", "--base-url", "u", "--model", "m", "--server-kind", "tgi"],
            "--server-kind must be one of",
        ),
        (["--tokenizer-dir", "d"], "--tokenizer-dir applies only to --backend openai"),
    ],
)
def test_bad_worker_and_remote_flags_are_one_line(argv: list[str], message: str) -> None:
    code, _out, err = run_cli(*argv)
    assert code == 2 and len(err.splitlines()) == 1
    assert message in err and "Traceback" not in err


def test_base_url_may_be_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    args = cli.parse_args(
        [
            "--backend",
            "openai",
            "--model",
            "m",
            "--base-url",
            "http://a/v1",
            "--base-url=http://b/v1",
        ]
    )
    assert args["base-url"].split("\n") == ["http://a/v1", "http://b/v1"]


def test_an_unreachable_server_is_one_line(tmp_path: Path) -> None:
    from openai_stub import closed_port

    url = f"http://127.0.0.1:{closed_port()}/v1"
    code, _out, err = run_cli("--backend", "openai", "--base-url", url, "--model", "m")
    assert code == 1
    assert "connection refused" in err and len(err.strip().splitlines()) == 1


class _DescribedModel(ByteCounter):
    """A stand-in for a loaded real model: counter, backend, describe and close."""

    def __init__(self, backend: str) -> None:
        self.backend = backend

    def generate(self, prompt: Any, max_tokens: int, cancel: CancelToken | None = None) -> Any:
        raise AssertionError("not called")

    def describe(self) -> ModelDescription:
        return {"backend": self.backend, "model": "m"}

    def close(self) -> None:
        return None


def test_only_an_in_process_mlx_handle_is_single_worker() -> None:
    mlx = handle_for(_DescribedModel("mlx"))
    assert mlx.single_worker == MLX_SINGLE_WORKER and mlx.pool == ()
    assert handle_for(_DescribedModel("other")).single_worker is None
