"""Older history as a build source tree: one verbatim leaf per record, grouped by turn
(:func:`archive_tree`), or for dated conversations by session, in passages of a few turns
titled by their key words (:func:`session_tree`). The navigated policy compiles these into
its pcx archive; the distilled policy groups by the same sessions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from picocontext.build.ir import IdRegistry, SourceNode, SourceTree
from picocontext.manifest.text import STOPWORDS, stem
from picocontext.policies.history import Unit
from picocontext.records import Record, Role

ROOT_ID = "r"


def leaf_text(record: Record) -> str:
    """A record's verbatim body, followed by its tool calls (name, arguments and call id)
    when it made any, since those are part of what the record said."""
    if not record.tool_calls:
        return record.body
    calls = "\n".join(f"-> {c.name}({c.arguments}) [call {c.id}]" for c in record.tool_calls)
    return f"{record.body}\n{calls}" if record.body else calls


def _leaf_title(record: Record, position: int, call_names: dict[str, str]) -> str:
    """Short on purpose: the descriptor engine repeats the title in the line's description."""
    head = f"#{position} {record.role.value}"
    if record.tool_calls:
        return f"{head} calls {', '.join(dict.fromkeys(c.name for c in record.tool_calls))}"
    if record.role is Role.TOOL and record.tool_call_id is not None:
        return f"{head} result of {call_names.get(record.tool_call_id, 'a tool')}"
    return head


def archive_tree(
    archive: Sequence[Unit],
    positions: dict[str, int],
    segment_records: int = 8,
    group_width: int = 5,
) -> SourceTree:
    """Root -> chronological groups -> turns -> one leaf per archived record.

    A turn starts at each user record, or when the next unit would make it longer than
    ``segment_records``. While a level has more than ``group_width`` nodes, consecutive nodes
    are grouped (``Turns a-b``), so the tree stays in conversation order and appending history
    only changes the newest group. Leaves keep their record ids (claimed first); a turn or
    group id yields on a collision. Every title carries its record numbers (#n)."""
    ids = IdRegistry((ROOT_ID,))
    call_names = {c.id: c.name for u in archive for r in u for c in r.tool_calls}
    segments: list[list[Record]] = []
    for unit in archive:
        starts = unit[0].role is Role.USER
        if not segments or starts or len(segments[-1]) + len(unit) > segment_records:
            segments.append([])
        segments[-1].extend(unit)
    leaf_ids = {r.id: ids.claim(r.id) for segment in segments for r in segment}
    level: list[tuple[SourceNode, int, int, int, int]] = []  # node, first/last turn, #first/#last
    for number, segment in enumerate(segments, start=1):
        first, last = positions[segment[0].id], positions[segment[-1].id]
        title = f"Turn {number} {_span(first, last)}"
        branch = SourceNode(id=ids.claim(f"turn-{number}"), title=title, facets={"kind": "turn"})
        for record in segment:
            branch.children.append(
                SourceNode(
                    id=leaf_ids[record.id],
                    title=_leaf_title(record, positions[record.id], call_names),
                    content=leaf_text(record),
                    format="txt",
                    facets={"kind": "record", "role": record.role.value},
                    origin=record.id,
                )
            )
        level.append((branch, number, number, first, last))
    while len(level) > group_width:
        grouped: list[tuple[SourceNode, int, int, int, int]] = []
        for start in range(0, len(level), group_width):
            chunk = level[start : start + group_width]
            if len(chunk) == 1:
                grouped.append(chunk[0])
                continue
            t1, t2 = chunk[0][1], chunk[-1][2]
            p1, p2 = chunk[0][3], chunk[-1][4]
            node = SourceNode(
                id=ids.claim(f"turns-{t1}-{t2}"),
                title=f"Turns {t1}-{t2} {_span(p1, p2)}",
                facets={"kind": "turns"},
                children=[c[0] for c in chunk],
            )
            grouped.append((node, t1, t2, p1, p2))
        level = grouped
    root = SourceNode(
        id=ROOT_ID,
        title="Archived conversation history",
        facets={"kind": "history"},
        children=[c[0] for c in level],
    )
    return SourceTree(source_id="history", kind="history", root=root)


# A record body's leading bracketed tag: a conversation turn's session date
# ("[2026-03-02] Maya: ..."), written by whoever made the records.
_TAG = re.compile(r"^\[([^\]\n]{1,64})\] ")
_WORDS = re.compile(r"[a-z0-9]+")


def split_tag(text: str) -> tuple[str, str]:
    """A text's leading bracketed tag (a turn's session date) and the rest; ``""`` and the
    text when it has none."""
    found = _TAG.match(text)
    return (found.group(1), text[found.end() :]) if found else ("", text)


