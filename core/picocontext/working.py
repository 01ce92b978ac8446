"""WorkingContext: the preserved transcript plus the editable working revision.

Pure value logic, no I/O. Every mutation returns a *new* WorkingContext or raises; the old one
is never touched, which is what makes commits atomic for the session and the stores.

An edit is validated by walking the whole candidate revision (:func:`validate_snapshot`). An
append is validated against an index of the transcript's record and tool-call ids instead,
with the same per-record rules in the same order, so appending to a long session costs the
size of the append, not of the session.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from picocontext.edits import (
    MAX_APPEND_PAYLOAD_BYTES,
    MAX_APPEND_RECORDS,
    MAX_BODY_BYTES,
    MAX_EDIT_OPERATIONS,
    MAX_TOOL_CALLS_PER_GROUP,
    AppendTransaction,
    Delete,
    Edit,
)
from picocontext.errors import (
    DuplicateOperation,
    IncompleteToolGroup,
    InvalidContext,
    ProtectedRecord,
    ScopeMismatch,
    StaleRevision,
    UnknownRecord,
)
from picocontext.recent import RecentByIdentity
from picocontext.records import ALWAYS_PROTECTED, Record, Role, Snapshot, records_wire_json
from picocontext.textrules import require_unicode, utf8_len

MAX_REVISION = 2**63 - 1


@functools.lru_cache(maxsize=2048)
def _check_text(record: Record) -> None:
    """Every text field is valid Unicode (no lone surrogates). Memoized: a record is frozen,
    and every snapshot counted over a history walks the same records again; a record that
    fails is not remembered and fails again."""
    require_unicode(record.id)
    require_unicode(record.body)
    if record.tool_call_id is not None:
        require_unicode(record.tool_call_id)
    for call in record.tool_calls:
        require_unicode(call.id)
        require_unicode(call.name)
        require_unicode(call.arguments)


class _Seen(Protocol):
    """The ids (or tool-call ids) the walk has met so far."""

    def __contains__(self, item: object) -> bool: ...

    def add(self, item: str) -> None: ...


# The last few snapshot objects that passed validate_snapshot. A snapshot is frozen, so one
# that passed always passes; a renderer validates the same one for every prompt it counts.
PASSED_KEPT = 8
_PASSED: RecentByIdentity[Snapshot, bool] = RecentByIdentity(PASSED_KEPT)


def validate_snapshot(snapshot: Snapshot) -> None:
    """Raise the first rule a snapshot breaks, in the reference's order."""
    if _PASSED.get(snapshot):
        return
    _check_snapshot(snapshot)
    _PASSED.put(snapshot, True)


def _check_snapshot(snapshot: Snapshot) -> None:
    scope = snapshot.scope
    if not (0 <= snapshot.revision < MAX_REVISION) or not scope.is_complete:
        raise InvalidContext("empty scope or invalid revision")
    records = snapshot.records
    if not records:
        raise InvalidContext("empty history")
    first_user = next((r for r in records if r.role is Role.USER), None)
    if first_user is None or not first_user.protected:
        raise InvalidContext("the initial user task must be protected")
    _walk(records, set(), set())


def _walk(records: Sequence[Record], seen_ids: _Seen, seen_calls: _Seen) -> None:
    """The per-record rules, in order: ids unique, roles protected, tool groups complete.
    ``seen_ids``/``seen_calls`` hold what records before ``records`` used (whose tool
    groups are complete), so an append is checked against an index, not re-walked."""
    pending: set[str] = set()
    for record in records:
        _check_text(record)
        if not record.id or record.id in seen_ids:
            raise InvalidContext("empty or duplicate record ID")
        seen_ids.add(record.id)
        if record.role in ALWAYS_PROTECTED and not record.protected:
            raise ProtectedRecord(record.id)
        if record.role is Role.TOOL:
            if (
                record.tool_calls
                or record.tool_call_id is None
                or record.tool_call_id not in pending
            ):
                raise InvalidContext("orphaned or duplicate tool result")
            pending.discard(record.tool_call_id)
            continue
        if pending:
            raise IncompleteToolGroup()
        if record.tool_call_id is not None:
            raise InvalidContext("result ID on a non-tool record")
        if record.tool_calls:
            _open_group(record, seen_calls, pending)
    if pending:
        raise IncompleteToolGroup()


def _open_group(record: Record, seen_calls: _Seen, pending: set[str]) -> None:
    if record.role is not Role.ASSISTANT:
        raise InvalidContext("only assistants call tools")
    if len(record.tool_calls) > MAX_TOOL_CALLS_PER_GROUP:
        raise InvalidContext("a tool group allows at most 31 calls")
    for call in record.tool_calls:
        if not call.id or not call.name or call.id in seen_calls:
            raise InvalidContext("empty or duplicate tool call ID/name")
        seen_calls.add(call.id)
        pending.add(call.id)


class _Index:
    """Record ids and tool-call ids of a transcript, by position, shared by the contexts
    whose transcripts are its prefixes: a context of ``length`` records sees the entries
    below ``length``. An append that extends the longest of them extends the index in place
    (O(size of the append)); an append to an older context (a fork) builds its own."""

    def __init__(self, records: Sequence[Record]) -> None:
        self.order: list[str] = []
        self.ids: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.extend(records)

    def extend(self, records: Sequence[Record]) -> None:
        for record in records:
            position = len(self.order)
            self.order.append(record.id)
            self.ids.setdefault(record.id, position)
            for call in record.tool_calls:
                self.calls.setdefault(call.id, position)

    def serves(self, transcript: Sequence[Record]) -> bool:
        """Whether this index still ends where ``transcript`` ends (cheap identity check)."""
        n = len(transcript)
        return len(self.order) == n and (n == 0 or self.order[-1] == transcript[-1].id)


