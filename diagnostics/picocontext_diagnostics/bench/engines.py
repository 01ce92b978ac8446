"""``scripts/bench.sh engines``: MLX and llama.cpp on the same GGUF and the same prompts.

For every (engine, model) pair — engines ``mlx`` and ``llamacpp``, models Qwen2.5-Coder-0.5B
and 1.5B by default (``--engines``, ``--models`` narrow it) — one fresh child process loads the
embedded model (the sha-pinned GGUF: read as is by llama.cpp, dequantized to float32 by the
MLX import, which the parent installs first so that conversion never counts) and measures:

* ``load_s``: wall seconds of ``load_model`` in the child (imports, tokenizer and weights);
  ``peak_rss_mb``: the child's ``ru_maxrss`` at the end, so every pair is measured alone.
* The main job's first model calls. The README's first command runs the retention fixture
  episode (``fixture_episode(Scenario.RETENTION)``, sequential budget) under append-only and
  then editable; the first call of each is captured through the diagnostics' own
  :class:`EpisodeRunner` (a backend that records the prompt and stops the run) and rendered by
  our chat template: append-only's step-1 answer, and whatever editable asks first under its
  current default protocol (a decision, or with nothing to decide yet its answer;
  ``editable_phase`` says which). Both engines get the same token ids (``prompt_sha256``,
  ``editable_prompt_sha256``; ``same_prompt`` in the rows).
* Speed, on append-only's answer prompt after a two-token warm-up and a reset cache (a full
  prefill), greedy, free decoding, ``--max-tokens`` (32): ``prefill_tps`` = prompt tokens the
  engine computed / seconds to the first token; ``decode_tps`` = (generated tokens - 1) /
  seconds from the first to the last token, both from the backend's own progress reports.
* ``greedy_agreement`` of each engine with the other on that prompt, over the first 32
  generated tokens: the length of the common token prefix / the longer output's length (1.0
  = identical, both stopping together included); ``token_match_rate`` = equal positions /
  the longer length, divergences and all. The backends return text, not token ids, so each
  output is re-encoded with our tokenizer (identical text, identical ids).
* ``constrained_valid``: both first calls again, cold, with the main job's constrained
  decoding; a decision must be exactly one call the core's decoders and validator accept, an
  answer the graders' strict facts shape with its schema's keys (``constrained_calls``).

On the 2-core machine the project is measured on, other work shares the cores: ratios hold
better than absolute rates. The last line printed is one JSON object ``{"benchmark":
"engines", "rows": [...], "ratios": [...]}``; ``ratios`` gives llama.cpp/MLX decode and
prefill per model (the issue's bar on the 1.5B: decode >= 4x, prefill >= 1.5x).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picocontext import common_prefix

DEFAULT_ENGINES = ("mlx", "llamacpp")
DEFAULT_MODELS = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
DEFAULT_MAX_TOKENS = 32
DEFAULT_DECISION_TOKENS = 96
DEFAULT_OUTPUT = Path("out/bench/engines.json")
AGREEMENT_TOKENS = 32
WARMUP_TOKENS = 2
# The acceptance bar on the 1.5B model, llama.cpp over MLX.
DECODE_BAR = 4.0
PREFILL_BAR = 1.5
ACCEPTANCE_MODEL = "qwen2.5-coder-1.5b"
# What each engine needs importable, and how to get it.
ENGINE_MODULES = {"mlx": "mlx_lm", "llamacpp": "xllamacpp"}
ENGINE_EXTRAS = {"mlx": "mlx", "llamacpp": "llamacpp"}
LOCAL_MODEL = "local"
# The main job's policies, in its order; their first calls are the prompts measured.
APPEND = "append-only"
EDIT = "editable"
# Each pair runs as ``python -m MODULE --child ENGINE MODEL`` (``__name__`` is ``__main__`` there).
MODULE = "picocontext_diagnostics.bench.engines"
# llama.cpp's CPU threads meet at an OpenMP barrier after every operation. Spinning there
# (libgomp's default) collapses when another process holds a core: measured on the 2-core
# machine beside a second llama.cpp job, the 0.5B decoded 32 tokens in 23-53 s spinning and
# in 1.7-1.9 s with PASSIVE. ``--omp-wait-policy`` sets it for the children.
OMP_WAIT_POLICY = "OMP_WAIT_POLICY"


class BenchError(Exception):
    """Bad arguments or a missing engine: one line for the user."""


class _Captured(Exception):
    """Raised by :class:`_Capture` to stop the episode at its first model call."""


# -- agreement ------------------------------------------------------------------------------
def agreement(a: Sequence[int], b: Sequence[int], n: int = AGREEMENT_TOKENS) -> dict[str, float]:
    """Greedy agreement of two outputs over their first ``n`` tokens: ``greedy_agreement``
    = common prefix / longer length, ``token_match_rate`` = equal positions / longer length.
    Two empty outputs agree fully."""
    a, b = list(a[:n]), list(b[:n])
    longest = max(len(a), len(b))
    if longest == 0:
        return {"greedy_agreement": 1.0, "token_match_rate": 1.0}
    prefix = common_prefix(a, b)
    equal = sum(x == y for x, y in zip(a, b, strict=False))
    return {
        "greedy_agreement": round(prefix / longest, 3),
        "token_match_rate": round(equal / longest, 3),
    }


# -- the main job's first calls (child side) -----------------------------------------------
class _Capture:
    """A backend that records the first prompt it is asked to complete, then stops the run."""

    def __init__(self) -> None:
        self.prompt: Any = None

    def generate(self, prompt: Any, max_tokens: int, cancel: Any = None) -> Any:
        self.prompt = prompt
        raise _Captured()


def first_prompts(model: Any, window: int | None = None) -> dict[str, Any]:
    """The first prepared prompt of the main job's two policies, rendered by ``model``
    (``window``: another context window than the main job's, for vocabularies that need more
    tokens for the same text)."""
    from picocontext_diagnostics import (
        APPEND_ONLY,
        EDITABLE,
        EpisodeRunner,
        Scenario,
        fixture_episode,
        sequential_budget,
    )

    budget = sequential_budget()
    if window is not None:
        budget = budget.model_copy(update={"context_window": window})
    out: dict[str, Any] = {}
    for key, policy in ((APPEND, APPEND_ONLY), (EDIT, EDITABLE)):
        capture = _Capture()
        report = None
        with contextlib.suppress(_Captured):
            episode = fixture_episode(Scenario.RETENTION)
            report = EpisodeRunner(model, capture).run(episode, policy, budget)
        if capture.prompt is None:
            why = report.failure if report is not None else None
            raise BenchError(f"the {policy.name} episode made no model call ({why})")
        out[key] = capture.prompt
    return out


# -- one call, timed by the backend's own progress reports ---------------------------------
def reported_call(model: Any, prompt: Any, max_tokens: int) -> tuple[Any, Any, float]:
    """One call with the backend's progress reports on: the response, its final report
    (``elapsed`` and ``decode_seconds``, so prefill = ``elapsed - decode_seconds``) and the
    caller's wall seconds around it."""
    last: list[Any] = []
    model.progress_listener = last.append
    model.progress_interval = 3600.0  # only the first and the final report matter
    started = time.perf_counter()
    try:
        response = model.generate(prompt, max_tokens)
    finally:
        model.progress_listener = None
    return response, last[-1], time.perf_counter() - started


