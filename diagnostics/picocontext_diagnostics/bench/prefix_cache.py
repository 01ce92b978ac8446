"""``scripts/bench.sh prefix-cache``: one append-only 4-step episode, with and without reuse.

The same loaded model runs the diagnostics' seeded retention episode twice through a
``ContextSession`` (step records appended, one run, the answer appended): first with the
prefix KV cache off (every prompt prefilled in full), then on. Greedy outputs must be
identical step by step; the report gives prompt tokens, prefill tokens actually computed and
wall time for both, and the ratios. An editable run (cache on) is reported too: editable
prompts reuse only up to the first edited record, and decision prompts differ from completion
prompts from their system message on (each family keeps its own cache).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picocontext import ContextSession, Record, Role, RunBudget
from picocontext_diagnostics.bench.generate import environment, load
from picocontext_diagnostics.episodes.episode import generated_episode
from picocontext_diagnostics.episodes.fixtures import Scenario, fixtures_dir
from picocontext_diagnostics.policies import APPEND_ONLY, EDITABLE, Policy, PolicyRun


def reference_text(model: Any, tokens: int) -> str:
    """The first ``tokens`` model tokens (cut at a line) of the bundled greenhouse corpora
    (every text file under ``resources/corpora``, sorted): the stable reference material an
    on-device assistant carries in every prompt."""
    root = fixtures_dir().parent / "corpora"
    lines: list[str] = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in {".md", ".rst", ".txt", ".py"}:
            lines.extend(path.read_text(encoding="utf-8").splitlines())
    out: list[str] = []
    for line in lines:
        if model.count_tokens("\n".join(out)) >= tokens:
            return "\n".join(out)
        out.append(line)
    raise ValueError(f"the corpora under {root} hold fewer than {tokens} tokens")


def run_episode(
    model: Any, policy: Policy, seed: int, steps: int, budget: RunBudget, reference: str
) -> dict[str, Any]:
    """Every step runs even if an earlier one failed (a 135M model often overruns its answer
    allowance): append the step's records, run the policy, record the answer, go on."""
    episode = generated_episode(Scenario.RETENTION, seed, step_count=steps)
    initial = episode.initial
    if reference:
        note = Record(id="reference", role=Role.USER, protected=True, body=reference)
        initial = initial.model_copy(update={"records": (*initial.records, note)})
    session = ContextSession(initial, model, model)
    started = time.perf_counter()
    rows = []
    with PolicyRun(policy, session) as runs:
        for step in episode.steps:
            session.append_records(step.records)
            run = runs.turn(budget)
            answer = Record(id=f"{step.id}-answer", role=Role.ASSISTANT, body=run.answer)
            session.append_records([answer])
            rows.append(
                {
                    "step": step.id,
                    "answer": run.answer,
                    "failure": run.failure,
                    "prompt_tokens": run.total_input_tokens,
                    "prefill_tokens": run.total_prefill_tokens,
                    "generated_tokens": run.total_generated_tokens,
                    "seconds": round(run.elapsed_seconds, 3),
                }
            )
            print(
                f"  {policy.name:<12} cache={'on' if model.prefix_cache else 'off':<3} "
                f"{step.id}: prompt {run.total_input_tokens}, prefill "
                f"{run.total_prefill_tokens}, {run.elapsed_seconds:.1f}s"
            )
    return {
        "policy": policy.name,
        "steps": rows,
        "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
        "prefill_tokens": sum(r["prefill_tokens"] for r in rows),
        "generated_tokens": sum(r["generated_tokens"] for r in rows),
        "seconds": round(time.perf_counter() - started, 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.sh prefix-cache", description=__doc__)
    parser.add_argument("--model", default=None)
    parser.add_argument("--model-dir", default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--answer-tokens", type=int, default=48)
    parser.add_argument(
        "--reference-tokens",
        type=int,
        default=1_600,
        help="a protected reference document of about this many tokens after the task "
        "(0: none). Reuse saves what stays put, so the ratio grows with the stable prefix: "
        "(4b + 10d) / (b + 4d) for b stable and d new tokens per step",
    )
    parser.add_argument("--no-editable", action="store_true", help="skip the editable run")
    parser.add_argument("--output", type=Path, default=Path("out/bench/prefix_cache.json"))
    args = parser.parse_args(argv)

    budget = RunBudget(
        context_window=8_192,
        completion_output_tokens=args.answer_tokens,
        edit_output_tokens=256,
        max_edit_attempts=2,
    )
    model = load(args, prefix_cache=False)
    try:
        reference = reference_text(model, args.reference_tokens) if args.reference_tokens else ""
        off = run_episode(model, APPEND_ONLY, args.seed, args.steps, budget, reference)
        model.prefix_cache = True
        on = run_episode(model, APPEND_ONLY, args.seed, args.steps, budget, reference)
        editable = None
        if not args.no_editable:
            model.prefix_cache = False
            model.prefix_cache = True  # fresh caches
            editable = run_episode(model, EDITABLE, args.seed, args.steps, budget, reference)
        env = environment(model)
    finally:
        model.close()
    identical = [a["answer"] for a in off["steps"]] == [b["answer"] for b in on["steps"]]
    report = {
        "benchmark": "prefix-cache",
        "episode": f"retention seed {args.seed}, {args.steps} steps, append-only",
        "reference_tokens": model.count_tokens(reference) if reference else 0,
        "environment": env,
        "without_reuse": off,
        "with_reuse": on,
        "identical_outputs": identical,
        "prefill_reduction": round(off["prefill_tokens"] / max(1, on["prefill_tokens"]), 2),
        "wall_time_ratio": round(off["seconds"] / max(1e-9, on["seconds"]), 2),
        "editable_with_reuse": editable,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"{'':<16}{'prompt':>9}{'prefill':>9}{'gen':>6}{'seconds':>9}")
    for name, row in (("without reuse", off), ("with reuse", on), ("editable+reuse", editable)):
        if row is None:
            continue
        print(
            f"{name:<16}{row['prompt_tokens']:>9}{row['prefill_tokens']:>9}"
            f"{row['generated_tokens']:>6}{row['seconds']:>9.2f}"
        )
    print(
        f"identical outputs: {identical}; prefill tokens {report['prefill_reduction']}x fewer; "
        f"wall time {report['wall_time_ratio']}x faster"
    )
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
