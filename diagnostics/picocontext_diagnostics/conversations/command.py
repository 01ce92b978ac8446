"""``picocontext-eval --conversation FILE``: score context policies on a conversation.

``picocontext eval`` parses the flags (``--conversation``, ``--questions``, ``--window`` are
among them) and hands the checked options here whenever ``--conversation`` is given.

``--window`` is model tokens on every backend. The deterministic backend counts UTF-8 bytes,
so its budget is the window times ``--bytes-per-token`` (default
:data:`picocontext_diagnostics.backends.DEFAULT_BYTES_PER_TOKEN`, the episode evaluation's
rule): a first run at the default 4,096 tokens compares what a real 4k model would see, not a
4 KB window.

The text report ends with the reference line (a plain BM25 packer at the same budget) and,
per policy, the difference from it, recall by question kind, and the facts lost (which
evidence turns each question's prompt lacked). Exit codes: 0 every question got an answer,
3 it ran but some question failed (the report is still written), 2 the input was refused
before any work (``<prog>: error: <what> — <what to do>`` on stderr, one line), 1 a setup
failure (a model that does not load, a report that cannot be written), 130 interrupted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from picocontext import Cancelled, CancelToken, InputFileError, PicoContextError, TokenCounter
from picocontext.cli import error_line
from picocontext.models import ByteCounter
from picocontext_diagnostics.backends import DEFAULT_BYTES_PER_TOKEN
from picocontext_diagnostics.conversations.conversation_runner import (
    ORACLE,
    ConversationRunner,
    conversation_budget,
)
from picocontext_diagnostics.conversations.format import (
    Conversation,
    ConversationError,
    load_conversation,
)
from picocontext_diagnostics.conversations.scores import (
    ConversationReport,
    PolicyScores,
    QuestionResult,
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
DEFAULT_WINDOW = 4_096
# Conversation text runs 3.8-4.3 UTF-8 bytes per token on the Qwen2.5 and SmolLM2 tokenizers
# (measured in docs/conversations.md); the episode evaluation's --bytes-per-token default too.
# Questions listed per policy in the text "facts lost" view (all of them are in the JSON).
FACTS_LOST_LINES = 12
EXIT_FAILED = 3
EXIT_BAD_INPUT = 2
EXIT_SETUP = 1
# "scripted" is the deterministic backend's other name on the command line.
CONVERSATION_BACKENDS = ("deterministic", "scripted", "mlx", "llamacpp")
# Flags of the notebook evaluation that a conversation run does not take.
EPISODE_ONLY = ("config", "profile", "steps", "workers")


def registry() -> dict[str, Policy]:
    return {**BUILTIN_POLICIES, ORACLE.name: ORACLE}


def result_line(result: QuestionResult) -> str:
    failure = f", failure: {result.failure}" if result.failure else ""
    return (
        f"{result.policy}: {result.question_id}: recall {result.evidence_recall:.2f}, "
        f"F1 {result.answer_f1:.2f}, EM {int(result.exact_match)}, "
        f"input {result.input_tokens}{failure}"
    )


def window_text(report: ConversationReport) -> str:
    tokens = report.window_tokens or report.budget.context_window
    if report.bytes_per_token is None:
        return f"window {tokens:,} tokens"
    return (
        f"window {tokens:,} tokens = {report.budget.context_window:,} bytes at "
        f"{report.bytes_per_token} bytes per token"
    )


def scores_line(scores: PolicyScores, reference: PolicyScores | None = None) -> str:
    o = scores.overall
    versus = ""
    if reference is not None:
        delta = o.evidence_recall.mean - reference.overall.evidence_recall.mean
        versus = f"; recall vs {reference.policy} {delta:+.2f}"
    return (
        f"  {scores.policy}: evidence recall {o.evidence_recall.mean:.2f} "
        f"[{o.evidence_recall.low:.2f}–{o.evidence_recall.high:.2f}], "
        f"F1 {o.answer_f1.mean:.2f} [{o.answer_f1.low:.2f}–{o.answer_f1.high:.2f}], "
        f"EM {o.exact_match.text()}, failures {o.failures}, input {o.input_tokens}, "
        f"generated {o.generated_tokens}, {o.elapsed_seconds:.1f} s{versus}"
    )


def kinds_line(scores: PolicyScores) -> str | None:
    """Recall by question kind, when the questions carry kinds."""
    if set(scores.by_category) <= {"uncategorized"}:
        return None
    parts = [
        f"{kind} {part.evidence_recall.mean:.2f} ({part.questions})"
        for kind, part in scores.by_category.items()
    ]
    return "    recall by kind: " + ", ".join(parts)


def summary_lines(report: ConversationReport) -> list[str]:
    head = f"Summary ({report.conversation_id}, {report.questions_asked} questions, "
    lines = [head + window_text(report) + ")"]
    everything = [*report.summary, *([report.reference] if report.reference else [])]
    for scores in everything:
        is_reference = scores is report.reference
        if is_reference:
            lines.append(f"Reference line ({scores.description})")
        lines.append(scores_line(scores, None if is_reference else report.reference))
        kinds = kinds_line(scores)
        if kinds is not None:
            lines.append(kinds)
    return lines + facts_lost_lines(report)


def _lost(result: QuestionResult) -> str:
    """``q4: s2-t1, s4-t1 (not retrieved)``: a question's missing turns, grouped by reason."""
    by_reason: dict[str, list[str]] = {}
    for miss in result.misses:
        reason = "no prompt sent" if miss.reason.startswith("no prompt") else miss.reason
        by_reason.setdefault(reason, []).append(miss.turn_id)
    parts = [f"{', '.join(turns)} ({reason})" for reason, turns in by_reason.items()]
    return f"    {result.question_id}: " + "; ".join(parts)


