"""``picocontext-eval``: run an evaluation and write its versioned JSON report.

Exit codes: 0 every result passed; 2 some result failed (the report is still written);
1 a setup, configuration or export problem (message on stderr, prefixed ``picocontext-eval:``);
130 interrupted.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from picocontext import Cancelled, CancelToken, PicoContextError
from picocontext_diagnostics.backends import BackendHandle
from picocontext_diagnostics.errors import DiagnosticsError, InvalidConfiguration
from picocontext_diagnostics.evaluation import (
    EvaluationConfig,
    EvaluationLimits,
    EvaluationReport,
    EvaluationResult,
    EvaluationRunner,
    load_config,
)
from picocontext_diagnostics.fixtures import fixtures_dir
from picocontext_diagnostics.policies import BUILTIN_POLICIES, parse_policy_list
from picocontext_diagnostics.runner import StepReport

PROG = "picocontext-eval"
PROFILES = ("retention", "state", "pressure", "long-history", "retention-four", "state-four")
MAX_BYTES_PER_TOKEN = 16

USAGE = f"""usage: {PROG} [--backend deterministic|mlx|openai] [--config PATH | --profile NAME]
                        [--policies A,B,...] [--bytes-per-token N]
                        [--model NAME_OR_DIR] [--prefix-cache on|off] [--constrained on|off]
                        [--base-url URL ...] [--tokenizer-dir DIR] [--server-kind KIND]
                        [--workers N] [--output PATH] [--steps] [--quiet]

Run context policies side by side on seeded notebook episodes and write a JSON report.

options:
  --backend NAME     deterministic (default; a rule-based notebook model, byte counts),
                     mlx (a real local model through picocontext.models), or openai (an
                     OpenAI-compatible server; prompts rendered and counted locally)
  --config PATH      evaluation configuration JSON (at most 1 MB; see docs/diagnostics.md)
  --profile NAME     a bundled configuration: {", ".join(PROFILES[:4])},
                     {", ".join(PROFILES[4:])}
  --policies LIST    comma-separated policies to compare, replacing the configuration's
                     list: {", ".join(BUILTIN_POLICIES)} (e.g.
                     append-only,editable,navigated,distilled)
  --bytes-per-token N
                     deterministic only: multiply every token limit of the configuration by
                     N (1...{MAX_BYTES_PER_TOKEN}), since that backend counts UTF-8 bytes; 4
                     gives the profiles' 4,096-token window as 16,384 bytes
  --model VALUE      mlx: a known model name (see picocontext.models.MODELS) or a local
                     MLX model directory (default model when omitted); openai: the name
                     the server serves (required)
  --prefix-cache on|off
                     mlx only: reuse the KV cache of the longest common prompt prefix
  --constrained on|off
                     mlx: grammar-constrained decision calls; openai: JSON-schema
                     constrained decision and tool calls where the server supports it
  --base-url URL     openai only: the server's OpenAI base, e.g. http://127.0.0.1:8080/v1;
                     repeat it to spread episodes over several servers. The API key, if
                     any, comes from PICOCONTEXT_API_KEY or OPENAI_API_KEY
  --tokenizer-dir DIR
                     openai only: a local directory (or picocontext model name) with the
                     served model's tokenizer; default: --model when it is a directory
  --server-kind KIND openai only: auto (default; from /v1/models), vllm, llama.cpp or
                     generic (text prompts, no structured decoding)
  --workers N        run N independent episodes at once (1...64, default 1); the report
                     is the same apart from timings. Not with --backend mlx
  --output PATH      where to write the report (default: a timestamped file in the user
                     data folder)
  --steps            also print one line per finished step (useful with slow models)
  --quiet            print only the summary and the report path
  -h, --help         show this help

