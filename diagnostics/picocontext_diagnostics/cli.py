"""``picocontext eval`` (alias ``picocontext-eval``): run an evaluation and write its report.

Exit codes (the same rule as every command, ``picocontext.cli``): 0 every result passed;
3 the run finished but some result failed (the report is still written); 2 a usage or input
error (bad flags, an unreadable or invalid configuration, an ``--output`` that cannot be
written), found before anything runs; 1 a failure while running (a model that did not load,
a server that went away); 130 interrupted. Errors are one line:
``picocontext eval: error: <what> — <what to do>``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO, cast

from picocontext import Cancelled, CancelToken, PicoContextError, check_output_file
from picocontext.cli import UsageError as CLIUsageError
from picocontext.cli import error_line, run_command, standalone_parser, usage_line
from picocontext.models import MLX_SINGLE_WORKER, ModelHandle
from picocontext_diagnostics.backends import DEFAULT_BYTES_PER_TOKEN
from picocontext_diagnostics.episodes.episode_runner import StepReport
from picocontext_diagnostics.episodes.fixtures import fixtures_dir
from picocontext_diagnostics.errors import DiagnosticsError, InvalidConfiguration
from picocontext_diagnostics.evaluation import (
    EvaluationConfig,
    EvaluationLimits,
    EvaluationReport,
    EvaluationResult,
    EvaluationRunner,
    Provenance,
    load_config,
)
from picocontext_diagnostics.evaluation.journal import journal_header, result_journal
from picocontext_diagnostics.policies import BUILTIN_POLICIES, Policy, parse_policy_list

PROG = "picocontext-eval"
PROFILES = ("retention", "state", "pressure", "long-history", "retention-four", "state-four")
MAX_BYTES_PER_TOKEN = 16
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CHECKS_FAILED = 3

DESCRIPTION = (
    "Run context policies side by side on seeded notebook episodes and write a JSON report. "
    "Limits are model tokens on every backend: the deterministic backend, which counts UTF-8 "
    "bytes, multiplies them by --bytes-per-token (default 4). Without --config or --profile "
    "it uses wide limits (window 8,192, turn 125,000, episode 500,000 tokens) and the real "
    "backends the app budget."
)
EPILOG = (
    "Exit codes: 0 all passed, 3 some result failed (the report is written), 2 usage or "
    "input error, 1 failure while running, 130 interrupted."
)
_BACKEND_ONLY = {
    "model": ("mlx", "llamacpp", "openai"),
    "prefix-cache": ("mlx", "llamacpp"),
    "kv-shift": ("llamacpp",),
    "constrained": ("mlx", "llamacpp", "openai"),
    "decoding": ("mlx", "llamacpp", "openai"),
    "base-url": ("openai",),
    "tokenizer-dir": ("openai",),
    "server-kind": ("openai",),
}
DECODINGS = ("free", "constrained")
SERVER_KINDS = ("auto", "vllm", "llama.cpp", "generic")
MAX_WORKERS = 64


class UsageError(DiagnosticsError):
    """Bad command line."""


class _Once(argparse.Action):
    """Stores a flag's value (``"1"`` for a switch); a second occurrence is an error, so a
    command line never means two things."""

    def __init__(self, *args: Any, switch: bool = False, **kwargs: Any) -> None:
        if switch:
            kwargs.update(nargs=0, const="1")
        super().__init__(*args, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if getattr(namespace, self.dest, None) is not None:
            raise argparse.ArgumentError(self, f"{option_string} given more than once")
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


class _Repeated(argparse.Action):
    """A flag that may be given several times (``--base-url``): the values joined by newlines,
    which a URL never contains, so the options stay one string per flag."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        before = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, values if before is None else f"{before}\n{values}")


