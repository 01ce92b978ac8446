"""The incremental decision protocol: one constrained choice per new record.

Measured on Qwen2.5-Coder 0.5B/1.5B (docs/policies.md): a model that is asked for one
``edit_context`` call with operations deletes everything or keeps everything, while "which
earlier record does this new record replace? id or none", asked once per new record, finds the
stale records. So the runtime asks exactly that, as a short trailing message after the shared
prefix (system text and working history), with the answer limited to an enumerated option, and
turns the chosen replacements into one atomic :class:`~picocontext.edits.Edit` that the core's
validator judges like any other. A reply that is no option (free decoding) is recorded as
invalid and never applied.

This module is pure: it plans questions, builds the answer schema (the one grammar source both
engines consume, through ``ModelInput.answer_schema_json``), reads replies and builds the edit.
The session (:mod:`picocontext.session`) runs the calls and owns receipts and budgets.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from picocontext.edits import Delete, Edit
from picocontext.headers import header_field
from picocontext.prompts import CHOICE_NONE, choice_question
from picocontext.records import Role, Snapshot

# Questions asked per step at most (about the newest new records); older new records are
# reported as not asked. Bounds the cost of a first step over a long preloaded history.
MAX_CHOICES_PER_STEP = 8
# Options offered per question at most (the newest earlier records): each costs prompt tokens.
MAX_OPTIONS = 24
# Output allowance of one choice: a quoted option and the end token fit in a handful.
CHOICE_OUTPUT_TOKENS = 12
# Ids longer than this (or not plain header tokens) are answered by short handles instead.
MAX_PLAIN_ID_CHARS = 12


@dataclass(frozen=True, slots=True)
class Unit:
    """What one delete removes whole: a record, or an assistant record with tool calls plus
    its tool results. Editable only when every record in it is unprotected."""

    ids: tuple[str, ...]
    editable: bool

    @property
    def key(self) -> str:
        """The id that names the unit in a question: its last record (for a tool group the
        last result, which is what the model reads as the content)."""
        return self.ids[-1]


def units(snapshot: Snapshot) -> list[Unit]:
    """The snapshot's records grouped into units, in order (the snapshot is valid, so every
    tool result follows its assistant record)."""
    groups: list[list[tuple[str, bool]]] = []
    for record in snapshot.records:
        joins = record.role is Role.TOOL and groups
        if joins:
            groups[-1].append((record.id, record.protected))
        else:
            groups.append([(record.id, record.protected)])
    return [
        Unit(ids=tuple(i for i, _ in group), editable=not any(p for _, p in group))
        for group in groups
    ]


@dataclass(frozen=True, slots=True)
class Option:
    """One answer the model may give: ``handle`` (what it writes) names ``unit``."""

    handle: str
    unit: Unit


@dataclass(frozen=True, slots=True)
class Question:
    """One choice: which of ``options`` the new unit replaces, or none."""

    new: Unit
    options: tuple[Option, ...]

    @property
    def answers(self) -> list[str]:
        """Every legal reply, in order: the option handles, then ``none``."""
        return [o.handle for o in self.options] + [CHOICE_NONE]

    def text(self) -> str:
        return choice_question(list(self.new.ids), [(o.handle, o.unit.key) for o in self.options])

    def schema_json(self) -> str:
        """The answer's JSON schema (a string enum), canonical JSON for ``ModelInput``."""
        schema = {"type": "string", "enum": self.answers}
        return json.dumps(schema, ensure_ascii=False, sort_keys=True, separators=(",", ":"))

    def read(self, text: str) -> Reading:
        """What a reply means: an option, ``none``, or invalid (never applied)."""
        return read_reply(text, self)


@dataclass(frozen=True, slots=True)
class Reading:
    """A reply read against a question: ``valid`` and, if so, the chosen option (``None``
    for ``none``); ``detail`` says why an invalid reply was refused."""

    valid: bool
    option: Option | None
    detail: str


_EDGE = "\"'`*.,;:!()[]{}<> \t\r\n"