def facts_lost_lines(report: ConversationReport) -> list[str]:
    """Per policy, the questions whose prompt lacked evidence and which turns (and why); a
    policy that sent no prompt at all says so once, with the first failure."""
    lines = ["Facts lost (evidence turns missing from the prompt an answer came from)"]
    results = [*report.results, *report.reference_results]
    names = [*report.policies, *([report.reference.policy] if report.reference else [])]
    kept = [n for n in names if not any(r.policy == n and r.misses for r in results)]
    if kept:
        lines.append(f"  none lost: {', '.join(kept)}")
    for name in names:
        missed = [r for r in results if r.policy == name and r.misses]
        if not missed:
            continue
        header = f"  {name}: {len(missed)} of {report.questions_asked} questions"
        failed = [r for r in missed if r.failure]
        if len(failed) == len(missed):
            first = " ".join((failed[0].failure or "").split())
            lines.append(f"{header}, no prompt sent (first failure: {first})")
            continue
        lines.append(header)
        lines.extend(_lost(result) for result in missed[:FACTS_LOST_LINES])
        if len(missed) > FACTS_LOST_LINES:
            more = len(missed) - FACTS_LOST_LINES
            lines.append(f"    … and {more} more (every one is in the JSON report)")
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
    if args.get("backend", "deterministic") not in CONVERSATION_BACKENDS:
        raise InvalidConfiguration(
            "--conversation runs on --backend deterministic, mlx or llamacpp — the openai "
            "backend does not run conversations yet"
        )
    _number(args, "questions", 1, 100_000)
    _number(args, "window", 256, MAX_WINDOW)


def bytes_per_token(args: dict[str, str], counter: TokenCounter) -> int | None:
    """The bytes that stand for one token when ``counter`` counts UTF-8 bytes (the
    deterministic backend's); None for a model's counter, which counts its own tokens."""
    if not isinstance(counter, ByteCounter):
        return None
    return int(args.get("bytes-per-token", DEFAULT_BYTES_PER_TOKEN))


def load_questions(source: str) -> Conversation:
    """The conversation at ``source``; refused when it has no questions to ask."""
    conversation = load_conversation(source)
    if not conversation.questions:
        raise ConversationError(
            f"{source}: the conversation has no questions — add questions with evidence "
            "turn ids (docs/conversations.md)"
        )
    return conversation


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
        window = _number(args, "window", 256, MAX_WINDOW) or DEFAULT_WINDOW
        known = registry()
        policies = resolve_policies(
            parse_policy_list(args.get("policies", ALL_POLICIES), known), known
        )
        source = args["conversation"]
        conversation = load_questions(source)
        from picocontext_diagnostics.backends import provenance, resolve_backend

        handle = resolve_backend(
            args.get("backend", "deterministic"),
            args.get("model"),
            None if "prefix-cache" not in args else args["prefix-cache"] == "on",
            None if "decoding" not in args else args["decoding"] == "constrained",
            log=lambda message: print(message, file=err, flush=True),
            kv_shift="kv-shift" in args,
        )
        scale = bytes_per_token(args, handle.counter)
        quiet = "quiet" in args or "json" in args
        path = Path(args["output"]) if "output" in args else _default_output()
        # The first line says where the report goes (stderr under --json: stdout is JSON).
        print(f"Report: {path}", file=err if "json" in args else out, flush=True)

        def on_result(result: QuestionResult) -> None:
            if not quiet:
                print(result_line(result), file=out, flush=True)

        runner = ConversationRunner(handle.counter, handle.backend)
        report = runner.run(
            conversation,
            policies,
            conversation_budget(window, scale or 1),
            questions=_number(args, "questions", 1, 100_000),
            source=Path(source).name,
            provenance=provenance(handle),
            on_result=on_result,
            cancel=cancel,
            bytes_per_token=scale,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report.to_json(), encoding="utf-8")
        if "json" in args:
            data = json.loads(report.to_json())
            summary = {k: data[k] for k in ("summary", "reference") if k in data}
            failed = any(r.failure for r in report.results)
            print(json.dumps({"report": str(path), "passed": not failed, **summary}), file=out)
        else:
            for line in summary_lines(report):
                print(line, file=out)
            print(f"Saved {path}", file=out)
        return EXIT_FAILED if any(r.failure for r in report.results) else 0
    except (Cancelled, KeyboardInterrupt):
        print(f"{prog}: interrupted; no report written", file=err)
        return 130
    except BAD_INPUT as exc:
        print(error_line(prog, exc.message), file=err)
        return EXIT_BAD_INPUT
    except (DiagnosticsError, PicoContextError) as exc:
        print(error_line(prog, exc.message), file=err)
        return exc.exit_code
    except BrokenPipeError:  # the reader went away (``| head``): not an error
        return 0
    except OSError as exc:
        print(error_line(prog, str(exc)), file=err)
        return EXIT_SETUP
    finally:
        if handle is not None:
            handle.close()


# Errors that refuse the input before any work: exit 2, as a usage error.
BAD_INPUT = (ConversationError, InvalidConfiguration, InputFileError)


def _default_output() -> Path:
    from datetime import UTC, datetime

    from platformdirs import user_data_path

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return user_data_path("picocontext") / "evaluations" / f"conversation-{stamp}.json"
