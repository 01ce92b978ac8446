"""``picocontext-eval --conversation FILE``: score context policies on a conversation.

``picocontext-eval`` hands its arguments here whenever ``--conversation`` is given, so the
notebook evaluation's options and this one's stay separate. Exit codes as there: 0 every
question got an answer, 2 some question failed (the report is still written), 1 a setup or
input problem (``picocontext-eval: …`` on stderr), 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from picocontext import Cancelled, CancelToken, PicoContextError
from picocontext_diagnostics.conversations import load_conversation
from picocontext_diagnostics.conversations_eval import (
    ORACLE,
    ConversationReport,
    ConversationRunner,
    QuestionResult,
    conversation_budget,
)
from picocontext_diagnostics.errors import DiagnosticsError, InvalidConfiguration
from picocontext_diagnostics.policies import (
    BUILTIN_POLICIES,
    Policy,
    parse_policy_list,
    resolve_policies,
)

PROG = "picocontext-eval"
ALL_POLICIES = "oracle,append-only,sliding-window,compaction,retrieval,editable,navigated,distilled"
MAX_WINDOW = 32_768


def registry() -> dict[str, Policy]:
    return {**BUILTIN_POLICIES, ORACLE.name: ORACLE}


class _Parser(argparse.ArgumentParser):
    """Usage errors become :class:`InvalidConfiguration` (exit 1 with our prefix)."""

    def error(self, message: str) -> NoReturn:
        raise InvalidConfiguration(f"{message} (see {PROG} --conversation FILE --help)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=f"{PROG} --conversation",
        description="Ask a conversation's questions under each policy and report evidence "
        "recall, answer F1/exact match and tokens (docs/conversations.md).",
    )
    parser.add_argument("--conversation", required=True, metavar="FILE")
    parser.add_argument("--questions", type=int, metavar="N", help="ask only the first N")
    parser.add_argument("--window", type=int, default=4_096, metavar="TOKENS")
    parser.add_argument("--policies", default=ALL_POLICIES, metavar="LIST")
    parser.add_argument("--backend", choices=("deterministic", "mlx"), default="deterministic")
    parser.add_argument("--model", metavar="NAME_OR_DIR", help="mlx only")
    parser.add_argument("--output", metavar="PATH", help="report path (default: user data)")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    return parser


def result_line(result: QuestionResult) -> str:
    failure = f", failure: {result.failure}" if result.failure else ""
    return (
        f"{result.policy}: {result.question_id}: recall {result.evidence_recall:.2f}, "
        f"F1 {result.answer_f1:.2f}, EM {int(result.exact_match)}, "
        f"input {result.input_tokens}{failure}"
    )


def summary_lines(report: ConversationReport) -> list[str]:
    lines = [f"Summary ({report.conversation_id}, {report.questions_asked} questions)"]
    for scores in report.summary:
        o = scores.overall
        lines.append(
            f"  {scores.policy}: evidence recall {o.evidence_recall.mean:.2f} "
            f"[{o.evidence_recall.low:.2f}–{o.evidence_recall.high:.2f}], "
            f"F1 {o.answer_f1.mean:.2f} [{o.answer_f1.low:.2f}–{o.answer_f1.high:.2f}], "
            f"EM {o.exact_match.text()}, failures {o.failures}, input {o.input_tokens}, "
            f"generated {o.generated_tokens}, {o.elapsed_seconds:.1f} s"
        )
    return lines


def _check(args: argparse.Namespace) -> None:
    if not 256 <= args.window <= MAX_WINDOW:
        raise InvalidConfiguration(f"--window must be 256...{MAX_WINDOW}")
    if args.questions is not None and args.questions < 1:
        raise InvalidConfiguration("--questions must be at least 1")
    if args.model is not None and args.backend != "mlx":
        raise InvalidConfiguration("--model applies only to --backend mlx")


def run(argv: Sequence[str], out: TextIO, err: TextIO, cancel: CancelToken | None = None) -> int:
    handle = None
    try:
        try:
            with contextlib.redirect_stdout(out):
                args = _parser().parse_args(list(argv))
        except SystemExit as exc:  # --help
            return 0 if exc.code in (0, None) else 1
        _check(args)
        known = registry()
        names = parse_policy_list(args.policies, known)
        policies = resolve_policies(names, known)
        conversation = load_conversation(args.conversation)
        if not conversation.questions:
            raise InvalidConfiguration(
                f"{args.conversation} has no questions; add some (docs/conversations.md)"
            )
        from picocontext_diagnostics.backends import provenance, resolve_backend

        handle = resolve_backend(args.backend, args.model)
        if handle.name == "deterministic" and args.window <= 4_096:
            print(
                f"Note: the deterministic backend counts UTF-8 bytes, so a {args.window}-byte "
                "window is far smaller than the same number of model tokens.",
                file=err,
            )
        runner = ConversationRunner(handle.counter, handle.backend)

        def on_result(result: QuestionResult) -> None:
            if not args.quiet:
                print(result_line(result), file=out, flush=True)

        report = runner.run(
            conversation,
            policies,
            conversation_budget(args.window),
            questions=args.questions,
            source=Path(args.conversation).name,
            provenance=provenance(handle),
            on_result=on_result,
            cancel=cancel,
        )
        path = Path(args.output) if args.output else _default_output()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report.to_json(), encoding="utf-8")
        for line in summary_lines(report):
            print(line, file=out)
        print(f"Saved {path}", file=out)
        return 2 if any(r.failure for r in report.results) else 0
    except (Cancelled, KeyboardInterrupt):
        print(f"{PROG}: interrupted", file=err)
        return 130
    except (DiagnosticsError, PicoContextError, OSError) as exc:
        message = exc.message if isinstance(exc, PicoContextError) else str(exc)
        print(f"{PROG}: {message}", file=err)
        return 1
    finally:
        if handle is not None and handle.close is not None:
            handle.close()


def _default_output() -> Path:
    from datetime import UTC, datetime

    from platformdirs import user_data_path

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return user_data_path("picocontext") / "evaluations" / f"conversation-{stamp}.json"


def main(argv: Sequence[str] | None = None) -> int:
    return run(sys.argv[1:] if argv is None else argv, sys.stdout, sys.stderr)