Without --config or --profile the deterministic backend uses wide byte limits
(window 32,768, turn 500,000, episode 2,000,000) and the mlx backend the app budget.
Exit codes: 0 all passed, 2 some result failed, 1 setup error, 130 interrupted."""

_VALUED = (
    "--backend",
    "--config",
    "--profile",
    "--model",
    "--prefix-cache",
    "--constrained",
    "--output",
    "--policies",
    "--bytes-per-token",
    "--base-url",
    "--tokenizer-dir",
    "--server-kind",
    "--workers",
)
_REPEATABLE = ("--base-url",)
_BACKEND_ONLY = {
    "model": ("mlx", "openai"),
    "prefix-cache": ("mlx",),
    "constrained": ("mlx", "openai"),
    "base-url": ("openai",),
    "tokenizer-dir": ("openai",),
    "server-kind": ("openai",),
}
SERVER_KINDS = ("auto", "vllm", "llama.cpp", "generic")
MAX_WORKERS = 64
_FLAGS = ("--quiet", "--steps")


class UsageError(DiagnosticsError):
    """Bad command line."""


def parse_args(argv: Sequence[str]) -> dict[str, str]:
    """Strict flags: unknown, repeated or value-less flags and stray words are errors."""
    out: dict[str, str] = {}
    items = list(argv)
    i = 0
    while i < len(items):
        item = items[i]
        if item in ("-h", "--help"):
            out["help"] = "1"
            i += 1
            continue
        name, eq, value = item.partition("=")
        if name in _FLAGS:
            if eq:
                raise UsageError(f"{name} takes no value")
            key = name[2:]
        elif name in _VALUED:
            key = name[2:]
            if not eq:
                if i + 1 >= len(items) or items[i + 1].startswith("--"):
                    raise UsageError(f"{name} needs a value")
                i += 1
                value = items[i]
            if not value:
                raise UsageError(f"{name} needs a non-empty value")
        elif item.startswith("-"):
            raise UsageError(f"unknown option {name}")
        else:
            raise UsageError(f"unexpected argument {item!r}")
        if key in out and name in _REPEATABLE:
            value = f"{out[key]}\n{value}"  # URLs never contain a newline
        elif key in out:
            raise UsageError(f"{name} given more than once")
        out[key] = value if name in _VALUED else "1"
        i += 1
    if "config" in out and "profile" in out:
        raise UsageError("use either --config or --profile, not both")
    backend = out.get("backend", "deterministic")
    if backend not in ("deterministic", "mlx", "openai"):
        raise UsageError(
            "--backend must be deterministic or mlx (in process), or openai (a server)"
        )
    if "profile" in out and out["profile"] not in PROFILES:
        raise UsageError(f"--profile must be one of {', '.join(PROFILES)}")
    for key, backends in _BACKEND_ONLY.items():
        if key in out and backend not in backends:
            raise UsageError(f"--{key} applies only to --backend {' or '.join(backends)}")
    _check_remote(out)
    for key in ("prefix-cache", "constrained"):
        if key in out and out[key] not in ("on", "off"):
            raise UsageError(f"--{key} must be on or off")
    if "bytes-per-token" in out:
        if out.get("backend", "deterministic") != "deterministic":
            raise UsageError("--bytes-per-token applies only to --backend deterministic")
        text = out["bytes-per-token"]
        if not (text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_BYTES_PER_TOKEN):
            raise UsageError(f"--bytes-per-token must be an integer 1...{MAX_BYTES_PER_TOKEN}")
    if "policies" in out:
        try:
            parse_policy_list(out["policies"])
        except InvalidConfiguration as exc:
            raise UsageError(exc.message) from None
    return out


def _check_remote(out: dict[str, str]) -> None:
    """--backend openai needs a URL and a model; --workers is a bounded integer, and above 1
    it needs a backend that can serve concurrent requests."""
    backend = out.get("backend", "deterministic")
    if backend == "openai" and ("base-url" not in out or "model" not in out):
        raise UsageError("--backend openai needs --base-url URL and --model NAME")
    if "server-kind" in out and out["server-kind"] not in SERVER_KINDS:
        raise UsageError(f"--server-kind must be one of {', '.join(SERVER_KINDS)}")
    if "workers" in out:
        text = out["workers"]
        if not (text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_WORKERS):
            raise UsageError(f"--workers must be an integer 1...{MAX_WORKERS}")
        if backend == "mlx" and int(text) > 1:
            from picocontext_diagnostics.backends import MLX_SINGLE_WORKER

            raise UsageError(f"--workers {text} is refused: {MLX_SINGLE_WORKER}")


def _switch(args: dict[str, str], key: str) -> bool | None:
    return None if key not in args else args[key] == "on"


def choose_config(args: dict[str, str]) -> EvaluationConfig:
    """The configuration file or profile (or the defaults), then ``--policies`` and
    ``--bytes-per-token`` applied and the whole plan validated again."""
    config = _base_config(args)
    if "policies" not in args and "bytes-per-token" not in args:
        return config
    data = config.model_dump(mode="json")
    if "policies" in args:
        data["policies"] = list(parse_policy_list(args["policies"]))
    if "bytes-per-token" in args:
        scaled = config.limits.scaled(int(args["bytes-per-token"]))
        data["limits"] = scaled.model_dump(mode="json")
    return EvaluationConfig.parse(json.dumps(data), "command line")


def _base_config(args: dict[str, str]) -> EvaluationConfig:
    if "config" in args:
        return load_config(args["config"])
    if "profile" in args:
        return load_config(str(fixtures_dir() / "evaluation" / f"{args['profile']}.json"))
    if args.get("backend", "deterministic") == "deterministic":
        return EvaluationConfig(
            limits=EvaluationLimits(
                context_window=32_768, turn_tokens=500_000, episode_tokens=2_000_000
            )
        )
    return EvaluationConfig()


def default_output() -> Path:
    from platformdirs import user_data_path

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return user_data_path("picocontext") / "evaluations" / f"evaluation-{stamp}.json"


def write_report(report: EvaluationReport, path: Path) -> None:
    """Write atomically: a crash never leaves half a report under the final name."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(report.to_json(), encoding="utf-8")
        os.replace(partial, path)
    except OSError as exc:
        raise DiagnosticsError(f"cannot write {path}: {exc.strerror or exc}") from None


