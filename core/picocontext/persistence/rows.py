"""The SQLite store's row codec, and the delta between two working revisions.

Every value read from the file is checked before it is used: bad JSON, a missing key, an
unknown role, a number that is not an integer or a range outside the transcript raise
:class:`~picocontext.errors.StorageError` naming the row (:func:`corrupt`), never a raw
decoding error. :func:`delta_between` says how one revision's records become the next one's
(drops, replaced bodies, an appended transcript tail), or that only a checkpoint can.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from picocontext.errors import StorageError
from picocontext.records import Record, Role, Scope, ToolCall

# A change touching more records than this is stored as a checkpoint, which is no larger.
MAX_DELTA_ITEMS = 256

_ROLES = {role.value: role for role in Role}


def scope_key(scope: Scope) -> str:
    return json.dumps([scope.user_id, scope.conversation_id, scope.branch_id])


def body_hash(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def row_checksum(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def record_meta(record: Record, body_field: str, body_value: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": record.id,
        "role": record.role.value,
        body_field: body_value,
        "protected": record.protected,
    }
    if record.tool_calls:
        meta["calls"] = [[c.id, c.name, c.arguments] for c in record.tool_calls]
    if record.tool_call_id is not None:
        meta["result_for"] = record.tool_call_id
    return meta


def corrupt(where: str, reason: str) -> StorageError:
    return StorageError(
        f"The session store has a corrupt row ({where}): {reason}. Nothing was loaded; "
        "restore the store from a backup or start a new one."
    )


def parse_json(text: object, where: str) -> Any:
    if not isinstance(text, str):
        raise corrupt(where, f"expected JSON text, found {type(text).__name__}")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise corrupt(where, f"bad JSON ({exc})") from None
    except RecursionError:
        raise corrupt(where, "JSON nested too deeply") from None


def as_int(value: object, where: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise corrupt(where, f"{what} is not an integer ({str(value)[:40]!r})")
    return value


def as_number(value: object, where: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise corrupt(where, f"{what} is not a number ({str(value)[:40]!r})")
    return float(value)


def as_text(value: object, where: str, what: str) -> str:
    if not isinstance(value, str):
        raise corrupt(where, f"{what} is not text ({str(value)[:40]!r})")
    return value


def field(meta: dict[str, Any], key: str, where: str) -> Any:
    if key not in meta:
        raise corrupt(where, f"missing key {key!r}")
    return meta[key]


def parse_calls(value: object, where: str) -> tuple[ToolCall, ...]:
    if not isinstance(value, list):
        raise corrupt(where, "tool calls are not a list")
    calls = []
    for call in value:
        if not (
            isinstance(call, list) and len(call) == 3 and all(isinstance(x, str) for x in call)
        ):
            raise corrupt(where, "a tool call is not [id, name, arguments]")
        calls.append(ToolCall.model_construct(id=call[0], name=call[1], arguments=call[2]))
    return tuple(calls)


def parse_record(meta: object, body: str, where: str) -> Record:
    if not isinstance(meta, dict):
        raise corrupt(where, "a record is not a JSON object")
    role = field(meta, "role", where)
    if not isinstance(role, str) or role not in _ROLES:
        raise corrupt(where, f"unknown role {str(role)[:40]!r}")
    protected = field(meta, "protected", where)
    if not isinstance(protected, bool):
        raise corrupt(where, "protected is not true or false")
    result_for = meta.get("result_for")
    if result_for is not None:
        as_text(result_for, where, "result_for")
    return Record.model_construct(
        id=as_text(field(meta, "id", where), where, "id"),
        role=_ROLES[role],
        body=body,
        protected=protected,
        tool_calls=parse_calls(meta.get("calls", []), where),
        tool_call_id=result_for,
    )


def same_links(a: Record, b: Record) -> bool:
    """Same id, role, protection and tool links: ``b`` is ``a`` with, at most, another body."""
    return (
        a.id == b.id
        and a.role is b.role
        and a.protected == b.protected
        and a.tool_calls == b.tool_calls
        and a.tool_call_id == b.tool_call_id
    )


def parse_span(value: object, limit: int, where: str) -> tuple[int, int]:
    """A [start, end) range of transcript positions inside ``limit`` records."""
    if not (isinstance(value, list) and len(value) == 2):
        raise corrupt(where, "a position range is not [start, end]")
    start, end = as_int(value[0], where, "start"), as_int(value[1], where, "end")
    if not 0 <= start <= end <= limit:
        raise corrupt(where, f"positions {start}..{end} are outside the transcript")
    return start, end


@dataclass(frozen=True, slots=True)
class Head:
    """What this store object last wrote or read for a scope, so the next save can be a
    delta against it instead of a full description."""

    revision: int
    committed_at: float
    base: int
    records: tuple[Record, ...]


@dataclass(frozen=True, slots=True)
class Transcript:
    """The transcript records this store object has read or written for a scope, and the
    checksum of its last row: the transcript is append-only, so a later read only fetches
    the rows after it, once that last row is found unchanged."""

    records: tuple[Record, ...]
    last_checksum: str


@dataclass(frozen=True, slots=True)
class Change:
    """One revision's transaction against the revision before it."""

    drops: list[str]
    replaced: list[Record]
    added: tuple[int, int] | None
    tombstones: list[str]