def timed_call(model: Any, prompt: Any, max_tokens: int) -> dict[str, Any]:
    """One call on a cold cache; prefill = time to the first token, decode = the rest."""
    model.reset_cache()
    response, done, _wall = reported_call(model, prompt, max_tokens)
    decode_s = done.decode_seconds
    prefill_s = done.elapsed - decode_s
    prefill = response.prefill_tokens if response.prefill_tokens is not None else 0
    generated = response.generated_tokens
    return {
        "response": response,
        "prompt_tokens": prompt.token_count,
        "prefill_tokens": prefill,
        "prefill_s": round(prefill_s, 3),
        "prefill_tps": round(prefill / prefill_s, 2) if prefill_s > 0 else None,
        "generated_tokens": generated,
        "decode_s": round(decode_s, 3),
        "decode_tps": round((generated - 1) / decode_s, 2) if generated > 1 else None,
        "seconds": round(response.seconds, 3),
    }


def answer_valid(prompt: Any, text: str) -> bool:
    """The reply has the strict facts shape (the graders' parser) with exactly the keys of
    its answer schema."""
    from picocontext_diagnostics.episodes.grading import parse_facts_answer
    from picocontext_diagnostics.errors import AnswerFormatError

    schema = prompt.input.answer_schema or {}
    wanted = schema.get("properties", {}).get("facts", {}).get("required", [])
    try:
        return sorted(parse_facts_answer(text)) == sorted(wanted)
    except AnswerFormatError:
        return False


