"""Bring-your-own decision probes: the file format, its strict loader, and judging by outcome.

A probe file is a JSON array of probes ``{"id", "kind"?, "note"?, "records": [...],
"stale": [ids]}``; each record is ``{"id", "role", "body", "protected"?, "tool_calls"?,
"tool_call_id"?}`` (the core's :class:`picocontext.Record` fields). ``stale`` names the
records a good decision removes or rewrites; ``[]`` means nothing is stale. The JSON Schema
``resources/schemas/decision-probes-1.schema.json`` is generated from the models here
(:func:`generate_schema`; a test keeps the shipped file equal to it). What a schema cannot
say is checked by the loader: unique probe ids, unique record ids per probe, stale ids that
are records, never protected, and whole tool groups (a decision removes an assistant call
and its results together), and a history the core accepts as a snapshot. Every problem is a
:class:`ProbeFileError` whose one-line message names the file and the probe.

Judging is by **outcome**, so it does not depend on how the core's decision protocol asks
the model: the probe's records become a :class:`picocontext.Snapshot` (protected records
stay protected), the registered ``editable`` policy runs one turn through
:class:`picocontext.ContextSession` with only its decision calls reaching the model (the
answer call is answered empty by :class:`DecisionOnly`), and the records the decision
deleted or replaced are read off the snapshot before and after. A probe is right iff that set
equals ``stale`` and nothing was added.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from picocontext import (
    CancelToken,
    ContextSession,
    InputFileError,
    ModelBackend,
    ModelResponse,
    Outcome,
    Phase,
    PicoContextError,
    PreparedPrompt,
    Record,
    Role,
    RunBudget,
    RunReport,
    Scope,
    Snapshot,
    TokenCounter,
    read_text_bounded,
    strict_loads,
    validate_snapshot,
)
from picocontext.policies import PolicyError, policy_registry
from picocontext_diagnostics.errors import DiagnosticsError

SCHEMA_FILENAME = "decision-probes-1.schema.json"
DEFAULT_PROBES_FILE = "decisions.json"
POLICY = "editable"
MAX_BYTES = 4_000_000
MAX_PROBES = 5_000
MAX_RECORDS = 256
MAX_BODY_CHARS = 20_000
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
SCOPE = Scope(user_id="bench", conversation_id="decision-probes", branch_id="main")
# Which expectation a probe has, for the breakdown every run reports (labels are optional).
STALE, KEEP = "stale", "keep"

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_ALWAYS_PROTECTED = (Role.SYSTEM, Role.DEVELOPER)


class ProbeFileError(DiagnosticsError):
    """A probe file that cannot be read or breaks the format; the message is one line."""


# -- the format ----------------------------------------------------------------------------
class ProbeToolCall(BaseModel):
    """One call of an assistant record; ``arguments`` is JSON-object text, as in the core."""

    model_config = _FROZEN
    id: str = Field(pattern=ID_PATTERN)
    name: str = Field(min_length=1, max_length=128)
    arguments: str = Field(default="{}", max_length=MAX_BODY_CHARS)


class ProbeRecord(BaseModel):
    """One history record (the fields of :class:`picocontext.Record`). ``system`` and
    ``developer`` records are always protected, as in the core."""

    model_config = _FROZEN
    id: str = Field(pattern=ID_PATTERN)
    role: Role
    body: str = Field(default="", max_length=MAX_BODY_CHARS)
    protected: bool = False
    tool_calls: tuple[ProbeToolCall, ...] = Field(default=(), max_length=16)
    tool_call_id: str | None = Field(default=None, pattern=ID_PATTERN)

    @property
    def is_protected(self) -> bool:
        return self.protected or self.role in _ALWAYS_PROTECTED

    def record(self) -> Record:
        return Record.model_validate(self.model_dump())


class DecisionProbe(BaseModel):
    """One decision probe. ``kind`` (optional) labels it for the per-kind breakdown;
    ``note`` (optional) says why the answer is what it is (never shown to the model)."""

    model_config = _FROZEN
    id: str = Field(pattern=ID_PATTERN)
    kind: str | None = Field(default=None, min_length=1, max_length=64)
    note: str | None = Field(default=None, max_length=2_000)
    records: tuple[ProbeRecord, ...] = Field(min_length=1, max_length=MAX_RECORDS)
    stale: tuple[str, ...] = Field(max_length=MAX_RECORDS)

    @property
    def expectation(self) -> str:
        return STALE if self.stale else KEEP

    def snapshot(self) -> Snapshot:
        """The history the decision sees: the records in order, protection as given."""
        return Snapshot(scope=SCOPE, records=tuple(r.record() for r in self.records))


_FILE = TypeAdapter(list[DecisionProbe])


def generate_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a probe file, generated from the models."""
    schema = _FILE.json_schema(mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://picocontext.invalid/schemas/" + SCHEMA_FILENAME,
        "title": "picocontext decision probes, version 1",
        "description": (
            "A JSON array of decision probes for `scripts/bench.sh tool-calls --probes FILE`. "
            "Checked by the loader, not expressible here: unique probe ids, unique record ids "
            "per probe, stale ids naming unprotected records of the probe, whole tool groups, "
            "and a history the core accepts (tool results follow their calls)."
        ),
        **schema,
        "minItems": 1,
        "maxItems": MAX_PROBES,
    }


