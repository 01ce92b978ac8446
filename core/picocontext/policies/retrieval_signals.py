"""What ranks a history's units besides their own BM25 score: their session's score, the
speaker a request names, the month it names, and their neighbours' scores.

Each signal is general (a tag, a speaker line, a date), off at weight 0 in the retrieval
policy's settings, and blind to any one dataset's fields (docs/conversations.md measures each).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from picocontext.policies.history import Unit
from picocontext.policies.lexical import bm25_scores, stemmed_terms
from picocontext.policies.navigated import leaf_text, split_tag


def unit_text(unit: Unit) -> str:
    """What a unit says: each record's body and its tool calls."""
    return "\n".join(leaf_text(r) for r in unit)


def unit_tags(units: Sequence[Unit]) -> list[str]:
    """Each unit's tag (its first record's leading bracketed tag: a session's date)."""
    return [split_tag(leaf_text(u[0]))[0] if u else "" for u in units]


def session_scores(units: Sequence[Unit], query: str, k1: float, b: float) -> list[float]:
    """Each unit's session's BM25 score for ``query`` over the max (0..1): a session is the
    run of units whose first record carries the same tag (a conversation's session date),
    scored as one document, so a turn of the session the question is about ranks above an
    equal turn elsewhere. All 0 when no unit is tagged."""
    tags = unit_tags(units)
    if not any(tags):
        return [0.0] * len(units)
    runs: list[list[int]] = []
    for i, tag in enumerate(tags):
        if not runs or tag != tags[runs[-1][0]]:
            runs.append([])
        runs[-1].append(i)
    texts = ["\n".join(unit_text(units[i]) for i in run) for run in runs]
    scores = bm25_scores(texts, query, k1, b)
    top = max(scores, default=0.0)
    out = [0.0] * len(units)
    for run, score in zip(runs, scores, strict=True):
        for i in run:
            out[i] = score / top if top > 0 else 0.0
    return out


_SPEAKER_NAME = re.compile(r"^([^\s:\[][^:\n]{0,40}): ")


def speaker_of(unit: Unit) -> str:
    """The name a unit's first record gives its speaker (``Maya`` in ``[date] Maya: ...``):
    one to three words, each capitalized, before ``": "``; ``""`` when it names none (so
    ``the plan: ...`` names no speaker)."""
    if not unit:
        return ""
    found = _SPEAKER_NAME.match(split_tag(leaf_text(unit[0]))[1])
    if found is None:
        return ""
    words = found.group(1).split()
    if len(words) > 3 or not all(w[0].isupper() or w[0].isdigit() for w in words):
        return ""
    return found.group(1)


def named_speakers(units: Sequence[Unit], query: str) -> set[str]:
    """The units' speakers whose name the query mentions (any of the name's words), unless
    it mentions every speaker, which says nothing about whose turns to prefer."""
    speakers = {speaker_of(u) for u in units} - {""}
    words = set(stemmed_terms([query])[0])
    named = {s for s in speakers if words & set(stemmed_terms([s])[0])}
    return set() if named == speakers else named


_MONTHS = {
    name: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for name in names
}
_WORD = re.compile(r"[A-Za-z]+|\d+")
_ISO = re.compile(r"(\d{4})-(\d{2})(?:-(\d{2}))?")


@dataclass(frozen=True)
class DateMention:
    """A calendar date a request names: its month, and its year and day when given."""

    month: int
    year: int | None = None
    day: int | None = None


_AMBIGUOUS_MONTHS = frozenset({"may", "march"})  # also a verb


def date_mentions(text: str) -> list[DateMention]:
    """The dates ``text`` names by month: ``June``, ``in July 2023``, ``May 3, 2023``,
    ``3 May``, ``2023-05-08``. A three-letter month, ``May`` and ``March`` count only next to
    a day or a year, or after ``in``, since they are also common words."""
    found = [
        DateMention(int(m.group(2)), int(m.group(1)), int(m.group(3)) if m.group(3) else None)
        for m in _ISO.finditer(text)
        if 1 <= int(m.group(2)) <= 12
    ]
    words = _WORD.findall(_ISO.sub(" ", text))
    for i, word in enumerate(words):
        month = _MONTHS.get(word.lower())
        if month is None:
            continue
        near = [w for w in words[max(0, i - 1) : i + 3] if w.isdigit()]
        day = next((int(w) for w in near if 1 <= int(w) <= 31 and len(w) <= 2), None)
        year = next((int(w) for w in near if len(w) == 4), None)
        plain = len(word) > 3 and word.lower() not in _AMBIGUOUS_MONTHS
        after_in = i > 0 and words[i - 1].lower() == "in" and (len(word) > 3 or month == 5)
        if plain or after_in or day is not None or year is not None:
            found.append(DateMention(month, year, day))
    return found


def date_match(tag: str, mentions: Sequence[DateMention]) -> float:
    """How well a unit's tag (an ISO date) matches the dates a request names, 0..1: 1 for
    the named month (and year, when named); when a day is named, less the further the tag
    is from it (0 two weeks away)."""
    found = _ISO.match(tag)
    if found is None or not mentions:
        return 0.0
    year, month = int(found.group(1)), int(found.group(2))
    day = int(found.group(3)) if found.group(3) else None
    best = 0.0
    for m in mentions:
        if m.year is not None and m.year != year:
            continue
        if m.day is not None and day is not None:
            try:
                apart = abs((date(m.year or year, m.month, m.day) - date(year, month, day)).days)
            except ValueError:
                continue
            best = max(best, max(0.0, 1.0 - apart / 14))
        elif m.month == month:
            best = 1.0
    return best


def with_context(scores: Sequence[float], tags: Sequence[str], weight: float) -> list[float]:
    """Each score plus ``weight`` times the better of its neighbours' scores in the same
    session: a reply rarely repeats the words of the turn it answers."""
    out = list(scores)
    for i, score in enumerate(scores):
        near = [scores[j] for j in (i - 1, i + 1) if 0 <= j < len(scores) and tags[j] == tags[i]]
        if near:
            out[i] = score + weight * max(near)
    return out