class _Below:
    """A view of an index's ids (or call ids) before ``length``, plus the ones added since."""

    def __init__(self, positions: dict[str, int], length: int) -> None:
        self._positions = positions
        self._length = length
        self._added: set[str] = set()

    def __contains__(self, item: object) -> bool:
        position = self._positions.get(item) if isinstance(item, str) else None
        return (position is not None and position < self._length) or item in self._added

    def add(self, item: str) -> None:
        self._added.add(item)


# Guards every _Index: the check of an append and the extension of the index it passed.
_INDEX_LOCK = threading.Lock()


def _next_revision(revision: int) -> int:
    if revision + 1 >= MAX_REVISION:
        raise InvalidContext("empty scope or invalid revision")
    return revision + 1


@dataclass(frozen=True, slots=True)
class WorkingContext:
    """``original`` is every caller record in arrival order with its original body;
    ``snapshot`` is the working revision that model and caller edits change."""

    original: Snapshot
    snapshot: Snapshot
    # Ids of ``original`` for O(append) validation; derived data, built on first append.
    _index: _Index | None = field(default=None, compare=False, repr=False)

    @classmethod
    def start(cls, snapshot: Snapshot) -> WorkingContext:
        validate_snapshot(snapshot)
        return cls(original=snapshot, snapshot=snapshot)

    @property
    def revision(self) -> int:
        return self.snapshot.revision

    def apply(self, edit: Edit) -> WorkingContext:
        """Validate ``edit`` against the working revision; return the committed candidate."""
        current = self.snapshot
        if edit.scope != current.scope:
            raise ScopeMismatch()
        if edit.base_revision != current.revision:
            raise StaleRevision(expected=current.revision, received=edit.base_revision)
        if not 1 <= len(edit.operations) <= MAX_EDIT_OPERATIONS:
            raise InvalidContext("an edit needs 1...32 operations")
        by_id = {r.id: r for r in current.records}
        targeted: dict[str, str | None] = {}
        for op in edit.operations:
            if op.record_id in targeted:
                raise DuplicateOperation(op.record_id)
            record = by_id.get(op.record_id)
            if record is None:
                raise UnknownRecord(op.record_id)
            if record.protected:
                raise ProtectedRecord(op.record_id)
            if isinstance(op, Delete):
                targeted[op.record_id] = None
            else:
                if utf8_len(op.body) > MAX_BODY_BYTES:
                    raise InvalidContext("replacement too large")
                targeted[op.record_id] = op.body
        records: list[Record] = []
        changed = False
        for record in current.records:
            if record.id not in targeted:
                records.append(record)
                continue
            body = targeted[record.id]
            changed = True if body is None or body != record.body else changed
            if body is not None:
                records.append(record if body == record.body else record.with_body(body))
        candidate = Snapshot.model_construct(
            scope=current.scope, revision=_next_revision(current.revision), records=tuple(records)
        )
        validate_snapshot(candidate)
        if not changed:
            raise InvalidContext("edit changes nothing")
        return WorkingContext(original=self.original, snapshot=candidate, _index=self._index)

    def append(self, transaction: AppendTransaction) -> WorkingContext:
        """Extend both views with caller records; ids are never reusable, even after deletion."""
        current = self.snapshot
        if transaction.scope != current.scope:
            raise ScopeMismatch()
        if transaction.base_revision != current.revision:
            raise StaleRevision(expected=current.revision, received=transaction.base_revision)
        new = transaction.records
        too_big = any(utf8_len(r.body) > MAX_BODY_BYTES for r in new)
        if not 1 <= len(new) <= MAX_APPEND_RECORDS or too_big:
            raise InvalidContext("append needs 1...64 records with bodies at most 64000 bytes")
        for record in new:
            _check_text(record)
        if utf8_len(records_wire_json(new)) > MAX_APPEND_PAYLOAD_BYTES:
            raise InvalidContext("append payload too large")
        revision = _next_revision(current.revision)
        index = self._check_appended(new)
        transcript = Snapshot.model_construct(
            scope=current.scope, revision=revision, records=self.original.records + new
        )
        candidate = Snapshot.model_construct(
            scope=current.scope, revision=revision, records=current.records + new
        )
        return WorkingContext(original=transcript, snapshot=candidate, _index=index)

    def _check_appended(self, new: Sequence[Record]) -> _Index:
        """The rules of :func:`validate_snapshot` for ``transcript + new`` and ``working +
        new``, in O(len(new)): both views passed them already and end with complete tool
        groups, and the working ids and call ids are a subset of the transcript's (edits
        drop records and change bodies only), so checking ``new`` against the transcript's
        index says what validating both whole snapshots would. Returns the extended index."""
        transcript = self.original.records
        # A new index is private until returned, so it is built outside the lock.
        index = self._index if self._index is not None else _Index(transcript)
        length = len(transcript)
        with _INDEX_LOCK:
            _walk(new, _Below(index.ids, length), _Below(index.calls, length))
            if index.serves(transcript):
                index.extend(new)
                return index
        fork = _Index(transcript)
        fork.extend(new)
        return fork

    def deleted_ids(self) -> list[str]:
        """Transcript record ids no longer in the working revision (tombstones)."""
        live = {r.id for r in self.snapshot.records}
        return [r.id for r in self.original.records if r.id not in live]