def _nonempty(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("needs a non-empty value")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every flag of the evaluation; values are checked together by :func:`check_options`."""

    def valued(name: str, metavar: str, help: str) -> None:
        parser.add_argument(name, action=_Once, type=_nonempty, metavar=metavar, help=help)

    def switch(*names: str, help: str) -> None:
        parser.add_argument(*names, action=_Once, switch=True, help=help)

    switch("-h", "--help", help="show this help")
    valued(
        "--backend",
        "{scripted,mlx,llamacpp,openai}",
        "scripted (default; also spelled deterministic: a rule-based notebook model counting "
        "UTF-8 bytes, its limits scaled by --bytes-per-token), mlx or llamacpp "
        "(a real local model in process through picocontext.models: MLX, or llama.cpp on the "
        "shipped GGUF, docs/models.md) or openai (an OpenAI-compatible server; prompts "
        "rendered and counted locally, docs/remote.md)",
    )
    valued("--config", "PATH", "evaluation configuration JSON (at most 1 MB)")
    valued("--profile", "NAME", f"a bundled configuration: {', '.join(PROFILES)}")
    valued(
        "--policies",
        "A,B,...",
        "comma-separated policies to compare, replacing the configuration's list: "
        + ", ".join(BUILTIN_POLICIES),
    )
    valued(
        "--bytes-per-token",
        "N",
        "deterministic only: the UTF-8 bytes that stand for one token of every limit (1..."
        f"{MAX_BYTES_PER_TOKEN}, default {DEFAULT_BYTES_PER_TOKEN}: a 4,096-token window is "
        "16,384 bytes); 1 compares raw bytes",
    )
    valued(
        "--model",
        "NAME_OR_DIR",
        "mlx/llamacpp: a known model name (picocontext.models.MODELS) or a local model "
        "directory (default model when omitted); openai: the name the server serves (required)",
    )
    for name, help in (
        (
            "--prefix-cache",
            "mlx/llamacpp only: reuse the KV cache of the common prefix (bare: on)",
        ),
        ("--constrained", "deprecated spelling of --decoding constrained|free (bare: on)"),
    ):
        parser.add_argument(
            name, action=_Once, nargs="?", const="on", type=_nonempty, metavar="on|off", help=help
        )
    switch(
        "--kv-shift",
        help="llamacpp only: after an edit, move the cached records behind the deleted ones "
        "instead of computing them again (approximate; off by default, docs/models.md)",
    )
    valued(
        "--decoding",
        "free|constrained",
        "mlx/llamacpp: constrained (grammar-enforced decisions, tool calls and JSON answers; the "
        "default for embedded models) or free decoding; openai: JSON-schema constrained "
        "decisions, tool calls and JSON answers where the server supports it (vllm, llama.cpp)",
    )
    parser.add_argument(
        "--base-url",
        action=_Repeated,
        type=_nonempty,
        metavar="URL",
        help="openai only: the server's OpenAI base, e.g. http://127.0.0.1:8080/v1; repeat it "
        "to spread episodes over several servers. The API key, if any, comes from "
        "PICOCONTEXT_API_KEY or OPENAI_API_KEY",
    )
    valued(
        "--tokenizer-dir",
        "DIR",
        "openai only: a local directory (or picocontext model name) with the served model's "
        "tokenizer; default: --model when it is a directory or a known model name",
    )
    valued(
        "--server-kind",
        "KIND",
        f"openai only: {', '.join(SERVER_KINDS)} (auto, the default, reads /v1/models; generic "
        "sends text prompts and decodes freely)",
    )
    valued(
        "--workers",
        "N",
        f"run N independent episodes at once (1...{MAX_WORKERS}, default 1); the report is the "
        "same apart from timings. Not above 1 with --backend mlx or llamacpp",
    )
    valued(
        "--conversation",
        "FILE",
        "score the policies on a conversation file instead of notebook episodes "
        "(picocontext.conversation/1 or a chat transcript; docs/conversations.md); the "
        "policies may include oracle",
    )
    valued("--questions", "N", "with --conversation: ask only the first N questions")
    valued("--window", "TOKENS", "with --conversation: the context window (default 4,096)")
    valued("--output", "PATH", "report path (default: a timestamped file in the data folder)")
    switch("--steps", help="also print one line per finished step (useful with slow models)")
    switch(
        "--quiet",
        help="print only the report path and one summary line per policy (no pairwise tests)",
    )
    switch(
        "--resume",
        help="continue an interrupted run of the same command from its journal (every "
        "finished result is journaled as it completes, beside --output or in the data folder)",
    )
    switch(
        "--traces",
        help="keep every model call's context, rendered prompt and token ids in the report "
        "(off: its phase and token count only, a report several times smaller)",
    )
    switch(
        "--json",
        help="print the summary as one JSON object on stdout (the report path, whether every "
        "result passed, per-policy totals and the pairwise tests) instead of text",
    )


def register(subparsers: Any) -> argparse.ArgumentParser:
    """``picocontext eval``: usage errors exit 2 and name the offending word."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "eval",
        help="run policies side by side on seeded episodes; write a JSON report",
        description=DESCRIPTION,
        epilog=EPILOG,
        add_help=False,
        usage_exit=EXIT_USAGE,
        plain_errors=True,
    )
    add_arguments(parser)
    parser.set_defaults(func=_Command(parser))
    return parser


