"""The distilled policy's view of older history: groups as verbatim text, cut into leaf-sized
chunks, and scoped by span or by dated session (:func:`session_scopes`). A
:class:`GroupLeaf` remembers where a leaf came from, so tool results can say "older group 4,
part 2/3".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from picocontext.policies.archive_tree import sessions_of
from picocontext.policies.history import Unit as HistoryUnit
from picocontext.records import Record, Role

_WORDS = re.compile(r"\S+")


@dataclass(frozen=True)
class GroupLeaf:
    """Where a leaf came from, so results can say "older group 4, part 2/3"."""

    ordinal: int
    part: int
    parts: int
    record_ids: tuple[str, ...]

    @property
    def label(self) -> str:
        part = f", part {self.part}/{self.parts}" if self.parts > 1 else ""
        return f"older group {self.ordinal}{part}"


def session_scopes(older: Sequence[HistoryUnit]) -> list[str] | None:
    """Each older group's session as a scope value (``"003 2026-03-02"``: number, then the
    date its records carry), when every group belongs to a dated session and there are at
    least two; None otherwise (the tree then groups by spans)."""
    runs = sessions_of(older)
    if len(runs) < 2 or any(not tag for tag, _ in runs):
        return None
    return [f"{n:03d} {tag}" for n, (tag, units) in enumerate(runs, start=1) for _ in units]


def group_text(records: Sequence[Record]) -> str:
    """The verbatim text of a group: a header per record, then its body unchanged."""
    names = {c.id: c.name for r in records for c in r.tool_calls}
    lines: list[str] = []
    for record in records:
        if record.role is Role.TOOL:
            tool = names.get(record.tool_call_id or "", "a tool")
            lines.append(f"[{record.id}] tool result of {tool}:")
        else:
            lines.append(f"[{record.id}] {record.role.value}:")
        if record.body:
            lines.append(record.body)
        for call in record.tool_calls:
            lines.append(f"[{record.id}] called {call.name} {call.arguments}")
    return "\n".join(lines)


def chunk_text(text: str, max_words: int) -> list[str]:
    """Slices of ``text`` with at most ``max_words`` words each, cut at line ends, and between
    words only inside a line that is longer than a slice. Joining the slices gives ``text``."""
    pieces: list[tuple[str, int]] = []
    for line in text.splitlines(keepends=True):
        starts = [m.start() for m in _WORDS.finditer(line)]
        count = len(starts)
        if count <= max_words:
            pieces.append((line, count))
            continue
        for k in range(0, count, max_words):
            begin = 0 if k == 0 else starts[k]
            end = starts[k + max_words] if k + max_words < count else len(line)
            pieces.append((line[begin:end], min(max_words, count - k)))
    chunks: list[str] = []
    current = ""
    words = 0
    for piece, count in pieces:
        if words and words + count > max_words:
            chunks.append(current)
            current, words = "", 0
        current += piece
        words += count
    if current:
        chunks.append(current)
    return chunks or [text]


def first_words(text: str, words: int) -> str:
    """The first ``words`` words of ``text``, with " …" when some were cut."""
    parts = text.split()
    return " ".join(parts[:words]) + (" …" if len(parts) > words else "")