def call_valid(prompt: Any, response: Any) -> bool:
    """By the call's phase: a decision or tool step must be exactly one call that the core's
    decoders and validator accept; an answer must pass :func:`answer_valid`; a JSON choice
    (an answer schema on any other phase) must parse as JSON."""
    from picocontext import Phase
    from picocontext_diagnostics.bench.constrained import judge

    phase = prompt.input.phase
    if phase in (Phase.EDIT, Phase.TOOLS):
        return judge(prompt.input.context, response)[1]
    if phase is Phase.COMPLETION:
        return answer_valid(prompt, response.text)
    try:
        json.loads(response.text)
    except ValueError:
        return False
    return True


def constrained_calls(
    model: Any, prompts: dict[str, Any], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Both first calls with the main job's constrained decoding, judged valid or not."""
    model.constrained = True
    rows = []
    for key, tokens in ((APPEND, args.max_tokens), (EDIT, args.decision_tokens)):
        prompt = prompts[key]
        call = timed_call(model, prompt, tokens)
        response = call.pop("response")
        valid = call_valid(prompt, response)
        rows.append({"call": key, "phase": str(prompt.input.phase), "valid": valid, **call})
        rows[-1]["text"] = response.text[:300]
    model.constrained = False
    return rows


# -- one (engine, model) pair: the child process -------------------------------------------
def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1e6 if sys.platform == "darwin" else 1e3), 1)


def measure(
    engine: str, model_name: str, model_dir: str | None, args: argparse.Namespace
) -> dict[str, Any]:
    """Load, capture the first prompts, time a free call, run the constrained calls."""
    from picocontext import ChatMessage
    from picocontext.models import load_model

    started_load = round(os.getloadavg()[0], 2)
    started = time.perf_counter()
    if model_dir:
        model = load_model(model_dir=model_dir, engine=engine, constrained=False)
    else:
        model = load_model(model_name, engine=engine, constrained=False)
    load_s = time.perf_counter() - started
    try:
        info = model.describe()
        prompts = first_prompts(model, args.context_window)
        warm = time.perf_counter()
        model.chat([ChatMessage(role="user", content="Hi")], WARMUP_TOKENS)
        warmup_s = time.perf_counter() - warm
        call = timed_call(model, prompts[APPEND], args.max_tokens)
        response = call.pop("response")
        constrained = [] if args.no_constrained else constrained_calls(model, prompts, args)
        ids = model.chat_format.tokenizer.encode(response.text)
    finally:
        model.close()
    return {
        "engine": engine,
        "model": model_name,
        "load_s": round(load_s, 2),
        "engine_load_s": info.get("loadSeconds"),
        "warmup_s": round(warmup_s, 2),
        **call,
        "peak_rss_mb": peak_rss_mb(),
        "threads": info.get("threads"),
        "omp_wait_policy": os.environ.get(OMP_WAIT_POLICY, "unset"),
        "load_average_1m": [started_load, round(os.getloadavg()[0], 2)],
        "prompt_sha256": _ids_digest(prompts[APPEND].token_ids),
        "editable_phase": str(prompts[EDIT].input.phase),
        "editable_prompt_tokens": prompts[EDIT].token_count,
        "editable_prompt_sha256": _ids_digest(prompts[EDIT].token_ids),
        "text": response.text,
        "output_ids": ids[:AGREEMENT_TOKENS],
        "constrained_valid": all(c["valid"] for c in constrained) if constrained else None,
        "constrained_calls": constrained,
    }


def _ids_digest(ids: Sequence[int]) -> str:
    return hashlib.sha256(json.dumps(list(ids)).encode()).hexdigest()[:16]


