"""``scripts/bench.sh prefetch``: what the navigated policy's prefetch alone brings a reader.

The reader is the deterministic notebook reader with its own fetching turned off: it answers
from what it is shown and never calls a tool, as the 0.5B model does live. Whatever archived
fact it answers with, the prefetch put in front of it. One episode of an evaluation profile
(default: the long-history profile, 16 state-update steps at a 4,096-token window) runs once
per navigator (``off`` = no prefetch, each document navigator, ``archive`` = the default);
each line is one navigator's answered steps; the last line is one JSON object.

``--tokenizer NAME`` counts with that model's tokenizer (default ``qwen2.5-coder-0.5b``, the
model the live tables use; no weights are loaded, but the model must be in the cache, as
after ``scripts/run-example.sh``); ``--tokenizer bytes`` counts UTF-8 bytes with the
window scaled by ``--bytes-per-token`` (default 4), for a machine without the model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picocontext import PicoContextError, TokenCounter
from picocontext.manifest import NAVIGATORS
from picocontext.models import ByteCounter
from picocontext.policies import NavigatedConfig
from picocontext_diagnostics.episodes.episode import generated_episode
from picocontext_diagnostics.episodes.episode_runner import EpisodeRunner
from picocontext_diagnostics.episodes.fixtures import fixtures_dir
from picocontext_diagnostics.episodes.notebook_backend import ShownOnlyReader
from picocontext_diagnostics.evaluation import load_config
from picocontext_diagnostics.policies import Policy

DEFAULT_CONFIG = "long-history.json"
DEFAULT_TOKENIZER = "qwen2.5-coder-0.5b"
NAVIGATOR_CHOICES = ("off", *NAVIGATORS, "archive")


def counter_for(name: str) -> TokenCounter:
    """The named model's chat format over its own tokenizer (no weights), or bytes."""
    if name == "bytes":
        return ByteCounter()
    from picocontext.models import ChatFormat, load_tokenizer, resolve_tokenizer_dir

    tokenizer, _ = load_tokenizer(resolve_tokenizer_dir(name, None))
    return ChatFormat(tokenizer)


def navigated_policy(navigator: str) -> Policy:
    """The built-in navigated policy (as the profiles run it) with ``navigator`` to prefetch."""
    return Policy(name="navigated", config={"navigator": None if navigator == "off" else navigator})


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench.sh prefetch", description=__doc__)
    parser.add_argument("--config", default=str(fixtures_dir() / "evaluation" / DEFAULT_CONFIG))
    parser.add_argument("--tokenizer", default=DEFAULT_TOKENIZER)
    parser.add_argument("--bytes-per-token", type=int, default=4)
    parser.add_argument("--seed", type=int, help="default: the profile's first seed")
    parser.add_argument(
        "--navigators",
        default=",".join(("off", "subtree-scan", "archive")),
        help=f"comma-separated, from {', '.join(NAVIGATOR_CHOICES)}",
    )
    parser.add_argument("--output", type=Path, default=Path("out/bench/prefetch.json"))
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.navigators.split(",") if n.strip()]
    unknown = [n for n in names if n not in NAVIGATOR_CHOICES]
    if unknown or not names:
        parser.error(f"unknown navigator {unknown or names}; use {', '.join(NAVIGATOR_CHOICES)}")
    if not 1 <= args.bytes_per_token <= 16:
        parser.error("--bytes-per-token must be 1...16")
    try:
        config = load_config(args.config)
        counter = counter_for(args.tokenizer)
    except (PicoContextError, OSError, ValueError) as exc:
        print(f"prefetch bench: {exc}", file=sys.stderr)
        return 2
    limits = config.limits
    if args.tokenizer == "bytes":
        limits = limits.scaled(args.bytes_per_token)
    budget = limits.run_budget()
    seed = args.seed if args.seed is not None else config.seeds[0]
    episode = generated_episode(
        config.scenario,
        seed,
        config.step_count,
        config.noise_lines,
        protect_requests=config.protect_requests,
    )
    rows: list[dict[str, Any]] = []
    for name in names:
        started = time.perf_counter()
        report = EpisodeRunner(counter, ShownOnlyReader()).run(
            episode, navigated_policy(name), budget, limits.episode_tokens
        )
        ran = [s.run for s in report.steps if s.run is not None]
        row = {
            "navigator": name,
            "answered": report.answer_correct_steps,
            "steps": config.step_count,
            "ran": len(ran),
            "prefetched_opens": sum(
                1 for run in ran for t in run.prefetch_steps if t.name == "open"
            ),
            "failure": report.failure,
            "seconds": round(time.perf_counter() - started, 1),
        }
        rows.append(row)
        failure = f"; stopped: {report.failure.splitlines()[0][:100]}" if report.failure else ""
        print(
            f"  {name:<16} answered {row['answered']}/{row['steps']} "
            f"({row['ran']} ran, {row['prefetched_opens']} prefetched opens){failure}"
        )
    summary = {
        "benchmark": "prefetch",
        "config": Path(args.config).name,
        "seed": seed,
        "tokenizer": args.tokenizer,
        "context_window": budget.context_window,
        "default": NavigatedConfig().navigator,
        "answered": {r["navigator"]: r["answered"] for r in rows},
        "steps": config.step_count,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({**summary, "rows": rows}, indent=2) + "\n")
    print(json.dumps(summary, sort_keys=False))
    return 0


def main() -> None:
    raise SystemExit(run())


if __name__ == "__main__":
    main()
