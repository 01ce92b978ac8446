"""``scripts/bench.sh tool-calls``: can a model make the protocol's calls, free or constrained?

The built-in probes (``resources/fixtures/tool_call_probes.json``, our own prompts) cover tool
choice, argument copying, stale-record deletion by id (the ``edit_context`` call), keep when
nothing is stale, navigation verb choice over a small archive index, and distill verb choice
over a digest map. Each is a :class:`picocontext.ModelInput` rendered by the model's own chat
template exactly as the policies' calls are (tool probes in the ``tools`` phase with their
tool specs, decision probes in the ``edit`` phase), generated greedily, one call per probe.

Decision probes files (``--probes FILE``; by default the project's own
``resources/probes/decisions.json`` after the built-in probes) are judged by **outcome**
instead (:mod:`picocontext_diagnostics.decision_probes`): the editable policy's real decision
runs through :class:`picocontext.ContextSession` over the probe's snapshot, whatever decision
protocol the core uses, and the probe is right iff the records it deleted or replaced are
exactly the probe's ``stale`` ids.

Per probe: *valid* = exactly one call to an offered tool whose arguments satisfy that tool's
JSON schema (decisions: the core's own decoders accept it; outcome probes: the core accepted
every decision call), not clipped by the output cap; *right tool* = valid and the expected
tool (outcome probes: edited iff something is stale); *right args* = right tool and the
expected values (exact; a stale-record probe needs exactly the stale ids deleted). The last
line printed is one JSON object: model, decoding, n, valid_rate, right_tool_rate,
right_args_rate, seconds_per_call (plus generated tokens per call, the rates per probe kind),
and for the outcome-judged probes ``decision_exact_rate`` with its breakdowns.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from picocontext import (
    EDIT_TOOL,
    KEEP_TOOL,
    ModelInput,
    ModelResponse,
    Phase,
    PicoContextError,
    Record,
    Role,
    RunBudget,
    Scope,
    Snapshot,
    ToolSpec,
    decode_edit_payload,
    decode_keep_payload,
    tools_json,
)
from picocontext_diagnostics.decision_probes import (
    DEFAULT_PROBES_FILE,
    SCHEMA_FILENAME,
    DecisionProbe,
    decision_config,
    default_probes_path,
    read_probes,
    run_decision_probe,
    summarize_decisions,
)
from picocontext_diagnostics.episodes.fixtures import load_fixture
from picocontext_diagnostics.errors import DiagnosticsError

PROBES_FILE = "tool_call_probes.json"
SCOPE = Scope(user_id="bench", conversation_id="tool-calls", branch_id="main")
Kind = Literal["tool_choice", "argument_copy", "stale_delete", "keep", "navigation", "distill"]
DECISION_KINDS = ("stale_delete", "keep")

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ToolSet(BaseModel):
    model_config = _FROZEN
    system: str
    guidance: str
    tools: tuple[ToolSpec, ...] = Field(min_length=1)


class ProbeRecord(BaseModel):
    model_config = _FROZEN
    id: str
    role: Role
    body: str
    protected: bool = False


class Expect(BaseModel):
    model_config = _FROZEN
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    contains: dict[str, str] = Field(default_factory=dict)
    delete: tuple[str, ...] = ()


class Probe(BaseModel):
    model_config = _FROZEN
    id: str
    kind: Kind
    tool_set: str | None = None
    request: str | None = None
    index: str | None = None
    records: tuple[ProbeRecord, ...] = ()
    expect: Expect


class ProbeSet(BaseModel):
    model_config = _FROZEN
    title: str
    tool_sets: dict[str, ToolSet]
    decision_guidance: str
    probes: tuple[Probe, ...] = Field(min_length=1)


def load_probes() -> ProbeSet:
    return load_fixture(PROBES_FILE, ProbeSet)


# -- rendering ------------------------------------------------------------------------------
def probe_input(probes: ProbeSet, probe: Probe) -> ModelInput:
    """The exact model input of one probe (what the model's template renders)."""
    if probe.kind in DECISION_KINDS:
        snapshot = Snapshot(
            scope=SCOPE, revision=1, records=tuple(Record(**r.model_dump()) for r in probe.records)
        )
        guidance = probes.decision_guidance.replace("{revision}", str(snapshot.revision)).replace(
            "{editable}", ", ".join(snapshot.unprotected_ids) or "none"
        )
        return ModelInput(context=snapshot, phase=Phase.EDIT, guidance=guidance)
    tool_set = probes.tool_sets[str(probe.tool_set)]
    records = []
    if probe.index is not None:
        records.append(Record(id="index", role=Role.USER, protected=True, body=probe.index))
    records.append(Record(id="request", role=Role.USER, protected=True, body=str(probe.request)))
    return ModelInput(
        context=Snapshot(scope=SCOPE, records=tuple(records)),
        phase=Phase.TOOLS,
        tools_json=tools_json(tool_set.tools),
        system_text=tool_set.system,
        guidance=tool_set.guidance,
    )


# -- judging --------------------------------------------------------------------------------
def _schema_valid(arguments: Any, schema: dict[str, Any]) -> bool:
    """An independent check of the arguments against the tool's schema (not llguidance)."""
    import importlib

    jsonschema: Any = importlib.import_module("jsonschema")
    try:
        jsonschema.validate(arguments, schema or {"type": "object"})
    except jsonschema.ValidationError:
        return False
    return True


def judge_tool(model_input: ModelInput, response: ModelResponse, expect: Expect) -> dict[str, bool]:
    """valid / right_tool / right_args of one tool-phase reply."""
    offered = {t["function"]["name"]: t["function"] for t in model_input.tools or []}
    if len(response.tool_calls) != 1 or response.reached_token_limit:
        return {"valid": False, "right_tool": False, "right_args": False}
    call = response.tool_calls[0]
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        arguments = None
    spec = offered.get(call.name)
    valid = (
        spec is not None
        and isinstance(arguments, dict)
        and _schema_valid(arguments, spec.get("parameters") or {})
    )
    right_tool = valid and call.name == expect.tool
    right_args = right_tool and isinstance(arguments, dict) and _args_match(arguments, expect)
    return {"valid": valid, "right_tool": right_tool, "right_args": right_args}


def _args_match(arguments: dict[str, Any], expect: Expect) -> bool:
    for key, value in expect.arguments.items():
        if key not in arguments or arguments[key] != value:
            return False
    for key, part in expect.contains.items():
        if part.lower() not in str(arguments.get(key, "")).lower():
            return False
    return True


def judge_decision(snapshot: Snapshot, response: ModelResponse, expect: Expect) -> dict[str, bool]:
    """valid / right_tool / right_args of one decision reply (the core's decoders judge)."""
    none = {"valid": False, "right_tool": False, "right_args": False}
    if len(response.tool_calls) != 1 or response.reached_token_limit:
        return none
    call = response.tool_calls[0]
    try:
        if call.name == KEEP_TOOL:
            decode_keep_payload(call.arguments, snapshot.revision)
            right = expect.tool == KEEP_TOOL
            return {"valid": True, "right_tool": right, "right_args": right}
        if call.name != EDIT_TOOL:
            return none
        edit = decode_edit_payload(call.arguments, snapshot.scope)
    except PicoContextError:
        return none
    right_tool = expect.tool == EDIT_TOOL
    deleted = [op.record_id for op in edit.operations if op.action == "delete"]
    exact = len(deleted) == len(edit.operations) and set(deleted) == set(expect.delete)
    return {"valid": True, "right_tool": right_tool, "right_args": right_tool and exact}


# -- running --------------------------------------------------------------------------------
def run_probe(model: Any, probes: ProbeSet, probe: Probe, max_tokens: int) -> dict[str, Any]:
    model_input = probe_input(probes, probe)
    prompt = model.prepare(model_input)
    started = time.perf_counter()
    response = model.generate(prompt, max_tokens)
    seconds = time.perf_counter() - started
    if probe.kind in DECISION_KINDS:
        verdict = judge_decision(model_input.context, response, probe.expect)
    else:
        verdict = judge_tool(model_input, response, probe.expect)
    return {
        "id": probe.id,
        "kind": probe.kind,
        **verdict,
        "prompt_tokens": prompt.token_count,
        "generated_tokens": response.generated_tokens,
        "clipped": response.reached_token_limit,
        "seconds": round(seconds, 3),
        "calls": [c.model_dump() for c in response.tool_calls],
        "text": response.text[:300],
    }


def _rate(rows: Sequence[dict[str, Any]], key: str) -> float:
    return round(sum(bool(r[key]) for r in rows) / len(rows), 3) if rows else 0.0


def _group(row: dict[str, Any]) -> str:
    """The ``right_args_by_kind`` key of a row: outcome-judged probes count as ``decision``
    (their own labels get ``decision_exact_by_kind``), so a user's label never mixes with a
    built-in kind."""
    return "decision" if row.get("judged") == "outcome" else str(row["kind"])


def summarize(rows: Sequence[dict[str, Any]], model: str, decoding: str) -> dict[str, Any]:
    n = len(rows)
    kinds = dict.fromkeys(_group(r) for r in rows)
    return {
        "benchmark": "tool-calls",
        "model": model,
        "decoding": decoding,
        "n": n,
        "valid_rate": _rate(rows, "valid"),
        "right_tool_rate": _rate(rows, "right_tool"),
        "right_args_rate": _rate(rows, "right_args"),
        "seconds_per_call": round(sum(r["seconds"] for r in rows) / n, 3) if n else 0.0,
        "generated_tokens_per_call": round(sum(r["generated_tokens"] for r in rows) / n, 1)
        if n
        else 0.0,
        "right_args_by_kind": {
            kind: _rate([r for r in rows if _group(r) == kind], "right_args") for kind in kinds
        },
        **summarize_decisions(rows),
    }


@dataclass(frozen=True)
class Plan:
    """What one bench run will do: built-in probes, then the decision probes of each file,
    cut to ``--limit`` in that order. Built before any model loads, so a bad probe file
    fails in milliseconds."""

    tool_set: ProbeSet | None
    tool_probes: tuple[Probe, ...]
    decision_probes: tuple[DecisionProbe, ...]
    files: tuple[str, ...]
    config: dict[str, Any]


def plan_run(args: argparse.Namespace) -> Plan:
    files = [Path(f) for f in args.probes] if args.probes else [default_probes_path()]
    tool_set = None if args.probes else load_probes()
    builtin = tool_set.probes if tool_set is not None else ()
    decisions: list[DecisionProbe] = []
    for path in files:
        decisions.extend(read_probes(path))
    if args.limit is not None:
        builtin = builtin[: args.limit]
        decisions = decisions[: max(args.limit - len(builtin), 0)]
    wanted = dict(args.config)
    if args.decision:
        wanted["decision"] = args.decision
    config = decision_config(wanted or None)
    return Plan(tool_set, tuple(builtin), tuple(decisions), tuple(str(f) for f in files), config)


def config_object(text: str) -> dict[str, Any]:
    """``--config``: a JSON object (the policy validates its keys and values)."""
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError("--config must be a JSON object") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--config must be a JSON object")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench.sh tool-calls",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", default=None, help="a known model name (default model)")
    parser.add_argument("--model-dir", default=None, help="a local MLX model directory")
    parser.add_argument("--engine", default=None, help="mlx or llamacpp (default: the platform's)")
    parser.add_argument(
        "--decoding",
        choices=("free", "constrained"),
        default=None,
        help="default: the model's default (constrained for embedded models)",
    )
    parser.add_argument(
        "--probes",
        action="append",
        metavar="FILE",
        default=None,
        help="a decision probe file (resources/schemas/" + SCHEMA_FILENAME + "); repeatable. "
        "Runs only these, judged by outcome. Default: the built-in probes, then "
        "resources/probes/" + DEFAULT_PROBES_FILE,
    )
    parser.add_argument(
        "--decision",
        default=None,
        metavar="PROTOCOL",
        help="the editable policy's decision protocol (its config 'decision'; default: the "
        "policy's default)",
    )
    parser.add_argument(
        "--config",
        type=config_object,
        default={},
        metavar="JSON",
        help="more of the editable policy's config as a JSON object, e.g. "
        '\'{"candidates": "all", "none_margin": 0.5}\' (--decision wins over its "decision")',
    )
    parser.add_argument(
        "--check", action="store_true", help="validate the probe files and exit (no model)"
    )
    parser.add_argument("--limit", type=int, default=None, help="run only the first N probes")
    parser.add_argument("--max-tokens", type=int, default=128, help="output cap per call")
    parser.add_argument("--output", type=Path, default=Path("out/bench/tool_calls.json"))
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    return args


def _show_tool(row: dict[str, Any]) -> str:
    return (
        f"  {row['id']:<18} valid={row['valid']!s:<5} tool={row['right_tool']!s:<5} "
        f"args={row['right_args']!s:<5} {row['seconds']:6.2f}s {row['text'][:70]!r}"
    )


def _show_decision(row: dict[str, Any]) -> str:
    changed = ",".join(row["deleted"] + row["replaced"] + row["added"]) or "-"
    stale = ",".join(row["stale"]) or "-"
    return (
        f"  {row['id']:<24} exact={row['exact']!s:<5} changed={changed:<14} stale={stale:<14} "
        f"calls={row['decision_calls']} {row['seconds']:6.2f}s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        run_plan = plan_run(args)
        if args.check:
            for name in run_plan.files:
                print(f"{name}: ok")
            print(f"{len(run_plan.decision_probes)} decision probes ok")
            return 0
        return _run(args, run_plan)
    except DiagnosticsError as exc:
        print(f"bench.sh tool-calls: {exc.message}", file=sys.stderr)
        return 2
    except PicoContextError as exc:
        print(f"bench.sh tool-calls: {exc.message}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, run_plan: Plan) -> int:
    from picocontext.models import load_model

    constrained = None if args.decoding is None else args.decoding == "constrained"
    extra: dict[str, Any] = {"engine": args.engine} if args.engine else {}
    model = load_model(
        args.model,
        model_dir=args.model_dir,
        prefix_cache=True,
        constrained=constrained,
        log=print,
        **extra,
    )
    try:
        rows = []
        for probe in run_plan.tool_probes:
            assert run_plan.tool_set is not None  # tool probes come from the built-in set
            row = run_probe(model, run_plan.tool_set, probe, args.max_tokens)
            rows.append(row)
            print(_show_tool(row), flush=True)
        budget = RunBudget(edit_output_tokens=args.max_tokens)
        for decision in run_plan.decision_probes:
            row = run_decision_probe(decision, model, model, run_plan.config, budget)
            rows.append(row)
            print(_show_decision(row), flush=True)
        summary = summarize(rows, model.model_id, model.decoding)
        summary["decision_config"] = run_plan.config
        summary["probe_files"] = list(run_plan.files)
        description = model.describe()
    finally:
        model.close()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    report = {**summary, "environment": description, "rows": rows}
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