def sessions_of(archive: Sequence[Unit]) -> list[tuple[str, list[Unit]]]:
    """Consecutive units whose first record carries the same tag, as ``(tag, units)`` runs in
    history order: a dated conversation's sessions. One untagged run when nothing is tagged."""
    runs: list[tuple[str, list[Unit]]] = []
    for unit in archive:
        tag = split_tag(unit[0].body)[0] if unit else ""
        if not runs or runs[-1][0] != tag:
            runs.append((tag, []))
        runs[-1][1].append(unit)
    return runs


# A text that already names its speaker ("Maya: ...") needs no role in front of it.
_SPEAKER = re.compile(r"^[^\s:\[][^:\n]{0,40}: ")


KEY_WORDS = 4  # words in a passage's title


def speaker_line(record: Record) -> tuple[str, str]:
    """A record as an entry of a passage or a block: its tag apart, then its text -- as is
    when it names its speaker (``Maya: ...``), else after a line with its role (``tool:``),
    so every line of the record stays whole and starts where it started (a reader that looks
    for lines like ``FACT k=v`` still finds them)."""
    tag, rest = split_tag(leaf_text(record))
    return tag, rest if _SPEAKER.match(rest) else f"{record.role.value}:\n{rest}"


def session_tree(
    archive: Sequence[Unit], positions: dict[str, int], passage_records: int = 4
) -> tuple[SourceTree, dict[str, int]] | None:
    """Root -> one branch per session -> passages of up to ``passage_records`` consecutive
    records, when every archived unit belongs to a dated session (its first record starts
    with a tag) and there are at least two sessions; None otherwise.

    A session's title carries its date and record numbers, and its description (the
    descriptor engine's digest of its passages) says what was talked about, so the index is
    one dated line per session. A passage is one leaf: its records verbatim, one line each,
    without the date its session line already carries. Opening one passage shows a turn with
    the turns around it (where a reply holds the answer to what matched), and a session lists
    a few passages instead of every turn. Also returns each passage's position (its last
    record's), so a navigator can order passages like records."""
    runs = sessions_of(archive)
    if len(runs) < 2 or any(not tag for tag, _ in runs):
        return None
    parts = [_passages(units, passage_records) for _, units in runs]
    texts = ["\n".join(speaker_line(r)[1] for r in part) for each in parts for part in each]
    words = iter(key_words(texts, KEY_WORDS))
    contents = iter(texts)
    ids = IdRegistry((ROOT_ID,))
    order: dict[str, int] = {}
    children: list[SourceNode] = []
    for number, ((tag, units), passages) in enumerate(zip(runs, parts, strict=True), start=1):
        records = [r for u in units for r in u]
        span = _span(positions[records[0].id], positions[records[-1].id])
        branch = SourceNode(
            id=ids.claim(f"session-{number}"),
            title=f"Session {number} [{tag}] {span}",
            facets={"kind": "session", "date": tag},
        )
        for part in passages:
            first, last = positions[part[0].id], positions[part[-1].id]
            leaf = SourceNode(
                id=ids.claim(f"s{number}-{first}"),
                title=f"{_span(first, last)} {' '.join(next(words))}".rstrip(),
                content=next(contents),
                format="txt",
                facets={"kind": "passage"},
                origin=part[0].id,
            )
            order[leaf.id] = last
            branch.children.append(leaf)
        children.append(branch)
    root = SourceNode(
        id=ROOT_ID,
        title="Archived conversation sessions",
        facets={"kind": "history"},
        children=children,
    )
    return SourceTree(source_id="history", kind="history", root=root), order


def key_words(texts: Sequence[str], count: int) -> list[list[str]]:
    """For each text, the ``count`` words most its own: term frequency there times the log of
    the inverse share of texts that use the word (stemmed), stop words and words of two
    letters or fewer left out; each shown as first written. A passage titled by its key
    words gives its session's line a digest of what was said, and a navigator that ranks
    by descriptors something to match."""
    bags: list[dict[str, tuple[int, str]]] = []
    seen: dict[str, int] = {}
    for text in texts:
        bag: dict[str, tuple[int, str]] = {}
        for word in _WORDS.findall(text.lower()):
            if len(word) <= 2 or word in STOPWORDS:
                continue
            root = stem(word)
            hits, first = bag.get(root, (0, word))
            bag[root] = (hits + 1, first)
        for root in bag:
            seen[root] = seen.get(root, 0) + 1
        bags.append(bag)
    total = len(texts)

    def weight(bag: dict[str, tuple[int, str]], root: str) -> float:
        return bag[root][0] * math.log(total / seen[root])

    return [
        [bag[r][1] for r in sorted(bag, key=lambda r: (-weight(bag, r), r))[:count]] for bag in bags
    ]


def _passages(units: Sequence[Unit], size: int) -> list[list[Record]]:
    """Consecutive units cut into runs of at most ``size`` records (a unit never parts)."""
    out: list[list[Record]] = []
    for unit in units:
        if not out or len(out[-1]) + len(unit) > size:
            out.append([])
        out[-1].extend(unit)
    return out


def _span(first: int, last: int) -> str:
    return f"#{first}" if first == last else f"#{first}-#{last}"
