"""``scripts/bench.sh decision-replay ROWS.json [--config JSON]``: judge a change to the
editable decision on the replies a model already gave, without the model.

A decision probe run (``scripts/bench.sh tool-calls --probes FILE``) keeps every reply of
every probe, in call order. Greedy decoding answers the same prompt the same way, so a
variant of the decision that asks only prompts the model was already asked (fewer judged
pairs, a gate that skips a call, another way to read the same replies) can be judged
exactly by looking its prompts up. For each probe this replays the recorded run first, in
call order, which maps each prompt (its trailing question and answer shape; the history
before it is the probe's own) to its reply, and checks that the replay reproduces the
recorded outcome and call count; a probe that does not (the code changed since the run, or
the row predates whole replies) is *unevaluable*. The variant then runs on the same probe
with every reply looked up; a prompt the model was never asked also makes the probe
unevaluable, so nothing is guessed. Only the incremental decision replays (its calls are
short text replies), and not with ``none_margin`` (it weighs probabilities a run does not
record); a config asking for either is refused. Prompts are rendered and counted in UTF-8
bytes under a budget scaled by four (the replies do not depend on the counter; a turn budget
a real tokenizer would not reach is not reached here either).

Prints each probe whose outcome or call count the variant changes and writes every probe's
before and after to ``--output`` (default ``out/bench/decision_replay.json``); the last line is
one JSON object ``{"benchmark": "decision-replay", "rows", "replayed", "unevaluable",
"exact_before", "exact_after", "calls_before", "calls_after", "config"}`` (exact and calls
over the replayed probes).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from picocontext import CancelToken, ModelResponse, PreparedPrompt, RunBudget
from picocontext.models import ByteCounter
from picocontext_diagnostics.bench.tool_calls import config_object
from picocontext_diagnostics.decision_probes import (
    DecisionProbe,
    decision_config,
    read_probes,
    run_decision_probe,
)
from picocontext_diagnostics.errors import DiagnosticsError

# Bytes per token of the replay's counter: the probe runs count real tokens, about four bytes.
BYTES_PER_TOKEN = 4
MAX_BYTES = 50_000_000
# Decision settings newer than some recorded runs, with the value those runs behaved by: a
# run recorded before ``ask_settled`` existed asked every settled pair too, and read a JSON
# record as its text; one recorded before ``reuse_questions`` and ``guard_lines`` restated
# every record and let every answer decide alone; one recorded before ``reuse_within`` and
# ``reuse_answers`` restated a record saying nothing beyond another and asked every pair its
# values had decided already.
ASKED_BEFORE: dict[str, Any] = {
    "ask_settled": True,
    "json_members": False,
    "reuse_questions": False,
    "guard_lines": False,
    "reuse_within": False,
    "reuse_answers": False,
}


class ReplayError(DiagnosticsError):
    """A rows file that cannot be replayed; the message is one line."""


class Unrecorded(Exception):
    """The decision asked something the recorded run never asked, or more than it did."""


def _key(prompt: PreparedPrompt) -> tuple[str, str | None, str | None]:
    # Within one probe the history is the same for every decision call; what tells the calls
    # apart is the trailing question and the shape its answer is held to.
    got = prompt.input
    return (got.phase.value, got.guidance, got.answer_schema_json)


@dataclass
class InOrder:
    """The recorded replies in call order; remembers which prompt got which reply."""

    replies: Sequence[str]
    asked: dict[tuple[str, str | None, str | None], str] = field(default_factory=dict)
    position: int = 0
    # Set when one prompt got two different replies: greedy decoding cannot do that, so the
    # record does not belong to this code (or the key does not tell these prompts apart).
    conflict: bool = False

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        if self.position >= len(self.replies):
            raise Unrecorded("more calls than the recorded run made")
        reply = self.replies[self.position]
        self.position += 1
        key = _key(prompt)
        self.conflict = self.conflict or self.asked.get(key, reply) != reply
        self.asked[key] = reply
        return ModelResponse(text=reply, generated_tokens=0, prefill_tokens=0)


@dataclass
class LookedUp:
    """Replies by prompt, from an :class:`InOrder` replay."""

    asked: Mapping[tuple[str, str | None, str | None], str]

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        reply = self.asked.get(_key(prompt))
        if reply is None:
            raise Unrecorded("a prompt the model was never asked")
        return ModelResponse(text=reply, generated_tokens=0, prefill_tokens=0)


@dataclass(frozen=True)
class Replayed:
    """One probe: the recorded run replayed and the variant, or why it cannot be judged."""

    probe: str
    kind: str | None
    before: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None
    unevaluable: str | None = None


def _same(row: Mapping[str, Any], replayed: Mapping[str, Any]) -> bool:
    """The replay did what the recorded run did: the same outcome and calls, and where the
    row records them, the same failure, validity and reasons for each pair (which name each
    question asked, so a reply handed to another prompt than in the run shows here)."""
    keys = ("exact", "deleted", "replaced", "added", "decision_calls")
    optional = ("failure", "valid", "choices")
    return all(row.get(k) == replayed.get(k) for k in keys) and all(
        row[k] == replayed.get(k) for k in optional if k in row
    )


def _budget() -> RunBudget:
    return RunBudget(edit_output_tokens=128).scaled(BYTES_PER_TOKEN)


def replay_row(
    probe: DecisionProbe,
    row: Mapping[str, Any],
    recorded: Mapping[str, Any],
    variant: Mapping[str, Any],
) -> Replayed:
    """Replay one probe's recorded replies under ``recorded`` (the run's config), then judge
    ``variant`` on them."""
    kind = probe.kind
    replies = row.get("replies")
    if not isinstance(replies, list) or not all(isinstance(r, str) for r in replies):
        return Replayed(probe.id, kind, unevaluable="the row has no whole replies")
    in_order = InOrder(replies)
    try:
        before = run_decision_probe(probe, ByteCounter(), in_order, recorded, _budget())
    except Unrecorded as exc:
        return Replayed(probe.id, kind, unevaluable=f"the recorded run does not replay: {exc}")
    if in_order.position != len(replies) or in_order.conflict or not _same(row, before):
        return Replayed(probe.id, kind, unevaluable="the replay differs from the recorded run")
    try:
        after = run_decision_probe(
            probe, ByteCounter(), LookedUp(in_order.asked), variant, _budget()
        )
    except Unrecorded as exc:
        return Replayed(probe.id, kind, before=before, unevaluable=f"the variant asks {exc}")
    return Replayed(probe.id, kind, before=before, after=after)


def load_rows(path: Path) -> tuple[list[Mapping[str, Any]], dict[str, Any], list[str]]:
    """The decision rows of a tool-calls bench report, its config and its probe files."""
    try:
        if path.stat().st_size > MAX_BYTES:
            raise ReplayError(f"{path}: larger than {MAX_BYTES:,} bytes")
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except (ValueError, RecursionError) as exc:
        raise ReplayError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ReplayError(f"{path}: not a tool-calls bench report (no rows)")
    rows: list[Mapping[str, Any]] = [
        r for r in data["rows"] if isinstance(r, dict) and r.get("judged") == "outcome"
    ]
    if not rows:
        raise ReplayError(f"{path}: no decision probe rows to replay")
    config = data.get("decision_config")
    files = data.get("probe_files")
    if not isinstance(config, dict) or not isinstance(files, list):
        raise ReplayError(f"{path}: the report names no decision_config or probe_files")
    # Settings added after a run was recorded take the value that asks what it asked.
    return rows, {**ASKED_BEFORE, **config}, [str(f) for f in files]


def replay(
    rows: Sequence[Mapping[str, Any]],
    probes: Mapping[str, DecisionProbe],
    recorded: Mapping[str, Any],
    change: Mapping[str, Any],
) -> list[Replayed]:
    """Every row replayed under ``recorded`` and judged under ``recorded`` plus ``change``."""
    variant = decision_config({**recorded, **change})
    for name, config in (("recorded", recorded), ("variant", variant)):
        if config.get("decision") != "incremental":
            raise ReplayError(
                f"the {name} config's decision is {config.get('decision')!r}: only the "
                "incremental decision's replies can be replayed (short text replies, one per "
                "trailing question); record the probes with --decision incremental"
            )
        if config.get("none_margin") is not None:
            raise ReplayError(
                f"the {name} config sets none_margin: weighing 'none' needs the model's "
                "probabilities, which a probe run does not record"
            )
    out = []
    for row in rows:
        probe = probes.get(str(row.get("id")))
        if probe is None:
            out.append(Replayed(str(row.get("id")), None, unevaluable="no such probe in the files"))
            continue
        out.append(replay_row(probe, row, recorded, variant))
    return out


def summary(results: Sequence[Replayed], change: Mapping[str, Any]) -> dict[str, Any]:
    judged = [r for r in results if r.after is not None and r.before is not None]
    return {
        "benchmark": "decision-replay",
        "rows": len(results),
        "replayed": len(judged),
        "unevaluable": len(results) - len(judged),
        "exact_before": sum(bool(r.before and r.before["exact"]) for r in judged),
        "exact_after": sum(bool(r.after and r.after["exact"]) for r in judged),
        "calls_before": sum(int(r.before["decision_calls"]) for r in judged if r.before),
        "calls_after": sum(int(r.after["decision_calls"]) for r in judged if r.after),
        "config": dict(change),
    }


def _line(result: Replayed) -> str | None:
    if result.unevaluable is not None:
        return f"  {result.probe:<24} unevaluable: {result.unevaluable}"
    before, after = result.before, result.after
    assert before is not None and after is not None
    if before["exact"] == after["exact"] and before["decision_calls"] == after["decision_calls"]:
        return None
    return (
        f"  {result.probe:<24} {result.kind or '-':<14} exact {before['exact']!s:<5} -> "
        f"{after['exact']!s:<5} calls {before['decision_calls']} -> {after['decision_calls']}"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench.sh decision-replay",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("rows", type=Path, help="a tool-calls bench report (its --output)")
    parser.add_argument(
        "--config",
        type=config_object,
        default={},
        metavar="JSON",
        help="the change to the recorded editable config, e.g. '{\"pairs\": 1}'",
    )
    parser.add_argument(
        "--probes",
        action="append",
        type=Path,
        metavar="FILE",
        default=None,
        help="a probe file, repeatable (default: the ones the report names)",
    )
    parser.add_argument(
        "--output", type=Path, default=Path("out/bench/decision_replay.json"), metavar="PATH"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        rows, recorded, files = load_rows(args.rows)
        probes: dict[str, DecisionProbe] = {}
        for name in args.probes or [Path(f) for f in files]:
            probes.update((p.id, p) for p in read_probes(name))
        results = replay(rows, probes, recorded, args.config)
    except DiagnosticsError as exc:
        print(f"bench.sh decision-replay: {exc.message}", file=sys.stderr)
        return 2
    for result in results:
        line = _line(result)
        if line is not None:
            print(line)
    result_line = summary(results, args.config)
    rows = [
        {
            "id": r.probe,
            "kind": r.kind,
            "unevaluable": r.unevaluable,
            "before": _brief(r.before),
            "after": _brief(r.after),
        }
        for r in results
    ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps({**result_line, "probes": rows}, indent=2) + "\n", encoding="utf-8"
    )
    print(json.dumps(result_line))
    return 0


def _brief(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a replayed probe row says about the outcome (its replies stay in the record)."""
    if row is None:
        return None
    keys = ("exact", "deleted", "replaced", "decision_calls", "choices")
    return {k: row.get(k) for k in keys}


if __name__ == "__main__":
    raise SystemExit(main())