def result_line(result: EvaluationResult) -> str:
    line = (
        f"{result.order}: seed {result.seed}, repetition {result.repetition}, "
        f"{result.policy.name}: context {result.retained_correct_steps}/{result.planned_steps}, "
        f"answer {result.answer_correct_steps}/{result.planned_steps}, "
        f"input {result.input_tokens}, output {result.generated_tokens}"
    )
    return line + (f", failure: {result.failure}" if result.failure else "")


def step_line(step: StepReport) -> str:
    """Progress for slow backends: one line per finished step."""
    run = step.run
    usage = f"input {run.total_input_tokens}, output {run.total_generated_tokens}" if run else ""
    parts = [
        f"  {step.step.id}: context {'ok' if step.retained_correct else 'MISS'}",
        f"answer {'ok' if step.answer_correct else 'MISS'}",
    ]
    if run is not None:
        parts.append(f"edits {run.edit_call_count}, keeps {run.keep_call_count}, {usage}")
        if run.tool_steps:
            calls = ", ".join(f"{t.name}{'' if t.ok else ' (not ok)'}" for t in run.tool_steps)
            parts.append(f"tools: {calls}")
    if step.failure:
        parts.append(f"failure: {step.failure}")
    return ", ".join(parts)


def summary_lines(report: EvaluationReport) -> list[str]:
    unit = report.provenance.token_unit
    lines = [f"Summary ({report.provenance.backend}, {report.provenance.model}; tokens: {unit})"]
    for s in report.summary.policies:
        lines.append(
            f"  {s.policy}: episodes {s.episodes.text()}; context steps "
            f"{s.retained_steps.text()}; answer steps {s.answer_steps.text()}; "
            f"mean input {s.mean_input_tokens:.0f}, output {s.mean_generated_tokens:.0f}, "
            f"prefill {s.mean_prefill_tokens:.0f}; total input {s.total_input_tokens}, "
            f"prefill {s.total_prefill_tokens}, tool calls {s.tool_calls}, "
            f"{s.total_elapsed_seconds:.1f} s"
        )
    for c in report.summary.comparisons:
        diff = "n/a" if c.difference is None else f"{c.difference:+.0%}"
        lines.append(
            f"  {c.policy_a} vs {c.policy_b}: {c.pairs} paired episodes, "
            f"only {c.policy_a} passed {c.only_a_passed}, only {c.policy_b} passed "
            f"{c.only_b_passed}; difference {diff} [95% CI {c.difference_ci95_low:+.0%}–"
            f"{c.difference_ci95_high:+.0%}], exact McNemar p = {c.mcnemar_exact_p:.3g}"
        )
    return lines