class _Command:
    """``func`` of the ``eval`` subparser: the parsed flags, checked, then run."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser

    def __call__(self, namespace: argparse.Namespace) -> int:
        try:
            options = check_options(_options(namespace))
        except UsageError as exc:
            raise CLIUsageError(exc.message, self.parser.prog, EXIT_USAGE) from None
        return execute(
            options,
            sys.stdout,
            sys.stderr,
            help_text=self.parser.format_help(),
            prog=self.parser.prog,
        )


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    return standalone_parser(register, prog)


def _options(namespace: argparse.Namespace) -> dict[str, str]:
    return {
        key.replace("_", "-"): str(value)
        for key, value in vars(namespace).items()
        if value is not None and key not in ("func", "command", "command_prog")
    }


def parse_args(argv: Sequence[str]) -> dict[str, str]:
    """Strict flags: unknown, repeated or value-less flags and stray words are errors."""
    try:
        namespace = build_parser().parse_args(list(argv))
    except CLIUsageError as exc:
        raise UsageError(exc.message) from None
    return check_options(_options(namespace))


def check_options(out: dict[str, str]) -> dict[str, str]:
    """The rules between flags: one configuration source, mlx-only and deterministic-only
    settings, value ranges."""
    if "config" in out and "profile" in out:
        raise UsageError("use either --config or --profile, not both")
    if out.get("backend") == "scripted":
        out["backend"] = "deterministic"  # the app's name for the same stand-in
    backend = out.get("backend", "deterministic")
    if backend not in ("deterministic", "mlx", "llamacpp", "openai"):
        raise UsageError(
            "--backend must be scripted (alias deterministic), mlx or llamacpp (in process), "
            "or openai (a server)"
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
    if "decoding" in out and out["decoding"] not in DECODINGS:
        raise UsageError("--decoding must be free or constrained")
    if "decoding" in out and "constrained" in out:
        raise UsageError("use --decoding; --constrained is its deprecated spelling")
    if "bytes-per-token" in out:
        if out.get("backend", "deterministic") != "deterministic":
            raise UsageError("--bytes-per-token applies only to --backend deterministic")
        text = out["bytes-per-token"]
        if not (text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_BYTES_PER_TOKEN):
            raise UsageError(f"--bytes-per-token must be an integer 1...{MAX_BYTES_PER_TOKEN}")
    conversation_options(out)
    if "policies" in out:
        try:
            parse_policy_list(out["policies"], policy_choices(out))
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
        if backend in ("mlx", "llamacpp") and int(text) > 1:
            raise UsageError(f"--workers {text} is refused: {MLX_SINGLE_WORKER}")


def conversation_options(out: dict[str, str]) -> None:
    """``--conversation`` replaces the episode configuration; its own flags need it."""
    from picocontext_diagnostics.conversations import command as conversations_cli

    try:
        conversations_cli.check_options(out)
    except InvalidConfiguration as exc:
        raise UsageError(exc.message) from None


def policy_choices(out: dict[str, str]) -> dict[str, Policy] | None:
    if "conversation" not in out:
        return None
    from picocontext_diagnostics.conversations import command as conversations_cli

    return conversations_cli.registry()


def _switch(args: dict[str, str], key: str) -> bool | None:
    return None if key not in args else args[key] == "on"


def _constrained(args: dict[str, str]) -> bool | None:
    """``--decoding`` (or its deprecated spelling ``--constrained``) as the loader's switch."""
    if "decoding" in args:
        return args["decoding"] == "constrained"
    return _switch(args, "constrained")


def choose_config(args: dict[str, str]) -> EvaluationConfig:
    """The configuration file or profile (or the defaults), then ``--policies`` and
    ``--bytes-per-token`` applied and the whole plan validated again."""
    config = _base_config(args)
    scale = bytes_per_token(args)
    if "policies" not in args and scale == 1:
        return config
    data = config.model_dump(mode="json")
    if "policies" in args:
        data["policies"] = list(parse_policy_list(args["policies"]))
    if scale != 1:
        data["limits"] = config.limits.scaled(scale).model_dump(mode="json")
    return EvaluationConfig.parse(json.dumps(data), "command line")


def bytes_per_token(args: dict[str, str]) -> int:
    """How many of the deterministic backend's bytes stand for one token of the
    configuration's limits (1 on a real model, whose counter counts tokens)."""
    if args.get("backend", "deterministic") != "deterministic":
        return 1
    return int(args.get("bytes-per-token", DEFAULT_BYTES_PER_TOKEN))