def walk(
    old: Sequence[Record], new: Sequence[Record]
) -> tuple[list[str], list[Record], Sequence[Record]] | None:
    """Drops, body replacements and the appended tail that turn ``old`` into ``new``."""
    if len(new) >= len(old) and tuple(new[: len(old)]) == tuple(old):
        return [], [], new[len(old) :]  # an append: compared in C, identical objects first
    drops: list[str] = []
    replaced: list[Record] = []
    i = 0
    for j, record in enumerate(new):
        while i < len(old) and old[i].id != record.id:
            drops.append(old[i].id)
            i += 1
        if i == len(old):
            return drops, replaced, new[j:]
        before = old[i]
        i += 1
        if before is record:
            continue
        if not same_links(before, record):
            return None
        if before.body != record.body:
            replaced.append(record)
    drops.extend(r.id for r in old[i:])
    return drops, replaced, ()


def delta_between(
    old: Sequence[Record], new: Sequence[Record], transcript: Sequence[Record]
) -> Change | None:
    """The delta from ``old`` to ``new``, or None when only a checkpoint can say it."""
    walked = walk(old, new)
    if walked is None:
        return None
    drops, replaced, tail = walked
    if len(drops) + len(replaced) > MAX_DELTA_ITEMS:
        return None
    added = None
    if tail:
        start = len(transcript) - len(tail)
        if start < 0 or tuple(transcript[start:]) != tuple(tail):
            return None
        added = (start, len(transcript))
    live = {r.id for r in tail}
    return Change(drops, replaced, added, [d for d in drops if d not in live])


def transcript_record(
    record_id: object, text: object, checksum: object, where: str
) -> tuple[Record, str]:
    """One transcript row as a record, and the checksum of its text."""
    meta = parse_json(text, where)
    digest = row_checksum(str(text))
    if checksum is not None and digest != checksum:
        raise corrupt(where, "its checksum does not match: the row was changed")
    if not isinstance(meta, dict):
        raise corrupt(where, "a record is not a JSON object")
    record = parse_record(meta, as_text(field(meta, "body", where), where, "body"), where)
    if record.id != record_id:
        raise corrupt(where, f"record_id {str(record_id)[:40]!r} is not the record's id")
    return record, digest


def check_working_in_transcript(
    scope: Scope, transcript: Sequence[Record], working: Sequence[Record]
) -> None:
    """Every working record is a transcript record (same id and links, maybe another body)."""
    by_id = {r.id: r for r in transcript}
    for record in working:
        source = by_id.get(record.id)
        if source is None or not same_links(source, record):
            raise StorageError(
                f"The stored working revision of {scope} holds record {record.id!r}, which the "
                "stored transcript does not: the transcript lost a record. Nothing was loaded; "
                "restore the store from a backup or start a new one."
            )
