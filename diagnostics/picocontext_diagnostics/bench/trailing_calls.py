"""``scripts/bench.sh trailing-calls``: what one short call after a cached history costs.

The editable policy's judge asks its questions as short trailing messages after the shared
history (``docs/policies.md``, "One prefix per step"), so with a prefix cache each call
prefills only its trailer. Whether that makes the calls cheap depends on what a trailer's
tokens cost against a whole prompt's, and on whether a call carries a fixed overhead. This
bench measures both on the engine and model given (default: the platform's default pair):

* the prefix is the main job's first prompt (append-only's step-1 answer prompt, rendered by
  the model's own template, as ``scripts/bench.sh engines`` captures it);
* for each trailer size (``--sizes``, in words of a fixed instruction sentence), ``--repeats``
  times: the cache is reset, the prefix is computed whole (a cold call: ``full_prefill_tps``),
  and then the prefix plus the trailer as one more user message is sent, so the engine reuses
  the prefix and computes the rest;
* per call, from the backend's own progress reports: tokens the engine computed, seconds to
  the first token (``prefill_s``), and the call's wall time from the caller's side
  (``wall_s``); ``overhead_s`` is the wall time neither prefill nor decoding accounts for.

Greedy, free decoding, one generated token a call. The last line printed is one JSON object
``{"benchmark": "trailing-calls", "engine", "model", "prefix_tokens", "shared_tokens" (what
every trailing prompt shares with the prefix: all but its closing guidance), "full_prefill_tps",
"rows": [{"words", "trailer_tokens", "prefilled_tokens", "prefill_s", "prefill_tps",
"wall_s", "overhead_s"}, ...]}``, each row the median of its repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picocontext import common_prefix
from picocontext_diagnostics.bench.engines import APPEND, first_prompts, reported_call

DEFAULT_SIZES = (4, 16, 48, 96)
DEFAULT_REPEATS = 2
DEFAULT_OUTPUT = Path("out/bench/trailing-calls.json")
# The trailer's words, cycled: plain instruction text like the judge's questions.
_SENTENCE = (
    "Answer in a few words with what is true now and name the record the value comes from "
    "so that a later step can check it against the newest note in the working history"
)


class BenchError(Exception):
    """Bad arguments: one line to the user."""


def trailer(words: int) -> str:
    """``words`` words of the instruction sentence, cycled, ending with a full stop."""
    cycle = _SENTENCE.split()
    return " ".join(cycle[i % len(cycle)] for i in range(words)) + "."


def timed(model: Any, prompt: Any) -> dict[str, float | int]:
    """One call generating one token: engine-computed tokens, seconds to the first token from
    the backend's progress reports, and the caller's wall seconds."""
    response, done, wall = reported_call(model, prompt, 1)
    prefill_s = done.elapsed - done.decode_seconds
    computed = prompt.token_count if response.prefill_tokens is None else response.prefill_tokens
    return {
        "prefilled_tokens": int(computed),
        "prefill_s": prefill_s,
        "wall_s": wall,
        "overhead_s": max(0.0, wall - done.elapsed),
    }


def measure(model: Any, base: Any, sizes: Sequence[int], repeats: int) -> dict[str, Any]:
    """The rows of :mod:`trailing_calls` on ``model`` with ``base`` as the cached prefix."""
    from picocontext import Phase

    full_tps: list[float] = []
    rows: list[dict[str, Any]] = []
    shared = 0
    for words in sizes:
        prompt = model.prepare(
            base.input.model_copy(update={"phase": Phase.CHOICE, "guidance": trailer(words)})
        )
        shared = common_prefix(base.token_ids, prompt.token_ids)
        calls = []
        for _ in range(repeats):
            model.reset_cache()
            cold = timed(model, base)
            if cold["prefill_s"] > 0:
                full_tps.append(cold["prefilled_tokens"] / cold["prefill_s"])
            calls.append(timed(model, prompt))
        row: dict[str, Any] = {
            "words": words,
            "trailer_tokens": prompt.token_count - shared,
        }
        for key in ("prefilled_tokens", "prefill_s", "wall_s", "overhead_s"):
            value = statistics.median(float(c[key]) for c in calls)
            row[key] = int(value) if key == "prefilled_tokens" else round(value, 3)
        row["prefill_tps"] = (
            round(row["prefilled_tokens"] / row["prefill_s"], 2) if row["prefill_s"] > 0 else None
        )
        rows.append(row)
        print(
            f"trailing-calls: {words} words = {row['trailer_tokens']} tokens after "
            f"{shared}: {row['prefilled_tokens']} computed in {row['prefill_s']} s "
            f"(wall {row['wall_s']} s)",
            file=sys.stderr,
        )
    return {
        "prefix_tokens": base.token_count,
        "shared_tokens": shared,
        "full_prefill_tps": round(statistics.median(full_tps), 2) if full_tps else None,
        "rows": rows,
    }


def parse_sizes(text: str) -> tuple[int, ...]:
    """``4,16,48`` as word counts, each at least 1."""
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise BenchError(f"--sizes takes comma-separated word counts, not {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise BenchError(f"--sizes needs word counts of at least 1, not {text!r}")
    return sizes


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bench.sh trailing-calls", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--model", default=None, help="an embedded model name (default model)")
    p.add_argument("--model-dir", default=None, help="a local model directory instead")
    p.add_argument("--engine", default=None, help="mlx or llamacpp (default: the platform's)")
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="trailer words")
    p.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    p.add_argument(
        "--context-window",
        type=int,
        default=None,
        help="the episode's window (default: the main job's); for tiny test vocabularies",
    )
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from picocontext import PicoContextError
    from picocontext.models import load_model

    args = parser().parse_args(argv)
    try:
        sizes = parse_sizes(args.sizes)
        if args.repeats < 1:
            raise BenchError("--repeats must be at least 1")
        if args.model_dir:
            model = load_model(model_dir=args.model_dir, engine=args.engine, constrained=False)
        else:
            model = load_model(args.model, engine=args.engine, constrained=False)
    except (BenchError, PicoContextError) as exc:
        print(f"trailing-calls: {exc}", file=sys.stderr)
        return 2
    try:
        info = model.describe()
        base = first_prompts(model, args.context_window)[APPEND]
        measured = measure(model, base, sizes, args.repeats)
    except PicoContextError as exc:
        print(f"trailing-calls: {exc}", file=sys.stderr)
        return 1
    finally:
        model.close()
    report = {
        "benchmark": "trailing-calls",
        "engine": info.get("backend") or args.engine,
        "model": info.get("model") or args.model or args.model_dir,
        "threads": info.get("threads"),
        **measured,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)
    print(json.dumps(report, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