def _base_config(args: dict[str, str]) -> EvaluationConfig:
    if "config" in args:
        return load_config(args["config"])
    if "profile" in args:
        return load_config(str(fixtures_dir() / "evaluation" / f"{args['profile']}.json"))
    if args.get("backend", "deterministic") == "deterministic":
        return EvaluationConfig(
            limits=EvaluationLimits(
                context_window=8_192, turn_tokens=125_000, episode_tokens=500_000
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
        if run.prefetch_steps:
            opened = sum(1 for t in run.prefetch_steps if t.name == "open")
            parts.append(f"prefetched {len(run.prefetch_steps)} ({opened} open)")
    if step.failure:
        parts.append(f"failure: {step.failure}")
    return ", ".join(parts)


def summary_lines(report: EvaluationReport, pairs: bool = True) -> list[str]:
    unit = report.provenance.token_unit
    source = report.provenance
    lines = [
        f"Summary ({source.backend}, {source.model}; tokens: {unit}; decoding: {source.decoding})"
    ]
    for s in report.summary.policies:
        lines.append(
            f"  {s.policy}: episodes {s.episodes.text()}; context steps "
            f"{s.retained_steps.text()}; answer steps {s.answer_steps.text()}; "
            f"mean input {s.mean_input_tokens:.0f}, output {s.mean_generated_tokens:.0f}, "
            f"prefill {s.mean_prefill_tokens:.0f}; total input {s.total_input_tokens}, "
            f"prefill {s.total_prefill_tokens}, tool calls {s.tool_calls}, "
            f"{s.total_elapsed_seconds:.1f} s"
        )
    for c in report.summary.comparisons if pairs else ():
        diff = "n/a" if c.difference is None else f"{c.difference:+.0%}"
        lines.append(
            f"  {c.policy_a} vs {c.policy_b}: {c.pairs} paired episodes, "
            f"only {c.policy_a} passed {c.only_a_passed}, only {c.policy_b} passed "
            f"{c.only_b_passed}; difference {diff} [95% CI {c.difference_ci95_low:+.0%}–"
            f"{c.difference_ci95_high:+.0%}], exact McNemar p = {c.mcnemar_exact_p:.3g}"
        )
    return lines


def _with_run_notes(report: EvaluationReport, handle: ModelHandle, err: TextIO) -> EvaluationReport:
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
    try:
        args = parse_args(argv)
    except UsageError as exc:
        return _fail(exc, err)
    return execute(args, out, err, cancel, build_parser().format_help())


def _fail(exc: PicoContextError, err: TextIO, prog: str = PROG) -> int:
    """One error line; bad flags or input exit 2, a failure while running 1."""
    if isinstance(exc, UsageError):
        print(usage_line(CLIUsageError(exc.message, prog)), file=err)
        return EXIT_USAGE
    print(error_line(prog, exc.message), file=err)
    return exc.exit_code


def execute(
    args: dict[str, str],
    out: TextIO,
    err: TextIO,
    cancel: CancelToken | None = None,
    help_text: str = "",
    prog: str = PROG,
) -> int:
    """Run checked options (:func:`check_options`); returns the exit code. Messages start
    with ``prog`` (the name the command was run under)."""
    from picocontext_diagnostics.backends import provenance, resolve_backend

    if "help" in args:
        print(help_text.rstrip("\n"), file=out)
        return 0
    try:
        # Before any model is loaded or episode run: a report that cannot be written is
        # found out now, not after the evaluation.
        output = check_output_file(args["output"] if "output" in args else default_output())
    except PicoContextError as exc:
        return _fail(exc, err, prog)
    if "conversation" in args:
        from picocontext_diagnostics.conversations import command as conversations_cli

        return conversations_cli.execute(args, out, err, cancel, prog)
    try:
        config = choose_config(args)
        quiet = "quiet" in args or "json" in args
        # The first line says where the report goes (stderr under --json: stdout is JSON).
        print(f"Report: {output}", file=err if "json" in args else out, flush=True)
        verbose = "steps" in args
        handle = resolve_backend(
            args.get("backend", "deterministic"),
            args.get("model"),
            _switch(args, "prefix-cache"),
            _constrained(args),
            log=lambda message: print(message, file=err, flush=True),
            kv_shift="kv-shift" in args,
            base_urls=tuple(args["base-url"].split("\n")) if "base-url" in args else (),
            tokenizer_dir=args.get("tokenizer-dir"),
            server_kind=args.get("server-kind"),
        )
        workers = int(args.get("workers", "1"))
        if workers > 1 and handle.single_worker is not None:
            handle.close()
            raise UsageError(f"--workers {workers} is refused: {handle.single_worker}")
        for note in handle.notes:
            print(f"Note: {note}", file=err)
        notes = list(handle.notes)
        if handle.kind == "deterministic":
            notes.append(
                f"token limits of the configuration multiplied by {bytes_per_token(args)} "
                "because the deterministic backend counts UTF-8 bytes (--bytes-per-token)"
            )
        if workers > 1:
            notes.append(
                f"episodes ran on {workers} concurrent workers: results are in plan order, "
                "per-episode seconds include waiting for shared servers"
            )
        source = provenance(handle).model_copy(update={"model_notes": tuple(notes)})
        header = journal_header(config, _identity(source, "traces" in args))
        journal_path = _journal_path(output if "output" in args else None, header)
        try:
            # The runner checks the plan (policies, variants) before any journal is written,
            # so a refused plan leaves nothing behind that a rerun would trip over.
            runner = EvaluationRunner(
                config,
                handle.counter,
                handle.backend,
                source,
                workers=workers,
                pool=handle.pool,
                traces="traces" in args,
            )
            journal = result_journal(journal_path, header, "resume" in args)
        except PicoContextError:
            handle.close()
            raise
        if journal.dropped is not None:
            print(f"Note: dropped a torn journal line: {journal.dropped}", file=err)
        if "resume" in args:
            planned = config.planned_runs()
            print(
                f"Resuming: {len(journal.results)} of {planned} results reused from {journal_path}",
                file=err if "json" in args else out,
                flush=True,
            )

        def on_result(result: EvaluationResult) -> None:
            journal.append(result)
            if not quiet:
                print(result_line(result), file=out, flush=True)

        def on_step(step: StepReport) -> None:
            if verbose:
                print(step_line(step), file=out, flush=True)

        try:
            report = runner.run(
                on_result=on_result,
                on_step=on_step,
                cancel=cancel,
                reuse={cast(int, k): v for k, v in journal.results.items()},
            )
        except (Cancelled, KeyboardInterrupt):
            journal.close()
            print(
                f"{prog}: interrupted; {len(journal.results)} finished results are kept in "
                f"{journal_path} — run the same command with --resume to continue",
                file=err,
            )
            return 130
        except PicoContextError:
            if not journal.results:
                journal.discard()  # nothing finished: nothing to resume
            raise
        finally:
            journal.close()
            handle.close()
        report = _with_run_notes(report, handle, err)
        write_report(report, output)
        journal.discard()  # the report now holds every result
        if "json" in args:
            summary = {
                "report": str(output),
                "passed": report.passed,
                **report.summary.model_dump(mode="json"),
            }
            print(json.dumps(summary), file=out)
        else:
            for line in summary_lines(report, pairs="quiet" not in args):
                print(line, file=out)
            print(f"Saved {output}", file=out)
        return 0 if report.passed else EXIT_CHECKS_FAILED
    except (Cancelled, KeyboardInterrupt):
        print(f"{prog}: interrupted; no report written", file=err)
        return 130
    except PicoContextError as exc:
        return _fail(exc, err, prog)


def _identity(source: Provenance, traces: bool) -> dict[str, Any]:
    """What must match for a journal's results to be reused: the model and how it ran, the
    code that ran it (version and source revision), and whether traces were kept."""
    keys = (
        "backend",
        "model",
        "model_revision",
        "token_unit",
        "sampling",
        "prefix_cache",
        "constrained_decisions",
        "decoding",
        "picocontext_version",
        "source_revision",
    )
    return {**{key: getattr(source, key) for key in keys}, "traces": traces}


def _journal_path(output: Path | None, header: dict[str, Any]) -> Path:
    """Beside ``--output``; without one (a timestamped report), in the data folder under the
    run's hash, so the same command finds it again."""
    if output is not None:
        return output.with_name(output.name + ".journal.jsonl")
    digest = hashlib.sha256(json.dumps(header, sort_keys=True).encode("utf-8")).hexdigest()
    return default_output().parent / "journals" / f"{digest[:16]}.jsonl"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m picocontext_diagnostics.cli``: the ``eval`` command under its old name."""
    return run_command("eval", argv, prog=PROG, registrar=register)


if __name__ == "__main__":
    sys.exit(main())