def child_main(args: argparse.Namespace) -> int:
    """Measure one pair and print its row as the last line (an ``error`` row on failure)."""
    engine, model_name = args.child
    try:
        row = measure(engine, model_name, args.child_dir, args)
    except Exception as exc:  # the parent reports it as the pair's row, never a traceback
        row = {"engine": engine, "model": model_name, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(row), flush=True)
        return 1
    print(json.dumps(row), flush=True)
    return 0


# -- the parent ------------------------------------------------------------------------------
def parse_list(text: str, known: Sequence[str] | None, what: str) -> tuple[str, ...]:
    """A comma-separated list; with ``known``, every entry must be one of them."""
    items = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not items:
        raise BenchError(f"--{what} is empty")
    unknown = [item for item in items if known is not None and item not in known]
    if unknown:
        raise BenchError(
            f"unknown {what[:-1]} {unknown[0]!r}; choose from {', '.join(known or ())}"
        )
    return items


def embedded_names() -> tuple[str, ...]:
    from picocontext.models import MODELS

    return tuple(sorted(name for name, spec in MODELS.items() if spec.source == "embedded"))


def check_engines(engines: Sequence[str]) -> None:
    """Every engine asked for is importable here, else one line that says how to install it."""
    for engine in engines:
        if importlib.util.find_spec(ENGINE_MODULES[engine]) is None:
            raise BenchError(
                f"the {engine} engine is not installed: pip install "
                f"'picocontext[{ENGINE_EXTRAS[engine]}]' (scripts/bench.sh installs the mlx "
                "extra, and the llamacpp extra on Linux)"
            )


def plan(args: argparse.Namespace) -> list[tuple[str, str, str | None]]:
    """(engine, model label, model directory or None) for every pair, in run order."""
    from picocontext.models import ENGINES

    engines = parse_list(args.engines, ENGINES, "engines")
    check_engines(engines)
    if args.model_dir is not None:
        if len(engines) != 1:
            raise BenchError("--model-dir holds one engine's layout: pass --engines with one")
        if not Path(args.model_dir).is_dir():
            raise BenchError(f"--model-dir {args.model_dir} is not a directory")
        return [(engines[0], LOCAL_MODEL, str(args.model_dir))]
    models = parse_list(args.models, embedded_names(), "models")
    return [(engine, model, None) for model in models for engine in engines]


def install(pairs: Sequence[tuple[str, str, str | None]]) -> None:
    """Fetch and convert what the pairs need, here, so no child pays (or measures) it."""
    from picocontext.models import resolve_model

    for engine, model, directory in pairs:
        if directory is None:
            resolve_model(model, engine="llamacpp" if engine == "llamacpp" else "mlx", log=_log)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def child_command(pair: tuple[str, str, str | None], args: argparse.Namespace) -> list[str]:
    engine, model, directory = pair
    command = [sys.executable, "-m", MODULE, "--child", engine, model]
    command += ["--max-tokens", str(args.max_tokens)]
    command += ["--decision-tokens", str(args.decision_tokens)]
    if args.context_window is not None:
        command += ["--context-window", str(args.context_window)]
    if directory is not None:
        command += ["--child-dir", directory]
    if args.no_constrained:
        command.append("--no-constrained")
    return command


def run_child(pair: tuple[str, str, str | None], args: argparse.Namespace) -> dict[str, Any]:
    """One pair in a fresh process; its last stdout line is its row."""
    engine, model, _ = pair
    print(f"engines: {engine} {model} …", file=sys.stderr, flush=True)
    env = dict(os.environ)
    if args.omp_wait_policy != "inherit":
        env[OMP_WAIT_POLICY] = args.omp_wait_policy.upper()
    done = subprocess.run(
        child_command(pair, args), stdout=subprocess.PIPE, text=True, timeout=args.timeout, env=env
    )
    lines = done.stdout.strip().splitlines()
    try:
        row: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, ValueError):
        code = done.returncode
        error = f"the child exited {code} without a result line (its messages are above)"
        row = {"engine": engine, "model": model, "error": error}
    print(f"engines: {json.dumps(summary(row))}", file=sys.stderr, flush=True)
    return row