def none_schema() -> str:
    """The answer schema that allows only ``none`` (to score that reply), canonical JSON."""
    schema = {"type": "string", "enum": [CHOICE_NONE]}
    return json.dumps(schema, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def read_reply(text: str, question: Question) -> Reading:
    """Read a reply. Constrained decoding yields a JSON string of one answer; free decoding
    may add quotes, punctuation, case changes or a few words after the answer, so the first
    word decides; anything else is invalid. The reply is never echoed into a prompt."""
    stripped = text.strip()
    candidates: list[str] = []
    try:
        value = json.loads(stripped)
    except ValueError:
        value = None
    if isinstance(value, str):
        candidates.append(value)
    candidates.append(stripped.strip(_EDGE))
    words = re.split(r"[\s,;:!?()]+", stripped, maxsplit=1)
    if words and words[0]:
        candidates.append(words[0].strip(_EDGE))
    by_handle = {o.handle: o for o in question.options}
    folded = {o.handle.casefold(): o for o in question.options}
    for candidate in candidates:
        if candidate == CHOICE_NONE or candidate.casefold() == CHOICE_NONE:
            return Reading(True, None, "replaces nothing")
        option = by_handle.get(candidate) or folded.get(candidate.casefold())
        if option is not None:
            return Reading(True, option, f"replaces {header_field(option.unit.key)}")
    return Reading(False, None, "the reply is none of the offered options; nothing applied")


def _handles(candidates: Sequence[Unit]) -> list[str]:
    """Record ids when they are short plain tokens (what the headers show), else short
    handles: letters, then numbers past 26 options."""
    keys = [u.key for u in candidates]
    plain = all(
        len(k) <= MAX_PLAIN_ID_CHARS and header_field(k) == k and k.casefold() != CHOICE_NONE
        for k in keys
    )
    if plain and len({k.casefold() for k in keys}) == len(keys):
        return keys
    if len(keys) <= 26:
        return [chr(ord("A") + i) for i in range(len(keys))]
    return [str(i + 1) for i in range(len(keys))]


def question_for(new: Unit, earlier: Sequence[Unit]) -> Question | None:
    """The question about ``new`` over the editable ``earlier`` units (newest
    :data:`MAX_OPTIONS`), or ``None`` when there is nothing it could replace."""
    candidates = [u for u in earlier if u.editable][-MAX_OPTIONS:]
    if not candidates:
        return None
    options = tuple(Option(h, u) for h, u in zip(_handles(candidates), candidates, strict=True))
    return Question(new=new, options=options)


@dataclass(frozen=True, slots=True)
class Plan:
    """The new editable units of a step in order: ``asked`` get a question (each over the
    units before it), ``skipped`` are older than the per-step limit."""

    asked: tuple[Unit, ...]
    skipped: tuple[Unit, ...]
    all_units: tuple[Unit, ...]

    def question(self, new: Unit, removed: Iterable[str]) -> Question | None:
        """The question about ``new`` once the units keyed in ``removed`` are already chosen
        for deletion this step (a record is replaced once)."""
        gone = set(removed)
        position = self.all_units.index(new)
        earlier = [u for u in self.all_units[:position] if u.key not in gone]
        return question_for(new, earlier)


def plan(snapshot: Snapshot, judged: Iterable[str], limit: int = MAX_CHOICES_PER_STEP) -> Plan:
    """Plan one step: the editable units with a record not yet ``judged`` are new."""
    seen = set(judged)
    every = units(snapshot)
    new = [u for u in every if u.editable and any(i not in seen for i in u.ids)]
    keep = max(limit, 0)
    asked = new[-keep:] if keep else []
    skipped = new[: len(new) - len(asked)]
    return Plan(asked=tuple(asked), skipped=tuple(skipped), all_units=tuple(every))


def replacement_edit(snapshot: Snapshot, chosen: Sequence[Unit]) -> Edit | None:
    """One atomic edit deleting every chosen unit whole, or ``None`` when nothing was
    chosen. Ordered as the records are, so the receipt reads like the history."""
    doomed = {i for unit in chosen for i in unit.ids}
    if not doomed:
        return None
    operations = tuple(Delete(record_id=r.id) for r in snapshot.records if r.id in doomed)
    return Edit(scope=snapshot.scope, base_revision=snapshot.revision, operations=operations)
