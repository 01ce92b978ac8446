"""``scripts/bench.sh generate``: our MLX backend vs a bare ``mlx_lm.stream_generate`` call.

Same model object, same exact prompt ids, same greedy decoding, same token cap, interleaved
(ours, bare, ours, bare …) so machine load hits both alike. The bare call runs directly on the
model's worker thread (no hand-off, no parsing), ours is timed from the caller (thread hand-off,
cancellation checks, tool-call parsing, accounting included) with the prefix cache off, so
both do the same work. Outputs must be identical; the report gives the median per-prompt
overhead. Default model: the embedded SmolLM2 (``--model``/``--model-dir`` to change).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picocontext import ChatMessage

PROMPTS = (
    "Explain in two sentences why the sky is blue.",
    "List three uses of a paperclip.",
    "Write a short note reminding a colleague about tomorrow's 9:00 meeting.",
    "What is the difference between a list and a tuple in Python?",
    "Summarize: the lamp order LM-204 costs 37.50 USD and ships with a 24-month warranty.",
    "Give a one-line definition of photosynthesis.",
)


def load(args: argparse.Namespace, *, prefix_cache: bool = False) -> Any:
    from picocontext.models import load_model

    if getattr(args, "tiny", False):
        import tempfile

        from picocontext.models import write_tiny_model

        args.model_dir = write_tiny_model(tempfile.mkdtemp(prefix="pcx-tiny-"))
    return load_model(args.model, model_dir=args.model_dir, prefix_cache=prefix_cache, log=print)


def matmul_gflops(model: Any, size: int = 1024, runs: int = 10) -> float:
    """float32 matmul throughput on the model's device (shows which BLAS MLX really uses)."""
    import mlx.core as mx

    def run() -> float:
        a = mx.random.normal((size, size))
        b = mx.random.normal((size, size))
        mx.eval(a, b, a @ b)
        started = time.perf_counter()
        for _ in range(runs):
            mx.eval(a @ b)
        return 2 * size**3 * runs / (time.perf_counter() - started) / 1e9

    gflops: float = model.worker.call(run)
    return round(gflops, 1)


def environment(model: Any) -> dict[str, Any]:
    import mlx.core as mx

    return {
        "model": model.describe(),
        "matmul_gflops_1024": matmul_gflops(model),
        "device": str(model.worker.call(mx.default_device)),
        "machine": platform.machine(),
        "system": platform.system(),
        "python": platform.python_version(),
    }


def bare_stream_generate(model: Any, ids: list[int], max_tokens: int) -> tuple[str, float, float]:
    """The reference measurement: mlx_lm's own streaming loop, on the worker thread.
    Returns (text, wall seconds, process CPU seconds)."""
    from mlx_lm import stream_generate

    def run() -> tuple[str, float, float]:
        cpu = time.process_time()
        started = time.perf_counter()
        text = "".join(
            r.text for r in stream_generate(model.mlx_module, model.tokenizer, ids, max_tokens)
        )
        return text, time.perf_counter() - started, time.process_time() - cpu

    result: tuple[str, float, float] = model.worker.call(run)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.sh generate", description=__doc__)
    parser.add_argument("--model", default=None, help="registry name (default: platform default)")
    parser.add_argument("--model-dir", default=None, help="a local MLX model directory")
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="use the tiny random test model: compute is ~1 ms/token, so this bounds the "
        "per-token overhead from above",
    )
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", type=Path, default=Path("out/bench/generate.json"))
    args = parser.parse_args(argv)

    model = load(args)
    rows: list[dict[str, Any]] = []
    try:
        # Warm-up: first calls compile kernels and fault pages in.
        warm_ids, _, _ = model.render_chat([ChatMessage(role="user", content=PROMPTS[0])])
        bare_stream_generate(model, warm_ids, 4)
        model.chat([ChatMessage(role="user", content=PROMPTS[0])], 4)
        for prompt in PROMPTS:
            messages = [ChatMessage(role="user", content=prompt)]
            ids, _, _ = model.render_chat(messages)
            ours_wall: list[float] = []
            ours_cpu: list[float] = []
            bare_wall: list[float] = []
            bare_cpu: list[float] = []
            same = True
            tokens = 0
            for _ in range(args.repeat):
                cpu = time.process_time()
                started = time.perf_counter()
                response = model.chat(messages, args.max_tokens)
                ours_wall.append(time.perf_counter() - started)
                ours_cpu.append(time.process_time() - cpu)
                text, wall, cpu_seconds = bare_stream_generate(model, ids, args.max_tokens)
                bare_wall.append(wall)
                bare_cpu.append(cpu_seconds)
                same = same and text == response.text
                tokens = response.generated_tokens
            row = {
                "prompt": prompt,
                "prompt_tokens": len(ids),
                "generated_tokens": tokens,
                "ours_wall_min": round(min(ours_wall), 4),
                "bare_wall_min": round(min(bare_wall), 4),
                "ours_wall_median": round(statistics.median(ours_wall), 4),
                "bare_wall_median": round(statistics.median(bare_wall), 4),
                "ours_cpu_min": round(min(ours_cpu), 4),
                "bare_cpu_min": round(min(bare_cpu), 4),
                "identical_output": same,
            }
            rows.append(row)
            print(
                f"{len(ids):>5} prompt {tokens:>4} gen  wall min ours {min(ours_wall):7.3f}s "
                f"bare {min(bare_wall):7.3f}s ({min(ours_wall) / min(bare_wall) - 1:+.2%})  "
                f"cpu min ours {min(ours_cpu):7.3f}s bare {min(bare_cpu):7.3f}s "
                f"({min(ours_cpu) / min(bare_cpu) - 1:+.2%})  identical={same}"
            )

        def total(key: str) -> float:
            return round(float(sum(r[key] for r in rows)), 3)

        report: dict[str, Any] = {
            "benchmark": "generate",
            "max_tokens": args.max_tokens,
            "repeat": args.repeat,
            "method": "interleaved runs; per prompt the minimum over repeats (least disturbed "
            "by other load) of wall time and of process CPU time",
            "environment": environment(model),
            "rows": rows,
            "all_identical": all(r["identical_output"] for r in rows),
        }
        for kind in ("wall_min", "wall_median", "cpu_min"):
            ours, bare = total(f"ours_{kind}"), total(f"bare_{kind}")
            report[f"total_ours_{kind}"] = ours
            report[f"total_bare_{kind}"] = bare
            report[f"overhead_{kind}"] = round(ours / bare - 1.0, 4)
    finally:
        model.close()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(
        f"overhead on total wall time (min of repeats) {report['overhead_wall_min']:+.2%}, "
        f"median {report['overhead_wall_median']:+.2%}, "
        f"process CPU {report['overhead_cpu_min']:+.2%}; "
        f"identical outputs: {report['all_identical']}"
    )
    print(f"matmul 1024x1024 float32: {report['environment']['matmul_gflops_1024']} GFLOPS")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
