"""Edit operations, append transactions and the decoders of model-owned tool payloads.

A model payload may carry only ``baseRevision`` and ``operations``; the scope always comes from
the caller. Decoders are strict (exact key sets, integer revisions, size caps) because the
payload is untrusted model output.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from picocontext.errors import InvalidContext, StaleRevision
from picocontext.records import Record, Scope
from picocontext.strictjson import strict_loads
from picocontext.textrules import utf8_len

EDIT_TOOL = "edit_context"
KEEP_TOOL = "keep_context"

MAX_EDIT_OPERATIONS = 32
MAX_BODY_BYTES = 64_000
MAX_EDIT_PAYLOAD_BYTES = 128_000
MAX_KEEP_PAYLOAD_BYTES = 1_024
MAX_APPEND_RECORDS = 64
MAX_APPEND_PAYLOAD_BYTES = 128_000
MAX_TOOL_CALLS_PER_GROUP = 31

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Replace(BaseModel):
    model_config = _FROZEN
    action: Literal["replace"] = "replace"
    record_id: str
    body: str


class Delete(BaseModel):
    model_config = _FROZEN
    action: Literal["delete"] = "delete"
    record_id: str


Operation = Replace | Delete


class Edit(BaseModel):
    """Replace/delete operations against one base revision of one scope."""

    model_config = _FROZEN
    scope: Scope
    base_revision: int
    operations: tuple[Operation, ...]


class AppendTransaction(BaseModel):
    """Caller-owned new records for one base revision of one scope."""

    model_config = _FROZEN
    scope: Scope
    base_revision: int
    records: tuple[Record, ...]


def _load_object(arguments: str, limit: int, reason: str) -> dict[str, Any]:
    if utf8_len(arguments) > limit:
        raise InvalidContext(reason)
    try:
        value = strict_loads(arguments)
    except (ValueError, RecursionError):
        raise InvalidContext(reason) from None
    if not isinstance(value, dict):
        raise InvalidContext(reason)
    return value


def _strict_int(value: Any) -> int:
    # bool is an int subclass in Python; JSON true must not pass as revision 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidContext("baseRevision must be a JSON integer")
    return value


def decode_edit_payload(arguments: str, scope: Scope) -> Edit:
    """Decode ``edit_context`` arguments into an :class:`Edit` under the caller's scope."""
    reason = "expected baseRevision integer and operations array"
    payload = _load_object(arguments, MAX_EDIT_PAYLOAD_BYTES, reason)
    if set(payload) != {"baseRevision", "operations"}:
        raise InvalidContext(reason)
    raw_ops = payload["operations"]
    if not isinstance(raw_ops, list) or not all(isinstance(op, dict) for op in raw_ops):
        raise InvalidContext(reason)
    base_revision = _strict_int(payload["baseRevision"])
    operations: list[Operation] = []
    for op in raw_ops:
        action = op.get("action")
        record_id = op.get("recordID")
        if not isinstance(action, str) or not isinstance(record_id, str):
            raise InvalidContext("operation needs action and recordID")
        if action == "replace":
            if set(op) != {"action", "recordID", "body"} or not isinstance(op["body"], str):
                raise InvalidContext("replace needs only action, recordID and body")
            operations.append(Replace(record_id=record_id, body=op["body"]))
        elif action == "delete":
            if set(op) != {"action", "recordID"}:
                raise InvalidContext("delete needs only action and recordID")
            operations.append(Delete(record_id=record_id))
        else:
            raise InvalidContext("unknown action")
    return Edit(scope=scope, base_revision=base_revision, operations=tuple(operations))


def decode_keep_payload(arguments: str, current_revision: int) -> int:
    """Validate ``keep_context`` arguments; returns the kept revision."""
    reason = "keep_context needs only baseRevision"
    payload = _load_object(arguments, MAX_KEEP_PAYLOAD_BYTES, reason)
    if set(payload) != {"baseRevision"}:
        raise InvalidContext(reason)
    revision = _strict_int(payload["baseRevision"])
    if revision != current_revision:
        raise StaleRevision(expected=current_revision, received=revision)
    return revision


def edit_payload(base_revision: int, operations: list[Operation] | tuple[Operation, ...]) -> str:
    """The wire JSON a model would send for these operations (used by tests and backends)."""
    ops: list[dict[str, str]] = []
    for op in operations:
        if isinstance(op, Replace):
            ops.append({"action": "replace", "recordID": op.record_id, "body": op.body})
        else:
            ops.append({"action": "delete", "recordID": op.record_id})
    return json.dumps({"baseRevision": base_revision, "operations": ops}, ensure_ascii=False)


def keep_payload(base_revision: int) -> str:
    return json.dumps({"baseRevision": base_revision})
