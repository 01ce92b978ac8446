"""Scope, roles, tool-call links, records and snapshots — the editable-context data model.

These are frozen pydantic models so they can cross every boundary (stores, reports, the GUI)
without defensive copies. Python attribute names are snake_case; :func:`record_wire` gives the
reference wire shape (``isProtected``, ``toolCalls``, ``toolCallID``) where the model or a
size limit needs it.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Role(StrEnum):
    SYSTEM = "system"
    DEVELOPER = "developer"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


ALWAYS_PROTECTED = frozenset({Role.SYSTEM, Role.DEVELOPER})

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Scope(BaseModel):
    """Caller-owned separation key. The library never invents, merges or authenticates scopes."""

    model_config = _FROZEN

    user_id: str
    conversation_id: str
    branch_id: str

    @property
    def is_complete(self) -> bool:
        return bool(self.user_id and self.conversation_id and self.branch_id)

    def __str__(self) -> str:
        return f"{self.user_id}/{self.conversation_id}/{self.branch_id}"


class ToolCall(BaseModel):
    """One call made by an assistant record; ``arguments`` is the raw JSON-object text."""

    model_config = _FROZEN

    id: str
    name: str
    arguments: str = "{}"


class Record(BaseModel):
    """One message of the history. Only callers create records and choose their metadata."""

    model_config = _FROZEN

    id: str
    role: Role
    body: str = ""
    protected: bool = False
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _system_and_developer_are_protected(cls, data: Any) -> Any:
        # Instructions can never become editable, whatever the caller passes.
        if isinstance(data, dict):
            role = data.get("role")
            if role in ("system", "developer", Role.SYSTEM, Role.DEVELOPER):
                data = {**data, "protected": True}
        return data

    def with_body(self, body: str) -> Record:
        """Same id, role, protection and tool links; only the body changes."""
        return self.model_copy(update={"body": body})


class Snapshot(BaseModel):
    """A scope, an integer revision and the ordered records at that revision."""

    model_config = _FROZEN

    scope: Scope
    revision: int = 0
    records: tuple[Record, ...] = Field(default_factory=tuple)

    def record(self, record_id: str) -> Record | None:
        for record in self.records:
            if record.id == record_id:
                return record
        return None

    @property
    def ids(self) -> list[str]:
        return [r.id for r in self.records]

    @property
    def unprotected_ids(self) -> list[str]:
        return [r.id for r in self.records if not r.protected]


def record_wire(record: Record) -> dict[str, Any]:
    """The reference's JSON shape of a record (nil ``toolCallID`` omitted)."""
    out: dict[str, Any] = {
        "id": record.id,
        "role": record.role.value,
        "body": record.body,
        "isProtected": record.protected,
        "toolCalls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in record.tool_calls
        ],
    }
    if record.tool_call_id is not None:
        out["toolCallID"] = record.tool_call_id
    return out


def records_wire_json(records: tuple[Record, ...] | list[Record]) -> str:
    """Compact JSON of records in wire shape; used for the append payload size limit."""
    return json.dumps([record_wire(r) for r in records], ensure_ascii=False, separators=(",", ":"))