def _with_run_notes(
    report: EvaluationReport, handle: BackendHandle, err: TextIO
) -> EvaluationReport:
    """Append what the backend learned during the run (remote token checks) to the report's
    provenance, and say so on stderr when a server counted prompt tokens differently."""
    if handle.run_notes is None:
        return report
    extra = handle.run_notes()
    for line in extra:
        if "MISMATCH" in line:
            print(f"Warning: {line}", file=err)
    source = report.provenance
    updated = source.model_copy(update={"model_notes": (*source.model_notes, *extra)})
    return report.model_copy(update={"provenance": updated})


def run(argv: Sequence[str], out: TextIO, err: TextIO, cancel: CancelToken | None = None) -> int:
    """The whole command; returns the exit code (testable without a subprocess)."""
    from picocontext_diagnostics.backends import provenance, resolve_backend

    try:
        args = parse_args(argv)
        if "help" in args:
            print(USAGE, file=out)
            return 0
        config = choose_config(args)
        output = Path(args["output"]) if "output" in args else default_output()
        quiet = "quiet" in args
        verbose = "steps" in args
        handle = resolve_backend(
            args.get("backend", "deterministic"),
            args.get("model"),
            _switch(args, "prefix-cache"),
            _switch(args, "constrained"),
            log=lambda message: print(message, file=err, flush=True),
            base_urls=tuple(args["base-url"].split("\n")) if "base-url" in args else (),
            tokenizer_dir=args.get("tokenizer-dir"),
            server_kind=args.get("server-kind"),
        )
        workers = int(args.get("workers", "1"))
        if workers > 1 and handle.single_worker is not None:
            if handle.close is not None:
                handle.close()
            raise UsageError(f"--workers {workers} is refused: {handle.single_worker}")
        for note in handle.notes:
            print(f"Note: {note}", file=err)
        notes = list(handle.notes)
        if "bytes-per-token" in args:
            notes.append(
                f"token limits of the configuration multiplied by {args['bytes-per-token']} "
                "because the deterministic backend counts UTF-8 bytes"
            )
        elif handle.name == "deterministic" and config.limits.context_window <= 4_096:
            print(
                f"Note: the deterministic backend counts UTF-8 bytes, so a "
                f"{config.limits.context_window}-byte window is far smaller than the same "
                "number of model tokens; --bytes-per-token 4 compares at token scale.",
                file=err,
            )

        def on_result(result: EvaluationResult) -> None:
            if not quiet:
                print(result_line(result), file=out, flush=True)

        def on_step(step: StepReport) -> None:
            if verbose:
                print(step_line(step), file=out, flush=True)

        if workers > 1:
            notes.append(
                f"episodes ran on {workers} concurrent workers: results are in plan order, "
                "per-episode seconds include waiting for shared servers"
            )
        try:
            source = provenance(handle).model_copy(update={"model_notes": tuple(notes)})
            runner = EvaluationRunner(
                config, handle.counter, handle.backend, source, workers=workers, pool=handle.pool
            )
            report = runner.run(on_result=on_result, on_step=on_step, cancel=cancel)
        finally:
            if handle.close is not None:
                handle.close()
        report = _with_run_notes(report, handle, err)
        for line in summary_lines(report):
            print(line, file=out)
        write_report(report, output)
        print(f"Saved {output}", file=out)
        return 0 if report.passed else 2
    except (Cancelled, KeyboardInterrupt):
        print(f"{PROG}: interrupted; no report written", file=err)
        return 130
    except PicoContextError as exc:
        print(f"{PROG}: {exc.message}", file=err)
        if isinstance(exc, UsageError):
            print(f"Run {PROG} --help for usage.", file=err)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; the return value is the exit code."""
    return run(sys.argv[1:] if argv is None else argv, sys.stdout, sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
