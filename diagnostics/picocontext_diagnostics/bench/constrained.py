"""``scripts/bench.sh constrained``: grammar-constrained vs free decision calls.

Twenty decision prompts come from the diagnostics' seeded episodes (both scenarios, seeds
0–4, after step 1 and step 2). Two parts:

1. Library comparison on the model's tokenizer (no generation): for each prompt, compile the
   decision grammar and walk a valid ``keep_context`` and ``edit_context`` call token by token,
   timing the mask per token; check that valid calls are accepted and a stale revision, a
   protected record id and text before the tag are refused. llguidance and outlines-core are
   measured; xgrammar is reported as not measurable here when it cannot be imported (its
   package imports torch).
2. The model (default: embedded SmolLM2) answers every prompt with constraints off and on:
   share of syntactically valid calls (exactly one call that the core decoders accept), share
   the validator accepts (the edit applies / the keep matches), and per-token cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picocontext import (
    EDIT_TOOL,
    KEEP_TOOL,
    ModelInput,
    ModelResponse,
    Phase,
    PicoContextError,
    Snapshot,
    WorkingContext,
    decode_edit_payload,
    decode_keep_payload,
)
from picocontext.models import decision_lark, decision_schema
from picocontext_diagnostics.bench.generate import environment, load
from picocontext_diagnostics.episodes.episode import generated_episode
from picocontext_diagnostics.episodes.fixtures import Scenario


def decision_snapshots(count: int) -> list[Snapshot]:
    out: list[Snapshot] = []
    for steps in (1, 2):
        for scenario in (Scenario.RETENTION, Scenario.STATE_UPDATES):
            for seed in range(5):
                episode = generated_episode(scenario, seed, step_count=steps)
                records = episode.initial.records + tuple(
                    r for step in episode.steps for r in step.records
                )
                out.append(episode.initial.model_copy(update={"records": records}))
    return out[:count]


def valid_calls(snapshot: Snapshot) -> list[str]:
    target = snapshot.unprotected_ids[-1]
    edit = {
        "name": EDIT_TOOL,
        "arguments": {
            "baseRevision": snapshot.revision,
            "operations": [{"action": "replace", "recordID": target, "body": "FACT key=value"}],
        },
    }
    keep = {"name": KEEP_TOOL, "arguments": {"baseRevision": snapshot.revision}}
    return [
        "<tool_call>\n" + json.dumps(c, separators=(", ", ": ")) + "\n</tool_call>"
        for c in (keep, edit)
    ]


def invalid_calls(snapshot: Snapshot) -> list[str]:
    protected = next(r.id for r in snapshot.records if r.protected)
    stale = {"name": KEEP_TOOL, "arguments": {"baseRevision": snapshot.revision + 1}}
    locked = {
        "name": EDIT_TOOL,
        "arguments": {
            "baseRevision": snapshot.revision,
            "operations": [{"action": "delete", "recordID": protected}],
        },
    }
    wrap = [
        "<tool_call>\n" + json.dumps(c, separators=(", ", ": ")) + "\n</tool_call>"
        for c in (stale, locked)
    ]
    return [*wrap, "Sure. " + valid_calls(snapshot)[0]]


# -- part 1: libraries ------------------------------------------------------------------------
def measure_llguidance(tokenizer: Any, vocab: int, snapshots: list[Snapshot]) -> dict[str, Any]:
    from picocontext.models import DecisionGrammar

    grammar = DecisionGrammar(tokenizer, vocab, tokenizer.eos_token_id)
    compile_s: list[float] = []
    mask_s: list[float] = []
    correct = 0
    checks = 0
    for snapshot in snapshots:
        started = time.perf_counter()
        grammar.matcher(snapshot)
        compile_s.append(time.perf_counter() - started)
        for text in valid_calls(snapshot):
            matcher = grammar.matcher(snapshot)
            ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
            ok = True
            for token in ids:
                started = time.perf_counter()
                matcher.compute_bitmask()
                mask_s.append(time.perf_counter() - started)
                ok = ok and matcher.consume_token(token)
            correct += ok
            checks += 1
        for text in invalid_calls(snapshot):
            matcher = grammar.matcher(snapshot)
            ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
            correct += matcher.validate_tokens(ids) < len(ids)
            checks += 1
    return _summary("llguidance", compile_s, mask_s, correct, checks)


def _byte_vocabulary(tokenizer: Any) -> dict[bytes, list[int]]:
    """Token id → raw bytes for a byte-level BPE (GPT-2 byte alphabet undone)."""
    from tokenizers import pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    # GPT-2's printable mapping: bytes 33..126, 161..172, 174..255 map to themselves.
    direct = [*range(33, 127), *range(161, 173), *range(174, 256)]
    mapping = {chr(b): b for b in direct}
    extra = [b for b in range(256) if b not in direct]
    for i, b in enumerate(extra):
        mapping[chr(256 + i)] = b
    assert set(mapping) == set(alphabet)
    special = set(tokenizer.get_added_vocab())
    out: dict[bytes, list[int]] = {}
    for text, token_id in tokenizer.get_vocab().items():
        if token_id == tokenizer.eos_token_id:
            continue
        raw = text.encode() if text in special else bytes(mapping[c] for c in text)
        out.setdefault(raw, []).append(token_id)
    return out


def measure_outlines(tokenizer: Any, snapshots: list[Snapshot]) -> dict[str, Any]:
    try:
        import outlines_core
        from outlines_core.json_schema import build_regex_from_schema
    except ImportError as exc:
        return {"library": "outlines-core", "error": f"not importable: {exc}"}
    vocabulary = outlines_core.Vocabulary(tokenizer.eos_token_id, _byte_vocabulary(tokenizer))
    compile_s: list[float] = []
    mask_s: list[float] = []
    correct = 0
    checks = 0
    for snapshot in snapshots:
        schema = _unbounded(decision_schema(snapshot))
        started = time.perf_counter()
        inner = build_regex_from_schema(json.dumps(schema), r"[ ]?")
        index = outlines_core.Index("<tool_call>\\n" + inner + "\\n</tool_call>", vocabulary)
        compile_s.append(time.perf_counter() - started)
        for text in valid_calls(snapshot):
            guide = outlines_core.Guide(index)
            ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
            ok = True
            for token in ids:
                started = time.perf_counter()
                allowed = guide.get_tokens()
                mask_s.append(time.perf_counter() - started)
                if token not in allowed:
                    ok = False
                    break
                if token != tokenizer.eos_token_id:
                    guide.advance(token)
            correct += ok
            checks += 1
        for text in invalid_calls(snapshot):
            guide = outlines_core.Guide(index)
            ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
            correct += not guide.accepts_tokens(ids)
            checks += 1
    row = _summary("outlines-core", compile_s, mask_s, correct, checks)
    row["note"] = (
        "body maxLength removed (its bounded-length regex made the index build run for more "
        "than 300 s); measured on the first "
        f"{len(snapshots)} prompts only"
    )
    return row


def _unbounded(schema: dict[str, Any]) -> dict[str, Any]:
    """The decision schema without x-guidance options and without the body length bound."""
    text = json.dumps(schema)
    out: dict[str, Any] = json.loads(text)
    out.pop("x-guidance", None)
    for variant in out.get("anyOf", []):
        ops = variant["properties"]["arguments"]["properties"].get("operations")
        if ops:
            for item in ops["items"]["anyOf"]:
                item["properties"].get("body", {}).pop("maxLength", None)
    return out


def measure_xgrammar() -> dict[str, Any]:
    try:
        import xgrammar  # noqa: F401
    except Exception as exc:  # ImportError, or its own missing torch/tvm dependencies
        return {"library": "xgrammar", "error": f"not importable here: {type(exc).__name__}: {exc}"}
    return {"library": "xgrammar", "error": "importable, but not measured by this benchmark"}


def _summary(
    name: str, compile_s: list[float], mask_s: list[float], correct: int, checks: int
) -> dict[str, Any]:
    return {
        "library": name,
        "compile_ms_median": round(1000 * statistics.median(compile_s), 3),
        "compile_ms_max": round(1000 * max(compile_s), 3),
        "mask_us_median": round(1e6 * statistics.median(mask_s), 2),
        "mask_us_p95": round(1e6 * sorted(mask_s)[int(0.95 * (len(mask_s) - 1))], 2),
        "correct_checks": f"{correct}/{checks}",
    }


# -- part 2: the model ----------------------------------------------------------------------
def judge(snapshot: Snapshot, response: ModelResponse) -> tuple[bool, bool]:
    """(syntactically valid single call, accepted by the validator)."""
    if len(response.tool_calls) != 1 or response.reached_token_limit:
        return False, False
    call = response.tool_calls[0]
    try:
        if call.name == EDIT_TOOL:
            edit = decode_edit_payload(call.arguments, snapshot.scope)
        elif call.name == KEEP_TOOL:
            decode_keep_payload(call.arguments, snapshot.revision)
            return True, True
        else:
            return False, False
    except PicoContextError:
        return False, False
    try:
        WorkingContext.start(snapshot).apply(edit)
    except PicoContextError:
        return True, False
    return True, True


def run_model(model: Any, snapshots: list[Snapshot], max_tokens: int, on: bool) -> dict[str, Any]:
    model.constrained = on
    syntactic = accepted = tokens = 0
    seconds = 0.0
    rows = []
    for snapshot in snapshots:
        prompt = model.prepare(ModelInput(context=snapshot, phase=Phase.EDIT))
        started = time.perf_counter()
        response = model.generate(prompt, max_tokens)
        elapsed = time.perf_counter() - started
        ok, fine = judge(snapshot, response)
        syntactic += ok
        accepted += fine
        tokens += response.generated_tokens
        seconds += elapsed
        rows.append(
            {
                "prompt_tokens": prompt.token_count,
                "prefill_tokens": response.prefill_tokens,
                "generated_tokens": response.generated_tokens,
                "seconds": round(elapsed, 3),
                "valid_call": ok,
                "accepted": fine,
                "calls": [c.model_dump() for c in response.tool_calls],
                "text": response.text[:400],
            }
        )
        print(
            f"  constrained={on!s:<5} valid={ok!s:<5} accepted={fine!s:<5} {response.text[:90]!r}"
        )
    n = len(snapshots)
    return {
        "constrained": on,
        "valid_calls": f"{syntactic}/{n}",
        "valid_share": round(syntactic / n, 3),
        "accepted_calls": f"{accepted}/{n}",
        "generated_tokens": tokens,
        "seconds": round(seconds, 3),
        "rows": rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.sh constrained", description=__doc__)
    parser.add_argument("--model", default=None)
    parser.add_argument("--model-dir", default=None)
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--libraries-only", action="store_true")
    parser.add_argument(
        "--outlines-prompts", type=int, default=3, help="outlines-core compiles take seconds"
    )
    parser.add_argument("--output", type=Path, default=Path("out/bench/constrained.json"))
    args = parser.parse_args(argv)

    snapshots = decision_snapshots(args.prompts)
    model = load(args, prefix_cache=True)
    try:
        hf = model.chat_format.tokenizer.raw
        vocab = int(json.loads((model.path / "config.json").read_text())["vocab_size"])
        libraries = [
            measure_llguidance(hf, vocab, snapshots),
            measure_outlines(hf, snapshots[: args.outlines_prompts]),
            measure_xgrammar(),
        ]
        for row in libraries:
            print(json.dumps(row))
        runs: list[dict[str, Any]] = []
        overhead: dict[str, Any] = {}
        if not args.libraries_only:
            runs.append(run_model(model, snapshots, args.max_tokens, on=False))
            times: list[float] = []
            model.decision_grammar().timings = times
            runs.append(run_model(model, snapshots, args.max_tokens, on=True))
            free, cons = runs
            per_token_free = free["seconds"] / max(1, free["generated_tokens"])
            per_token_cons = cons["seconds"] / max(1, cons["generated_tokens"])
            overhead = {
                "mask_ms_per_token_median": round(1000 * statistics.median(times), 3),
                "mask_ms_per_token_mean": round(1000 * statistics.fmean(times), 3),
                "seconds_per_token_free": round(per_token_free, 4),
                "seconds_per_token_constrained": round(per_token_cons, 4),
                "note": "per-token seconds include prefill; the mask time (consume, mask, "
                "array build; the token's .item() sync excluded) is the direct cost",
            }
        env = environment(model)
    finally:
        model.close()
    report = {
        "benchmark": "constrained",
        "prompts": len(snapshots),
        "grammar_example": decision_lark(snapshots[0], special_tags=False)[:600],
        "environment": env,
        "libraries": libraries,
        "runs": runs,
        "overhead": overhead,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    for run in runs:
        print(
            f"constrained={run['constrained']!s:<5} valid {run['valid_calls']}  accepted "
            f"{run['accepted_calls']}  tokens {run['generated_tokens']}  {run['seconds']:.1f}s"
        )
    if overhead:
        print(json.dumps(overhead))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
