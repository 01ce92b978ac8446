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
    from picocontext.models.registry import load_model

    return load_model(args.model, model_dir=args.model_dir, prefix_cache=prefix_cache, log=print)


def environment(model: Any) -> dict[str, Any]:
    import mlx.core as mx

    return {
        "model": model.describe(),
        "device": str(model.worker.call(mx.default_device)),
        "machine": platform.machine(),
        "system": platform.system(),
        "python": platform.python_version(),
    }


def bare_stream_generate(model: Any, ids: list[int], max_tokens: int) -> tuple[str, float]:
    """The reference measurement: mlx_lm's own streaming loop, on the worker thread."""
    from mlx_lm import stream_generate

    def run() -> tuple[str, float]:
        started = time.perf_counter()
        text = "".join(
            r.text for r in stream_generate(model.mlx_module, model.tokenizer, ids, max_tokens)
        )
        return text, time.perf_counter() - started

    result: tuple[str, float] = model.worker.call(run)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.sh generate", description=__doc__)
    parser.add_argument("--model", default=None, help="registry name (default: platform default)")
    parser.add_argument("--model-dir", default=None, help="a local MLX model directory")
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
            ours_times: list[float] = []
            bare_times: list[float] = []
            same = True
            tokens = 0
            for _ in range(args.repeat):
                started = time.perf_counter()
                response = model.chat(messages, args.max_tokens)
                ours_times.append(time.perf_counter() - started)
                text, seconds = bare_stream_generate(model, ids, args.max_tokens)
                bare_times.append(seconds)
                same = same and text == response.text
                tokens = response.generated_tokens
            ours, bare = statistics.median(ours_times), statistics.median(bare_times)
            rows.append(
                {
                    "prompt": prompt,
                    "prompt_tokens": len(ids),
                    "generated_tokens": tokens,
                    "ours_seconds": round(ours, 4),
                    "bare_seconds": round(bare, 4),
                    "overhead": round(ours / bare - 1.0, 4),
                    "identical_output": same,
                }
            )
            print(
                f"{len(ids):>5} prompt {tokens:>4} gen  ours {ours:7.3f}s  bare {bare:7.3f}s  "
                f"overhead {ours / bare - 1.0:+7.2%}  identical={same}"
            )
        report = {
            "benchmark": "generate",
            "max_tokens": args.max_tokens,
            "repeat": args.repeat,
            "environment": environment(model),
            "rows": rows,
            "median_overhead": round(statistics.median(r["overhead"] for r in rows), 4),
            "total_ours_seconds": round(sum(r["ours_seconds"] for r in rows), 3),
            "total_bare_seconds": round(sum(r["bare_seconds"] for r in rows), 3),
            "all_identical": all(r["identical_output"] for r in rows),
        }
    finally:
        model.close()
    report["total_overhead"] = round(
        report["total_ours_seconds"] / report["total_bare_seconds"] - 1.0, 4
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(
        f"median overhead {report['median_overhead']:+.2%}, total {report['total_overhead']:+.2%}, "
        f"identical outputs: {report['all_identical']}"
    )
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