# -- reading -------------------------------------------------------------------------------
def _one_line(text: str) -> str:
    return " ".join(text.split())


def _quoted(values: Sequence[str]) -> str:
    return ", ".join(repr(v) for v in values)


def parse_probes(text: str, source: str = "probes") -> tuple[DecisionProbe, ...]:
    """Validate JSON text as a probe file; any problem is one :class:`ProbeFileError` line
    that names ``source`` and, past the top level, the probe (by id, else by position)."""
    try:
        data = strict_loads(text)
    except json.JSONDecodeError as exc:
        raise ProbeFileError(
            f"{source}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise ProbeFileError(_one_line(f"{source}: not JSON ({exc})")) from None
    if not isinstance(data, list):
        raise ProbeFileError(
            f"{source}: a probe file is a JSON array of probes, not a JSON {_json_type(data)}"
        )
    if not data:
        raise ProbeFileError(f"{source}: the array holds no probes")
    if len(data) > MAX_PROBES:
        raise ProbeFileError(f"{source}: {len(data)} probes; at most {MAX_PROBES} per file")
    probes: list[DecisionProbe] = []
    first_at: dict[str, int] = {}
    for position, item in enumerate(data, start=1):
        probe = _parse_probe(item, f"{source}: {_name(item, position)}")
        if probe.id in first_at:
            raise ProbeFileError(
                f"{source}: {_name(item, position)}: duplicate probe id "
                f"(probe #{first_at[probe.id]} has it too)"
            )
        first_at[probe.id] = position
        probes.append(probe)
    return tuple(probes)


def read_probes(path: Path | str) -> tuple[DecisionProbe, ...]:
    """Read and validate a probe file (a regular UTF-8 file of at most :data:`MAX_BYTES`)."""
    try:
        text = read_text_bounded(path, MAX_BYTES)
    except InputFileError as exc:
        raise ProbeFileError(_one_line(exc.message)) from None
    return parse_probes(text, str(path))


def _json_type(value: object) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "null"


def _name(item: object, position: int) -> str:
    """How an error names a probe: its id when it has a usable one, and its position."""
    if isinstance(item, dict):
        probe_id = item.get("id")
        if isinstance(probe_id, str) and probe_id.strip():
            return f"probe {probe_id[:128]!r} (#{position})"
    return f"probe #{position}"


def _parse_probe(item: object, where: str) -> DecisionProbe:
    if not isinstance(item, dict):
        raise ProbeFileError(f"{where}: a probe is a JSON object, not a JSON {_json_type(item)}")
    records = item.get("records")
    if records is None or records == []:
        raise ProbeFileError(f"{where}: no records (a probe needs at least the task record)")
    if "stale" not in item:
        raise ProbeFileError(f"{where}: no 'stale' list (write [] when nothing is stale)")
    try:
        probe = DecisionProbe.model_validate(item)
    except ValidationError as exc:
        raise ProbeFileError(f"{where}: {_explain(exc, item)}") from None
    problem = probe_problem(probe)
    if problem is not None:
        raise ProbeFileError(f"{where}: {problem}")
    return probe


def _explain(error: ValidationError, item: dict[str, Any]) -> str:
    """The first problem, placed by record id where there is one (``record 'n2'.role``)."""
    first = error.errors()[0]
    loc = list(first["loc"])
    records = item.get("records")
    if len(loc) >= 2 and loc[0] == "records" and isinstance(loc[1], int):
        record = records[loc[1]] if isinstance(records, list) else None
        record_id = record.get("id") if isinstance(record, dict) else None
        if isinstance(record_id, str) and record_id:
            loc = [f"record {record_id[:128]!r}", *loc[2:]]
    place = ".".join(str(p) for p in loc) or "probe"
    message = _one_line(str(first["msg"]).removeprefix("Value error, "))
    more = error.error_count() - 1
    return f"{place}: {message}" + (f" (and {more} more)" if more > 0 else "")


def tool_groups(probe: DecisionProbe) -> dict[str, tuple[str, ...]]:
    """Each record id mapped to the ids a decision removes with it: an assistant record with
    tool calls together with its results, any other record alone."""
    groups: dict[str, tuple[str, ...]] = {}
    results: dict[str, str] = {}  # tool_call_id -> assistant record id
    members: dict[str, list[str]] = {}
    for record in probe.records:
        if record.tool_calls:
            members[record.id] = [record.id]
            for call in record.tool_calls:
                results[call.id] = record.id
        elif record.role is Role.TOOL and record.tool_call_id in results:
            members[results[str(record.tool_call_id)]].append(record.id)
        else:
            members[record.id] = [record.id]
    for ids in members.values():
        for record_id in ids:
            groups[record_id] = tuple(ids)
    return groups


def probe_problem(probe: DecisionProbe) -> str | None:
    """The first rule ``probe`` breaks beyond the schema, as a short sentence, else ``None``."""
    seen: set[str] = set()
    for record in probe.records:
        if record.id in seen:
            return f"duplicate record id {record.id!r}"
        seen.add(record.id)
    stale_seen: set[str] = set()
    for stale_id in probe.stale:
        if stale_id in stale_seen:
            return f"stale lists {stale_id!r} twice"
        stale_seen.add(stale_id)
    by_id = {r.id: r for r in probe.records}
    for stale_id in probe.stale:
        named = by_id.get(stale_id)
        if named is None:
            return (
                f"stale id {stale_id!r} is not a record of this probe "
                f"(its records: {_quoted(list(by_id)[:12])}{', …' if len(by_id) > 12 else ''})"
            )
        if named.is_protected:
            return (
                f"stale record {stale_id!r} is protected, so no decision can change it "
                "(unprotect it or drop it from stale)"
            )
    try:
        validate_snapshot(probe.snapshot())
    except PicoContextError as exc:
        return f"the records are not a valid history: {_one_line(exc.message)}"
    groups = tool_groups(probe)
    for stale_id in probe.stale:
        missing = [i for i in groups[stale_id] if i not in stale_seen]
        if missing:
            return (
                f"stale names {stale_id!r} but not {_quoted(missing)} of the same tool group "
                "(a decision removes a call and its results together)"
            )
    return None


def probes_dir() -> Path:
    """``resources/probes`` inside this package (a wheel) or next to it (a checkout)."""
    here = Path(__file__).resolve().parent
    for base in (here, here.parents[1]):
        candidate = base / "resources" / "probes"
        if candidate.is_dir():
            return candidate
    raise ProbeFileError("cannot find resources/probes next to picocontext_diagnostics")


def default_probes_path() -> Path:
    """The project's own decision probes, run by default."""
    return probes_dir() / DEFAULT_PROBES_FILE


# -- judging by outcome --------------------------------------------------------------------
@dataclass(frozen=True)
class Change:
    """What a decision did to the snapshot: ids in the order of the history before it."""

    deleted: tuple[str, ...]
    replaced: tuple[str, ...]
    added: tuple[str, ...]

    @property
    def touched(self) -> tuple[str, ...]:
        return self.deleted + self.replaced + self.added


def change_between(before: Snapshot, after: Snapshot) -> Change:
    """Diff two snapshots by record id: gone, different in any field, or new."""
    now = {r.id: r for r in after.records}
    earlier = {r.id for r in before.records}
    deleted = tuple(r.id for r in before.records if r.id not in now)
    replaced = tuple(r.id for r in before.records if r.id in now and now[r.id] != r)
    added = tuple(r.id for r in after.records if r.id not in earlier)
    return Change(deleted=deleted, replaced=replaced, added=added)


def is_exact(probe: DecisionProbe, change: Change) -> bool:
    """Right iff the changed records are exactly the stale ones and nothing was added."""
    return not change.added and set(change.deleted + change.replaced) == set(probe.stale)


@dataclass
class DecisionOnly:
    """A backend wrapper that lets only the decision reach the model: an answer call
    (``completion`` phase) is answered empty at no cost, since the probe judges the snapshot
    the decision left, not an answer. Counts what the decision calls cost."""

    backend: ModelBackend
    calls: int = 0
    prompt_tokens: int = 0
    prefill_tokens: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    clipped: bool = False
    texts: list[str] = field(default_factory=list)

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        if prompt.input.phase is Phase.COMPLETION:
            return ModelResponse(text="", generated_tokens=0, prefill_tokens=0)
        started = time.perf_counter()
        response = self.backend.generate(prompt, max_tokens, cancel)
        self.seconds += time.perf_counter() - started
        self.calls += 1
        self.prompt_tokens += prompt.token_count
        self.prefill_tokens += (
            prompt.token_count if response.prefill_tokens is None else response.prefill_tokens
        )
        self.generated_tokens += response.generated_tokens
        self.clipped = self.clipped or response.reached_token_limit
        self.texts.append(
            response.text or "; ".join(f"{c.name}({c.arguments})" for c in response.tool_calls)
        )
        return response


def decision_config(config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``editable`` policy's validated config (its defaults filled in), as JSON data;
    a bad config is a :class:`ProbeFileError`-style one-line :class:`DiagnosticsError`.
    A probe judges what the decision chooses, so chosen deletions apply at once
    (``apply_at`` 0) unless the config says otherwise."""
    try:
        wanted = {"apply_at": 0.0, **dict(config or {})}
        parsed = policy_registry().get(POLICY).parse_config(wanted)
    except PolicyError as exc:
        raise DiagnosticsError(_one_line(exc.message)) from None
    dumped: dict[str, Any] = parsed.model_dump(mode="json")
    return dumped


def _valid(report: RunReport) -> bool:
    """No failure, no rejected decision attempt, no refused choice (when the protocol has
    choices): whatever the protocol, the decision was legal as the core judged it."""
    if report.failure is not None:
        return False
    if any(a.outcome is Outcome.REJECTED for a in report.attempts):
        return False
    return all(bool(getattr(c, "valid", True)) for c in getattr(report, "choices", ()))


def run_decision_probe(
    probe: DecisionProbe,
    counter: TokenCounter,
    backend: ModelBackend,
    config: Mapping[str, Any] | None = None,
    budget: RunBudget | None = None,
) -> dict[str, Any]:
    """Run the editable policy's real decision over the probe's snapshot and judge the
    outcome; returns the bench row (the tool-call bench's keys plus the outcome's)."""
    wrapper = DecisionOnly(backend)
    config = decision_config(config)
    before = probe.snapshot()
    session = ContextSession(before, counter, wrapper)
    try:
        policy = policy_registry().create(POLICY, wrapper, dict(config or {}))
    except PolicyError as exc:
        raise DiagnosticsError(_one_line(exc.message)) from None
    started = time.perf_counter()
    try:
        report = policy.turn(session, budget or RunBudget())
    finally:
        policy.close()
    seconds = time.perf_counter() - started
    change = change_between(before, session.context)
    exact = is_exact(probe, change)
    touched = set(change.deleted + change.replaced)
    stale = set(probe.stale)
    return {
        "id": probe.id,
        "kind": probe.kind,
        "judged": "outcome",
        "expect": probe.expectation,
        "valid": _valid(report),
        "right_tool": bool(touched) == bool(stale),
        "right_args": exact,
        "exact": exact,
        "stale": list(probe.stale),
        "deleted": list(change.deleted),
        "replaced": list(change.replaced),
        "added": list(change.added),
        "extra": [i for i in before.ids if i in touched and i not in stale],
        "missed": [i for i in before.ids if i in stale and i not in touched],
        "failure": report.failure,
        "decision_calls": wrapper.calls,
        "prompt_tokens": wrapper.prompt_tokens,
        "prefill_tokens": wrapper.prefill_tokens,
        "generated_tokens": wrapper.generated_tokens,
        "clipped": wrapper.clipped,
        "seconds": round(seconds, 3),
        "calls": [],
        "text": " | ".join(wrapper.texts)[:300],
        # every reply in call order, whole: ``bench.sh decision-replay`` judges a changed
        # decision on them without the model
        "replies": list(wrapper.texts),
        # why each pair was judged as it was (the question judge names its question and the
        # words that decided), so a user can read a miss without rerunning it
        "choices": [c.detail for c in report.choices if c.detail],
    }


def _rate(rows: Sequence[Mapping[str, Any]]) -> float:
    return round(sum(bool(r["exact"]) for r in rows) / len(rows), 3) if rows else 0.0


def summarize_decisions(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The decision keys of the bench's summary line. ``decision_exact_rate`` is ``None``
    when no decision probe ran (for example under ``--limit``); the breakdown by kind
    appears only when a probe carries a kind label."""
    judged = [r for r in rows if r.get("judged") == "outcome"]
    n = len(judged)
    out: dict[str, Any] = {
        "decision_n": n,
        "decision_exact_rate": _rate(judged) if n else None,
        "decision_exact_by_expect": {
            expect: _rate([r for r in judged if r["expect"] == expect])
            for expect in (STALE, KEEP)
            if any(r["expect"] == expect for r in judged)
        },
        "decision_seconds_per_probe": round(sum(r["seconds"] for r in judged) / n, 3) if n else 0.0,
        "decision_calls_per_probe": round(sum(r["decision_calls"] for r in judged) / n, 2)
        if n
        else 0.0,
    }
    if any(r.get("kind") for r in judged):
        kinds = dict.fromkeys(str(r.get("kind") or "unlabeled") for r in judged)
        out["decision_exact_by_kind"] = {
            kind: _rate([r for r in judged if str(r.get("kind") or "unlabeled") == kind])
            for kind in kinds
        }
    return out
