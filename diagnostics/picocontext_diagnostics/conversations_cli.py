"""``picocontext-eval --conversation FILE``: score context policies on a conversation.

``picocontext eval`` parses the flags (``--conversation``, ``--questions``, ``--window`` are
among them) and hands the checked options here whenever ``--conversation`` is given. Exit
codes as there: 0 every question got an answer, 2 some question failed (the report is still
written), 1 a setup or input problem (``picocontext-eval: …`` on stderr), 130 interrupted.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

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
# Flags of the notebook evaluation that a conversation run does not take.
EPISODE_ONLY = ("config", "profile", "bytes-per-token", "steps", "workers")


def registry() -> dict[str, Policy]:
    return {**BUILTIN_POLICIES, ORACLE.name: ORACLE}


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


def _number(args: dict[str, str], key: str, low: int, high: int) -> int | None:
    text = args.get(key)
    if text is None:
        return None
    if not (text.isascii() and text.isdigit() and low <= int(text) <= high):
        raise InvalidConfiguration(f"--{key} must be an integer {low:,}...{high:,}")
    return int(text)


def check_options(args: dict[str, str]) -> None:
    """Flags of a conversation run: ``--questions``/``--window`` need ``--conversation``,
    which in turn excludes the episode configuration flags."""
    if "conversation" not in args:
        for key in ("questions", "window"):
            if key in args:
                raise InvalidConfiguration(f"--{key} applies only with --conversation")
        return
    for key in EPISODE_ONLY:
        if key in args:
            raise InvalidConfiguration(f"--{key} does not apply with --conversation")
    if args.get("backend", "deterministic") not in ("deterministic", "mlx", "llamacpp"):
        raise InvalidConfiguration("--conversation runs on --backend deterministic or mlx")
    _number(args, "questions", 1, 100_000)
    _number(args, "window", 256, MAX_WINDOW)


def execute(
    args: dict[str, str],
    out: TextIO,
    err: TextIO,
    cancel: CancelToken | None = None,
    prog: str = PROG,
) -> int:
    """Run checked options (the ``picocontext eval`` flags with ``--conversation``)."""
    handle = None
    try:
        check_options(args)
        window = _number(args, "window", 256, MAX_WINDOW) or 4_096
        known = registry()
        names = parse_policy_list(args.get("policies", ALL_POLICIES), known)
        policies = resolve_policies(names, known)
        source = args["conversation"]
        conversation = load_conversation(source)
        if not conversation.questions:
            raise InvalidConfiguration(
                f"{source} has no questions; add some (docs/conversations.md)"
            )
        from picocontext_diagnostics.backends import provenance, resolve_backend

        handle = resolve_backend(
            args.get("backend", "deterministic"),
            args.get("model"),
            None if "prefix-cache" not in args else args["prefix-cache"] == "on",
            None if "decoding" not in args else args["decoding"] == "constrained",
            log=lambda message: print(message, file=err, flush=True),
        )
        if handle.kind == "deterministic" and window <= 4_096:
            print(
                f"Note: the deterministic backend counts UTF-8 bytes, so a {window}-byte "
                "window is far smaller than the same number of model tokens.",
                file=err,
            )
        quiet = "quiet" in args

        def on_result(result: QuestionResult) -> None:
            if not quiet:
                print(result_line(result), file=out, flush=True)

        runner = ConversationRunner(handle.counter, handle.backend)
        report = runner.run(
            conversation,
            policies,
            conversation_budget(window),
            questions=_number(args, "questions", 1, 100_000),
            source=Path(source).name,
            provenance=provenance(handle),
            on_result=on_result,
            cancel=cancel,
        )
        path = Path(args["output"]) if "output" in args else _default_output()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report.to_json(), encoding="utf-8")
        for line in summary_lines(report):
            print(line, file=out)
        print(f"Saved {path}", file=out)
        return 2 if any(r.failure for r in report.results) else 0
    except (Cancelled, KeyboardInterrupt):
        print(f"{prog}: interrupted; no report written", file=err)
        return 130
    except (DiagnosticsError, PicoContextError) as exc:
        print(f"{prog}: {exc.message}", file=err)
        return 1
    except OSError as exc:
        print(f"{prog}: {exc}", file=err)
        return 1
    finally:
        if handle is not None:
            handle.close()


def _default_output() -> Path:
    from datetime import UTC, datetime

    from platformdirs import user_data_path

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return user_data_path("picocontext") / "evaluations" / f"conversation-{stamp}.json"