def summary(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("engine", "model", "load_s", "prefill_tps", "decode_tps", "peak_rss_mb", "error")
    return {k: row[k] for k in keys if k in row}


def compare(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Agreement of each row with the other engine on the same model (in place), and the
    llama.cpp/MLX rate ratios per model where both ran."""
    ratios = []
    for model in dict.fromkeys(r["model"] for r in rows):
        pair = {r["engine"]: r for r in rows if r["model"] == model and "error" not in r}
        for row in (r for r in rows if r["model"] == model):
            row.setdefault("greedy_agreement", None)
        if len(pair) < 2:
            continue
        mlx, llama = pair["mlx"], pair["llamacpp"]
        same = mlx["prompt_sha256"] == llama["prompt_sha256"]
        same_edit = mlx.get("editable_prompt_sha256") == llama.get("editable_prompt_sha256")
        scores = agreement(mlx["output_ids"], llama["output_ids"]) if same else {}
        for row in (mlx, llama):
            row.update(scores, same_prompt=same, same_editable_prompt=same_edit)
        ratios.append(ratio_row(model, mlx, llama))
    return ratios


def ratio_row(model: str, mlx: dict[str, Any], llama: dict[str, Any]) -> dict[str, Any]:
    decode = _ratio(llama.get("decode_tps"), mlx.get("decode_tps"))
    prefill = _ratio(llama.get("prefill_tps"), mlx.get("prefill_tps"))
    row: dict[str, Any] = {"model": model, "decode_ratio": decode, "prefill_ratio": prefill}
    if model == ACCEPTANCE_MODEL:
        row["meets_bar"] = (decode or 0) >= DECODE_BAR and (prefill or 0) >= PREFILL_BAR
    return row


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


# The vector extensions whose kernels llama.cpp and OpenBLAS can pick (AVX2 and up).
SIMD_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")


def cpu() -> dict[str, Any]:
    """The CPU the figures were measured on: its model name and vector extensions (Linux
    reads them from /proc/cpuinfo). Speeds measured here differ by several times between
    machines of one kind, so every engine row says which one ran it."""
    name, family, flags = platform.processor() or platform.machine(), "", set[str]()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    name = value.strip()
                elif key.strip() == "cpu family":
                    family = value.strip()  # a hypervisor's "AMD EPYC" hides the generation
                elif key.strip() == "flags":
                    flags = set(value.split())
    except OSError:
        pass
    return {"model": name, "family": family, "simd": [f for f in SIMD_FLAGS if f in flags]}


def environment() -> dict[str, Any]:
    return {
        "machine": platform.machine(),
        "system": platform.system(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu": cpu(),
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench.sh engines", description=__doc__.split("\n\n")[0])
    p.add_argument("--engines", default=",".join(DEFAULT_ENGINES), help="comma-separated")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help="embedded model names")
    p.add_argument(
        "--model-dir", default=None, help="a local model directory for the one engine given"
    )
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    p.add_argument("--decision-tokens", type=int, default=DEFAULT_DECISION_TOKENS)
    p.add_argument(
        "--context-window",
        type=int,
        default=None,
        help="the episode's window (default: the main job's 4,096); for tiny test vocabularies",
    )
    p.add_argument("--no-constrained", action="store_true", help="skip the constrained calls")
    p.add_argument(
        "--omp-wait-policy",
        choices=("inherit", "passive", "active"),
        default="inherit",
        help="OMP_WAIT_POLICY for the children (llama.cpp's threads); inherit: as set here",
    )
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per pair")
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    p.add_argument("--child", nargs=2, metavar=("ENGINE", "MODEL"), help=argparse.SUPPRESS)
    p.add_argument("--child-dir", default=None, help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from picocontext import PicoContextError

    args = parser().parse_args(argv)
    if args.child:
        return child_main(args)
    try:
        if args.max_tokens < 2 or args.decision_tokens < 1:
            raise BenchError("--max-tokens must be at least 2 and --decision-tokens at least 1")
        pairs = plan(args)
        install(pairs)
    except (BenchError, PicoContextError) as exc:  # the registry's errors are one line too
        print(f"engines: {exc}", file=sys.stderr)
        return 2
    rows = [run_child(pair, args) for pair in pairs]
    ratios = compare(rows)
    report = {"benchmark": "engines", "environment": environment(), "rows": rows, "ratios": ratios}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)
    print(json.dumps(report, ensure_ascii=False))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
