"""Record headers: the line before each record body that tells the model the record's id, its
protection and its tool links, in a form the record's own text cannot imitate.

A header reads ``[recordID=<id>; protected=<true|false>; callIDs=<ids>; resultFor=<id|none>]``.
Ids and bodies come from callers and tools, so neither is trusted to be plain:

- a field is written bare only when it is a plain token (letters, digits and ``_.:/@+#-``, and
  not the word ``none``); anything else is a JSON string in which quotes, backslashes, square
  brackets and every non-printable character are escaped. A field can therefore never close
  the header, start a new field or break the line;
- every occurrence of the header opening ``[recordID=`` in a body (any case, any spacing) gets
  one more backslash in front, and so does one that already had some, which keeps the escape
  reversible (:func:`unescape_body`). A real header is the only opening without a backslash.

:func:`parse_headers` reads the headers of a rendered prompt back; the tests check that it
finds exactly the records' real headers whatever the ids and bodies hold.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from picocontext.records import Record

HEADER_OPENING = "[recordID="

_BARE = re.compile(r"[\w.:/@+#-]+")
# The opening as a reader might take it: any case, spaces around the '='.
_OPENING = re.compile(r"(\\*)(\[\s*record\s*id\s*=)", re.IGNORECASE)
_ESCAPED_OPENING = re.compile(r"\\(\\*\[\s*record\s*id\s*=)", re.IGNORECASE)
_FIELD = r'(?:"(?:[^"\\\n]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"|[\w.:/@+#-]+)'
_HEADER = re.compile(
    rf"(?<!\\)\[recordID=(?P<id>{_FIELD}); protected=(?P<protected>true|false); "
    rf"callIDs=(?P<calls>(?:{_FIELD}(?:,{_FIELD})*)?); resultFor=(?P<result>none|{_FIELD})\]"
)
_ANY_FIELD = re.compile(_FIELD)


@dataclass(frozen=True, slots=True)
class RecordHeader:
    """What a header says about its record."""

    record_id: str
    protected: bool
    call_ids: tuple[str, ...]
    result_for: str | None

    @classmethod
    def of(cls, record: Record) -> RecordHeader:
        return cls(
            record.id, record.protected, tuple(c.id for c in record.tool_calls), record.tool_call_id
        )


def _escape_char(ch: str) -> str:
    if ch in '"\\':
        return "\\" + ch
    if ch == "\n":
        return "\\n"
    if ch in "[]" or not ch.isprintable():
        code = ord(ch)
        if code > 0xFFFF:  # JSON spells astral characters as a surrogate pair
            code -= 0x10000
            return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
        return f"\\u{code:04x}"
    return ch


def header_field(value: str) -> str:
    """``value`` as a header writes it: bare if it is a plain token, else quoted."""
    if value != "none" and _BARE.fullmatch(value):
        return value
    return '"' + "".join(_escape_char(ch) for ch in value) + '"'


def _read_field(text: str) -> str:
    return str(json.loads(text)) if text.startswith('"') else text


def record_header(
    record_id: str, protected: bool, call_ids: Sequence[str], result_for: str | None
) -> str:
    return (
        f"[recordID={header_field(record_id)}; protected={'true' if protected else 'false'}; "
        f"callIDs={','.join(header_field(c) for c in call_ids)}; "
        f"resultFor={'none' if result_for is None else header_field(result_for)}]"
    )


def escape_body(body: str) -> str:
    """``body`` with one more backslash before every header opening in it."""
    return _OPENING.sub(lambda m: "\\" + m.group(1) + m.group(2), body)


def unescape_body(text: str) -> str:
    """The inverse of :func:`escape_body`."""
    return _ESCAPED_OPENING.sub(lambda m: m.group(1), text)


@functools.lru_cache(maxsize=1024)
def record_content(record: Record) -> str:
    """The text of one record as a prompt shows it: its header line, then its escaped body.
    Memoized (a record is frozen): every prompt of a turn renders the same records again."""
    header = record_header(
        record.id, record.protected, [c.id for c in record.tool_calls], record.tool_call_id
    )
    return f"{header}\n{escape_body(record.body)}"


def parse_headers(text: str) -> list[RecordHeader]:
    """Every real header in ``text``, in order: an opening that no backslash escapes."""
    out = []
    for match in _HEADER.finditer(text):
        calls = match["calls"]
        out.append(
            RecordHeader(
                _read_field(match["id"]),
                match["protected"] == "true",
                tuple(_read_field(m.group()) for m in _ANY_FIELD.finditer(calls)),
                None if match["result"] == "none" else _read_field(match["result"]),
            )
        )
    return out


def unescaped_openings(text: str) -> int:
    """How many header openings in ``text`` (any case or spacing) no backslash escapes."""
    return sum(1 for m in _OPENING.finditer(text) if not m.group(1))
