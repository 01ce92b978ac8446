"""The incremental decision protocol: one constrained choice per new record.

Measured on Qwen2.5-Coder 0.5B/1.5B (docs/policies.md): a model that is asked for one
``edit_context`` call with operations deletes everything or keeps everything, while "which
earlier record does this new record replace? id or none", asked once per new record, finds the
stale records. So the runtime asks exactly that, as a short trailing message after the shared
prefix (system text and working history), with the answer limited to an enumerated option, and
turns the chosen replacements into one atomic :class:`~picocontext.edits.Edit` that the core's
validator judges like any other. A reply that is no option (free decoding) is recorded as
invalid and never applied.

A choice needs a model that can tell a new value from an added detail; on the default
1.5B model none of the choice formats measured could (docs/policies.md). What it can do is
write the question a record answers and answer it from two records, so the question judge
(``judge: "question"``, the editable policy's default) asks that and reads the answer's words
against the two records (:func:`judge_answer`). :class:`ChoiceRules` also let the runtime pick
by repeated content words and narrow the options to records sharing a content word.

Shortening (``ChoiceRules.shorten_over``) asks of a long record which kinds of its lines (alike
but for their values) a later request could need; the reply is letters, so it cannot add a
word to the record.

This module is pure: it plans questions, builds the answer schema (the one grammar source both
engines consume, through ``ModelInput.answer_schema_json``), reads replies and builds the edit.
The session (:mod:`picocontext.session`) runs the calls and owns receipts and budgets.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from picocontext.edits import Delete, Edit, Operation, Replace
from picocontext.headers import header_field
from picocontext.manifest.text import STOPWORDS, stem, terms
from picocontext.prompts import CHOICE_NONE, NOT_SAID, choice_question, quoted_whole
from picocontext.records import Record, Role, Snapshot

# Questions asked per step at most (about the newest new records); older new records are
# reported as not asked. Bounds the cost of a first step over a long preloaded history.
MAX_CHOICES_PER_STEP = 8
# Options offered per question at most (the newest earlier records): each costs prompt tokens.
MAX_OPTIONS = 24
# Output allowance of one choice: a quoted option and the end token fit in a handful.
CHOICE_OUTPUT_TOKENS = 12
# Ids longer than this (or not plain header tokens) are answered by short handles instead.
MAX_PLAIN_ID_CHARS = 12

# Which earlier units a question offers: ``shared-word`` only those that share a stemmed
# content word (stop words removed) with the new unit, so a note about something else is never
# offered and a note that shares no word with any earlier one is answered none without a
# model call; ``all`` offers every earlier editable unit.
Candidates = Literal["shared-word", "all"]
# How a constrained reply is written: ``word`` as the bare option (what a small model writes by
# itself), ``json`` as a JSON string (an opening quote the model would not write: on
# Qwen2.5-Coder-1.5B it costs 4-11 nats and changes the answer, docs/policies.md).
ReplyForm = Literal["word", "json"]
# The answer-schema key that asks the grammar source for bare words (a string enum whose
# reply is one of its words as plain text); engines without a local grammar drop ``x-`` keys
# and get a JSON string, which :func:`read_reply` reads the same.
BARE_WORDS_KEY = "x-bare-words"
# How a question is judged: ``choice`` asks the model which earlier unit the new one replaces
# (an option or none); ``question`` asks, for each earlier unit offered, the question it
# answers and then that question over the two units, and replaces the earlier unit when the
# answer repeats what only the new one says (docs/policies.md).
Judge = Literal["choice", "question"]
# Earlier units judged by question and answer per new unit at most, by default (those that
# share the most of their content words with it): each costs a short call, and its first one
# a second. ``ChoiceRules.pairs`` sets it.
MAX_JUDGED_PAIRS = 2


@dataclass(frozen=True, slots=True)
class ChoiceRules:
    """How the incremental decision asks: which earlier units a question offers and how the
    constrained reply is written."""

    candidates: Candidates = "all"
    reply: ReplyForm = "json"
    # Shared-word candidates: offer only earlier units that have at least this share of their
    # content words repeated in the new unit (0: one shared word is enough).
    offer_overlap: float = 0.0
    # The runtime itself picks the earlier unit with the largest share of its content words
    # repeated in the new unit, when that share is at least this, without a model call
    # (``None``: never).
    pick_overlap: float | None = None
    # Whether the model is asked at all (off: only the runtime's overlap pick decides).
    ask: bool = True
    judge: Judge = "choice"
    # The question judge: which of the two records the answer prompt lists first.
    newer_first: bool = False
    # The question judge: ask once more over the new record alone when the answer over both
    # repeated a value only the earlier record has (see :func:`judge_recheck`).
    recheck: bool = False
    # The question judge: how many earlier units (the most alike) each new unit is judged
    # against; each pair costs an answer call, and a restatement for an earlier unit not yet
    # restated.
    pairs: int = MAX_JUDGED_PAIRS
    # The question judge: also ask about a new unit of several lines none of which shares a
    # word with the question (off: kept without a call, since the answer prompt could quote
    # only a line the runtime picked for no reason, its first).
    ask_unrelated: bool = False
    # The question judge: also ask about a pair whose new unit says nothing on the question
    # that the earlier one does not (off: kept without a call, the outcome any answer would
    # give; :func:`adds_nothing`). On only to replay runs recorded before the rule.
    ask_settled: bool = False
    # The question judge: read a JSON object record as its members (:func:`statement_lines`;
    # off: as its text lines, one line for a one-line object).
    json_members: bool = True
    # The question judge: an earlier unit alike but for its values to a unit already restated
    # takes that unit's question when it names no value (:func:`shared_question`; off: every
    # earlier unit is restated by the model).
    reuse_questions: bool = True
    # The question judge: never replace an earlier unit by one that leaves some of its lines
    # unsaid (:func:`lines_left_out`): the pair is kept without the answer call (off: the
    # answer decides alone, as before the rule).
    guard_lines: bool = True
    # The question judge: an earlier unit that says nothing beyond a unit already restated
    # and names what its question asks takes that question too (``shared_question``'s
    # ``within``; off: only units alike but for their values share one).
    reuse_within: bool = True
    # The question judge: a pair whose question and values only one side has match a pair
    # already answered by those values takes that answer's verdict, without a call
    # (:func:`value_change`; off: every pair is asked, as before the rule).
    reuse_answers: bool = True
    # Shortening: a record longer than this many characters (a tool result or an earlier
    # user message, never the request being answered) is asked once which kinds of its lines
    # to keep, and replaced by those lines (``None``: never asked; :func:`shorten_candidates`).
    shorten_over: int | None = None

    def __post_init__(self) -> None:
        if self.pairs < 1:
            raise ValueError("pairs must be at least 1")
        if self.shorten_over is not None and self.shorten_over < 1:
            raise ValueError("shorten_over must be at least 1")

    @property
    def lexical(self) -> bool:
        """Whether content words are needed (a filter or the runtime's pick)."""
        return self.candidates == "shared-word" or self.pick_overlap is not None


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


def content_words(snapshot: Snapshot, unit: Unit) -> frozenset[str]:
    """The stemmed content words of what a unit says: its records' bodies (a tool group's
    results carry its content; an assistant's call arguments are not read)."""
    bodies = {r.id: r.body for r in snapshot.records}
    return frozenset(w for i in unit.ids for w in terms(bodies.get(i, "")))


def overlap(new: frozenset[str], old: frozenset[str]) -> float:
    """The share of ``old``'s content words that ``new`` repeats (0 when ``old`` has none): a
    note that restates an earlier one with another value repeats most of its words; one that
    adds a detail about the same item repeats only the item."""
    return len(new & old) / len(old) if old else 0.0


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
    reply: ReplyForm = "json"

    @property
    def answers(self) -> list[str]:
        """Every legal reply, in order: the option handles, then ``none``."""
        return [o.handle for o in self.options] + [CHOICE_NONE]

    def text(self) -> str:
        return choice_question(list(self.new.ids), [(o.handle, o.unit.key) for o in self.options])

    def schema_json(self) -> str:
        """The answer's JSON schema (a string enum), canonical JSON for ``ModelInput``."""
        schema: dict[str, object] = {"type": "string", "enum": self.answers}
        if self.reply == "word":
            schema[BARE_WORDS_KEY] = True
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


def none_schema(reply: ReplyForm = "json") -> str:
    """The answer schema that allows only ``none`` (to score that reply), canonical JSON."""
    schema: dict[str, object] = {"type": "string", "enum": [CHOICE_NONE]}
    if reply == "word":
        schema[BARE_WORDS_KEY] = True
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


def question_for(
    new: Unit,
    earlier: Sequence[Unit],
    words: Mapping[str, frozenset[str]] | None = None,
    reply: ReplyForm = "json",
    min_overlap: float = 0.0,
) -> Question | None:
    """The question about ``new`` over the editable ``earlier`` units (newest
    :data:`MAX_OPTIONS`), or ``None`` when there is nothing it could replace. With ``words``
    (content words by unit key), only units sharing a word with ``new`` are offered, and only
    those with at least ``min_overlap`` of their words repeated in it."""
    candidates = [u for u in earlier if u.editable]
    if words is not None:
        mine = words.get(new.key, frozenset())
        candidates = [
            u
            for u in candidates
            if mine & words.get(u.key, frozenset())
            and overlap(mine, words.get(u.key, frozenset())) >= min_overlap
        ]
    candidates = candidates[-MAX_OPTIONS:]
    if not candidates:
        return None
    options = tuple(Option(h, u) for h, u in zip(_handles(candidates), candidates, strict=True))
    return Question(new=new, options=options, reply=reply)


@dataclass(frozen=True, slots=True)
class Plan:
    """The new editable units of a step in order: ``asked`` get a question (each over the
    units before it), ``skipped`` are older than the per-step limit."""

    asked: tuple[Unit, ...]
    skipped: tuple[Unit, ...]
    all_units: tuple[Unit, ...]
    # Content words by unit key when the rules use them (``None``: not needed).
    words: Mapping[str, frozenset[str]] | None = field(default=None, compare=False)
    rules: ChoiceRules = ChoiceRules()

    def earlier(self, new: Unit, removed: Iterable[str] = ()) -> list[Unit]:
        """The editable units before ``new`` that are not keyed in ``removed``."""
        gone = set(removed)
        position = self.all_units.index(new)
        return [u for u in self.all_units[:position] if u.editable and u.key not in gone]

    def question(self, new: Unit, removed: Iterable[str]) -> Question | None:
        """The question about ``new`` once the units keyed in ``removed`` are already chosen
        for deletion this step (a record is replaced once)."""
        rules = self.rules
        if not rules.ask:
            return None
        words = self.words if rules.candidates == "shared-word" else None
        return question_for(
            new, self.earlier(new, removed), words, rules.reply, rules.offer_overlap
        )

    def most_alike(self, question: Question, limit: int = MAX_JUDGED_PAIRS) -> list[Option]:
        """The ``limit`` options whose content words the new unit repeats most (the newer on
        a tie), in record order; the newest ``limit`` without content words. A record that a
        new one updates repeats its item and most of its wording; one about something else
        shares less."""
        options = list(question.options)
        words = self.words
        if words is None or len(options) <= limit:
            return options[-limit:]
        mine = words.get(question.new.key, frozenset())
        ranked = sorted(
            range(len(options)),
            key=lambda i: (overlap(mine, words.get(options[i].unit.key, frozenset())), i),
            reverse=True,
        )
        return [options[i] for i in sorted(ranked[:limit])]

    def runtime_pick(self, new: Unit, removed: Iterable[str]) -> tuple[Unit, float] | None:
        """The earlier unit the runtime picks without asking: the one with the largest share
        of its content words repeated in ``new`` (the older on a tie), when that share
        reaches the rules' ``pick_overlap``."""
        threshold, words = self.rules.pick_overlap, self.words
        if threshold is None or words is None:
            return None
        mine = words.get(new.key, frozenset())
        best: tuple[Unit, float] | None = None
        for unit in self.earlier(new, removed):
            share = overlap(mine, words.get(unit.key, frozenset()))
            if share >= threshold and (best is None or share > best[1]):
                best = (unit, share)
        return best


def plan(
    snapshot: Snapshot,
    judged: Iterable[str],
    limit: int = MAX_CHOICES_PER_STEP,
    rules: ChoiceRules = ChoiceRules(),
) -> Plan:
    """Plan one step: the editable units with a record not yet ``judged`` are new;
    ``rules`` say which earlier units each question offers and how it is answered."""
    seen = set(judged)
    every = units(snapshot)
    new = [u for u in every if u.editable and any(i not in seen for i in u.ids)]
    keep = max(limit, 0)
    asked = new[-keep:] if keep else []
    skipped = new[: len(new) - len(asked)]
    words = None
    if rules.lexical:
        words = {u.key: content_words(snapshot, u) for u in every if u.editable}
    return Plan(
        asked=tuple(asked),
        skipped=tuple(skipped),
        all_units=tuple(every),
        words=words,
        rules=rules,
    )


def unit_text(snapshot: Snapshot, unit: Unit) -> str:
    """What a unit says, as a question quotes it: its records' bodies (a tool group's results
    carry its content)."""
    bodies = {r.id: r.body for r in snapshot.records}
    return " ".join(b for b in (bodies.get(i, "").strip() for i in unit.ids) if b)


def statement_lines(text: str, members: bool = True) -> list[str]:
    """What a question reads ``text`` as, line by line: its non-blank lines; a JSON object or
    array is read as its members, one ``"key": value`` line per scalar (or list of scalars)
    under its innermost key (unless ``members`` is off). A tool's or an answer's JSON report of
    several values is then quoted and judged by the member a question is about, as a record of
    several lines is by its lines, instead of by the whole object."""
    read = _json_members(text) if members else None
    if read:
        return [
            value if key is None else f"{json.dumps(key, ensure_ascii=False)}: {value}"
            for key, value in read
        ]
    return [line.strip() for line in text.splitlines() if line.strip()]


# A value inside a line for :func:`text_shape`: a piece holding a digit between spaces, ``=``
# and ``:``, so ``heron=KX-7302-B`` keeps its key (``heron=#``) where :func:`line_shape`
# blanks the whole word.
_KEYED_VALUE = re.compile(r"[^\s=:]*\d[^\s=:]*")


def text_shape(text: str, members: bool = True) -> tuple[str, ...]:
    """The distinct shapes of ``text``'s statement lines, in order of first appearance, with
    their values blanked but their keys kept: two readings of one sensor, or two feeds alike
    but for their counters, have one shape; readings of two sensors (``North zone`` and
    ``South zone``) or two keys (``heron=…`` and ``dunlin=…``) do not."""
    return tuple(dict.fromkeys(_keyed_shape(line) for line in statement_lines(text, members)))


def _keyed_shape(line: str) -> str:
    return _KEYED_VALUE.sub("#", " ".join(line.split()))


def lines_left_out(
    earlier: str, later: str, question: str, members: bool = True
) -> tuple[str, ...]:
    """The lines of ``earlier`` (:func:`statement_lines`) that deleting it for ``later`` would
    lose: not about ``question`` (:func:`lines_about`) and of no line shape ``later`` has
    (:func:`text_shape`). A price list's coffee line when a note gives tea's new price alone;
    never a feed's telemetry when the newer feed carries the same kinds of lines, nor any line
    of a one-line record (it is about the question by definition). Between two JSON records
    the keys decide instead (:func:`members_missing`): a member whose value is a word, such
    as an assignee's name, is updated by the same key, not lost."""
    if members and _json_members(earlier) and _json_members(later):
        return ()
    lines = statement_lines(earlier, members)
    if len(lines) <= 1:
        # lines_about gives such a record back whole, which for a one-member JSON report is
        # not its member line: it is about the question, whatever the reading
        return ()
    about = set(lines_about(earlier, question, members))
    newer = statement_lines(later, members)
    shapes = {_keyed_shape(line) for line in newer}
    keys = {_line_key(line) for line in newer} - {None}
    return tuple(
        line
        for line in lines
        if line not in about and _keyed_shape(line) not in shapes and _line_key(line) not in keys
    )


# A line's key: what comes before its first ``:`` or ``=``, when that is short
# (``worker: 2 replicas, degraded`` → ``worker``), so a later ``worker: …, healthy`` says it
# again, whatever its value.
MAX_LINE_KEY_CHARS = 40
_LINE_KEY = re.compile(rf"^\s*([^:=]{{1,{MAX_LINE_KEY_CHARS}}}?)\s*[:=]")


def _line_key(line: str) -> str | None:
    found = _LINE_KEY.match(line)
    return " ".join(found.group(1).lower().split()) if found else None


SHARED_ALIKE = "alike but for its values"
SHARED_WITHIN = "which says all it says"


def shared_question(
    earlier: str,
    known: Mapping[tuple[str, str], str | None],
    members: bool = True,
    within: bool = False,
) -> tuple[str, str, str] | None:
    """A question already restated for another unit (``known``: by unit key and text) that
    ``earlier`` answers too, as ``(unit key, question, why)``; ``None`` when there is none.

    * :data:`SHARED_ALIKE`: the other text has ``earlier``'s shape (:func:`text_shape`) and
      the question names no value. The two differ only in values the question does not name.
      A question naming a value ("How many skylarks in transect 3?") belongs to its own
      record and is never given away like this.
    * :data:`SHARED_WITHIN` (with ``within``): ``earlier`` says nothing the other text does
      not (every word and value of its statement lines is there) and shares a content word
      with the question, which names no value ``earlier`` lacks. The assistant's report
      ``{"heron": "KX-7302-B"}`` of a feed's ``FACT heron=KX-7302-B`` line answers the
      question asked of that feed. A subset that shares no word with the question (the
      coffee line of a list whose question asks about tea) keeps its own restatement.

    Either way the restatement call is not made again."""
    shape = text_shape(earlier, members)
    if not shape:
        return None
    for (key, text), question in known.items():
        if question is None or any(_is_value(w) for w in value_words(question)):
            continue
        if text_shape(text, members) == shape:
            return key, question, SHARED_ALIKE
    if not within:
        return None
    said = value_words("\n".join(statement_lines(earlier, members)))
    for (key, text), question in known.items():
        if question is None or not said <= value_words(text):
            continue
        named = value_words(question)
        if asks_about(earlier, question) and {w for w in named if _is_value(w)} <= said:
            return key, question, SHARED_WITHIN
    return None


def members_missing(earlier: str, later: str) -> tuple[str, ...]:
    """The member keys of JSON record ``earlier`` that JSON record ``later`` lacks, sorted
    (none when either is not a JSON object or array). A result that gives tea's price alone
    cannot replace a price list of tea and coffee: whatever its answer about tea, deleting the
    list would lose coffee's price."""
    old, new = _json_members(earlier), _json_members(later)
    if not old or not new:
        return ()
    return tuple(sorted({k for k, _ in old if k} - {k for k, _ in new if k}))


def _json_members(text: str) -> list[tuple[str | None, str]] | None:
    """The ``(innermost key, JSON value)`` members of ``text`` when it is a JSON object or
    array, in document order; ``None`` when it is not."""
    stripped = text.strip()
    if stripped[:1] not in ("{", "["):
        return None
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    if not isinstance(value, dict | list):
        return None
    return list(_members(value, None))


def _scalar(value: object) -> bool:
    return not isinstance(value, dict | list)


def _members(value: object, key: str | None) -> Iterable[tuple[str | None, str]]:
    """The members of a parsed JSON value, in document order: each scalar (or list of
    scalars) with its innermost key."""
    if isinstance(value, dict):
        for name, item in value.items():
            yield from _members(item, str(name))
        return
    if isinstance(value, list) and not all(_scalar(item) for item in value):
        for item in value:
            yield from _members(item, key)
        return
    yield key, json.dumps(value, ensure_ascii=False)


def lines_about(text: str, question: str, members: bool = True) -> list[str]:
    """The lines of ``text`` (:func:`statement_lines`) that share a content word or value with
    ``question`` (a word on more than half of the lines does not count), in order; a one-line
    note whole, whatever it says. Empty when a record of several lines has no line about the
    question."""
    lines = statement_lines(text, members)
    if len(lines) <= 1:
        return [text.strip()]
    words = [value_words(line) for line in lines]
    # A word on more than half the lines is the record's boilerplate ("notebook unchanged" on
    # every telemetry line), not what the question singles out.
    common = {w for w in set().union(*words) if 2 * sum(w in ws for ws in words) > len(lines)}
    asked = value_words(question) - common
    return [line for line, ws in zip(lines, words, strict=True) if ws & asked]


def relevant_lines(text: str, question: str, members: bool = True) -> str:
    """What an answer prompt quotes of ``text``: its lines about ``question``
    (:func:`lines_about`), or its first line when none is. A one-line note is quoted whole; a
    long record (a feed with a table of telemetry) is quoted by what the question is about, so
    the answer prompt does not pay for the whole record again when the history already holds
    it."""
    shared = lines_about(text, question, members) or statement_lines(text, members)[:1]
    return "\n".join(shared)


def restate_excerpt(text: str) -> str:
    """What the restatement question quotes of ``text``: the whole text when its quote would
    not be cut (:func:`~picocontext.prompts.quoted_whole`), else the first line of each kind
    (:func:`line_kinds`) in order, marked cut with a final ``…``. A feed of one fact and
    twenty-four telemetry lines alike but for their counters is quoted by its fact and one
    telemetry line: the question the model writes comes from the same words, and the call
    prefills about a third fewer tokens (81 to 53 on the main job, docs/policies.md)."""
    if quoted_whole(text):
        return text
    lines = body_lines(text)
    firsts = [lines[where[0]] for where in _shape_positions(lines).values()]
    if len(firsts) == len(lines):
        return text
    return "\n".join(firsts) + " …"


# A value stays one token: "20:00", "0.05", "3,000", "mol/l" are not split into pieces that
# other values share.
_VALUE = re.compile(r"[a-z0-9]+(?:[.,:/][a-z0-9]+)*")


def value_words(text: str) -> frozenset[str]:
    """The content words and values of ``text``: lower-cased, words stemmed, stop words and
    one-letter words removed, values whole."""
    out = set()
    for token in _VALUE.findall(text.lower()):
        if len(token) < 2 and not token.isdigit():
            continue
        if token.isalpha():
            if token in STOPWORDS:
                continue
            token = stem(token)
        out.add(token)
    return frozenset(out)


def read_question(text: str) -> str | None:
    """The question in a reply: its first line up to the first question mark (a small model
    often goes on after it), or ``None`` when the reply holds no question."""
    line = next((s.strip() for s in text.strip().splitlines() if s.strip()), "")
    line = line.strip(_EDGE.replace("?", ""))
    if "?" not in line:
        return None
    question = line[: line.index("?") + 1].strip()
    return question if len(question) > 1 else None


@dataclass(frozen=True, slots=True)
class AnswerVerdict:
    """What an answer over two units says about the older one. Values (words with a digit:
    times, amounts, ids) decide when the answer repeats any that only one unit has: ``stale``
    when it repeats a value only the newer unit has (``new``) and none only the older has
    (``old``); otherwise the other words decide the same way. Words of the question itself
    are not counted (a model restates them)."""

    stale: bool
    new: tuple[str, ...]
    old: tuple[str, ...]
    # Decided by the recheck over the new unit alone (:func:`judge_recheck`).
    rechecked: bool = False

    def explain(self) -> str:
        if self.stale and self.rechecked:
            return (
                "asked again over the new record alone, the answer repeats a value only it "
                f"has ({', '.join(self.new)})"
            )
        if self.stale:
            return f"the answer repeats what only the new record says ({', '.join(self.new)})"
        if self.old:
            return f"the answer repeats what only the earlier record says ({', '.join(self.old)})"
        return "the answer repeats nothing only the new record says"


def _is_value(word: str) -> bool:
    return any(ch.isdigit() for ch in word)


def judge_answer(answer: str, question: str, earlier: str, later: str) -> AnswerVerdict:
    """Whether ``answer`` (to ``question``, asked over ``earlier`` then ``later``) takes its
    value from the later unit only: then the earlier one is out of date."""
    said = value_words(answer) - value_words(question)
    old_words, new_words = value_words(earlier), value_words(later)
    new = sorted(said & (new_words - old_words))
    old = sorted(said & (old_words - new_words))
    new_values = [w for w in new if _is_value(w)]
    old_values = [w for w in old if _is_value(w)]
    if new_values or old_values:
        # "Thursday at 14:00" against "Thursday at 15:00" / "14:00, same day": the time decides
        new, old = new_values, old_values
    return AnswerVerdict(stale=bool(new) and not old, new=tuple(new), old=tuple(old))


def judge_recheck(answer: str, question: str, earlier: str, later: str) -> AnswerVerdict:
    """The recheck over the new unit alone (asked after an answer over both repeated the
    earlier unit's value): stale only when the answer repeats a *value* only the new unit has
    and none only the earlier has. Plain words do not count here: without the earlier unit
    beside it, a model readily answers a question about one item from a note about another,
    while a changed amount, time or id is what the first answer missed."""
    if NOT_SAID in " ".join(answer.lower().split()):
        return AnswerVerdict(stale=False, new=(), old=())
    verdict = judge_answer(answer, question, earlier, later)
    values = tuple(w for w in verdict.new if _is_value(w))
    stale = bool(values) and not verdict.old
    return AnswerVerdict(stale=stale, new=values, old=verdict.old, rechecked=True)


ValueChange = tuple[str, frozenset[str], frozenset[str]]


def value_change(question: str, earlier: str, later: str) -> ValueChange:
    """What an answer to ``question`` over ``earlier`` then ``later`` is judged by, when it
    repeats a value: the question and the values (words with a digit) only one side has,
    beyond the question's own. Two pairs with one change (``FACT heron=KX-7302-B`` then
    ``FACT heron=KX-7318-D``, and the same two values in two JSON reports) get the same
    value-decided verdict from one reply (:func:`judge_answer`), so the answer is asked once."""
    asked = value_words(question)
    old_words, new_words = value_words(earlier), value_words(later)
    return (
        question,
        frozenset(w for w in old_words - new_words - asked if _is_value(w)),
        frozenset(w for w in new_words - old_words - asked if _is_value(w)),
    )


def decided_by_values(verdict: AnswerVerdict) -> bool:
    """Whether ``verdict`` came from the values the answer repeated (then any pair with the
    same :func:`value_change` gets it from the same reply)."""
    return any(_is_value(w) for w in verdict.new + verdict.old)


def adds_nothing(question: str, earlier: str, later: str) -> bool:
    """Whether ``later`` holds no word or value, beyond the question's own, that ``earlier``
    lacks. Then no answer can repeat what only ``later`` says, so :func:`judge_answer` and
    :func:`judge_recheck` keep ``earlier`` whatever the model replies: the runtime keeps it
    without the call (same outcome, no tokens)."""
    return not (value_words(later) - value_words(earlier) - value_words(question))


def asks_about(text: str, question: str) -> bool:
    """Whether ``text`` shares a content word that is not a value with ``question``: a record
    that names none of the question's words is not its answer, whatever values it holds."""
    return any(not _is_value(w) for w in value_words(text) & value_words(question))


def replacement_edit(
    snapshot: Snapshot, chosen: Sequence[Unit], bodies: Mapping[str, str] | None = None
) -> Edit | None:
    """One atomic edit deleting every chosen unit whole and giving the records in ``bodies``
    their new body (a record also deleted is only deleted), or ``None`` when there is
    nothing to do. Ordered as the records are, so the receipt reads like the history."""
    doomed = {i for unit in chosen for i in unit.ids}
    shortened = dict(bodies or {})
    operations: list[Operation] = []
    for record in snapshot.records:
        if record.id in doomed:
            operations.append(Delete(record_id=record.id))
        elif record.id in shortened:
            operations.append(Replace(record_id=record.id, body=shortened[record.id]))
    if not operations:
        return None
    return Edit(scope=snapshot.scope, base_revision=snapshot.revision, operations=tuple(operations))


# -- shortening ----------------------------------------------------------------------------
# The reply that keeps a record whole.
SHORTEN_ALL = "all"
# A record is offered for shortening only when its lines fall into this many kinds at least
# (one kind leaves nothing to choose among) and at most (each kind is a lettered line of the
# question, and a record of many kinds is not repetitive enough to gain).
MIN_SHORTEN_KINDS = 2
MAX_SHORTEN_KINDS = 12
# Records asked about per step at most (the newest first).
MAX_SHORTEN_PER_STEP = 4
# A reply is applied only when the kept lines are at most this share of the body.
SHORTEN_KEEPS_AT_MOST = 0.8
# The answer-schema key that asks the grammar source for a bare list (an array of a string
# enum whose reply is its items as plain text, joined by the key's value, or ``all``);
# engines without a local grammar drop ``x-`` keys and get the JSON form, which
# :func:`read_kinds` reads too.
BARE_LIST_KEY = "x-bare-list"
_KIND_LETTERS = "ABCDEFGHIJKL"
# A word holding a digit is a value (a counter, an id, a reading): lines that differ only in
# such words are one kind.
_VALUE_WORD = re.compile(r"\S*\d\S*")


def line_shape(line: str) -> str:
    """What a line says with its values blanked: ``Sweep 3, frame 7: idle`` and ``Sweep 4,
    frame 0: idle`` are one kind."""
    return _VALUE_WORD.sub("#", " ".join(line.split()))


@dataclass(frozen=True, slots=True)
class LineKind:
    """Lines of one shape: their positions in the body's non-blank lines, in order."""

    letter: str
    shape: str
    lines: tuple[int, ...]


def body_lines(body: str) -> list[str]:
    """The body's non-blank lines, in order, without their line ends."""
    return [line.rstrip() for line in body.splitlines() if line.strip()]


def _shape_positions(lines: Sequence[str]) -> dict[str, list[int]]:
    """Each shape of ``lines`` (:func:`line_shape`) with the positions of its lines, in order
    of first appearance."""
    positions: dict[str, list[int]] = {}
    for index, line in enumerate(lines):
        positions.setdefault(line_shape(line), []).append(index)
    return positions


def _lettered(positions: dict[str, list[int]]) -> list[LineKind]:
    return [
        LineKind(letter, shape, tuple(where))
        for letter, (shape, where) in zip(_KIND_LETTERS, positions.items(), strict=False)
    ]


def line_kinds(lines: Sequence[str]) -> list[LineKind]:
    """The kinds of ``lines`` (by :func:`line_shape`), in order of first appearance, lettered
    A, B, …; more kinds than :data:`MAX_SHORTEN_KINDS` get no letters past the last (such a
    record is not offered, :func:`shorten_candidates`)."""
    return _lettered(_shape_positions(lines))


@dataclass(frozen=True, slots=True)
class Shortenable:
    """A record a step asks to shorten, with its non-blank lines and their kinds."""

    record: Record
    lines: tuple[str, ...]
    kinds: tuple[LineKind, ...]


def shorten_candidates(snapshot: Snapshot, asked: Iterable[str], over: int) -> list[Shortenable]:
    """The records a step asks to shorten, newest first, at most
    :data:`MAX_SHORTEN_PER_STEP`: unprotected tool results and user messages not asked
    before, longer than ``over`` characters, whose lines fall into a few kinds. The request
    being answered (the last user record) is never offered: the answer needs it whole."""
    done = set(asked)
    records = snapshot.records
    last_user = max((i for i, r in enumerate(records) if r.role is Role.USER), default=-1)
    found: list[Shortenable] = []
    for position in range(len(records) - 1, -1, -1):
        record = records[position]
        if position == last_user or record.protected or record.id in done:
            continue
        if record.role not in (Role.TOOL, Role.USER) or len(record.body) <= over:
            continue
        lines = body_lines(record.body)
        positions = _shape_positions(lines)
        if MIN_SHORTEN_KINDS <= len(positions) <= MAX_SHORTEN_KINDS:
            found.append(Shortenable(record, tuple(lines), tuple(_lettered(positions))))
            if len(found) == MAX_SHORTEN_PER_STEP:
                break
    return found


def kinds_schema(kinds: Sequence[LineKind]) -> str:
    """The shortening reply's schema: ``all``, or one or more kinds' letters; canonical JSON
    for ``ModelInput``, marked for the bare form (:data:`BARE_LIST_KEY`, comma-joined)."""
    letters = [k.letter for k in kinds]
    schema: dict[str, object] = {
        "anyOf": [
            {"type": "string", "enum": [SHORTEN_ALL]},
            {"type": "array", "items": {"type": "string", "enum": letters}, "minItems": 1},
        ],
        BARE_LIST_KEY: ", ",
    }
    return json.dumps(schema, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class KindsReading:
    """A shortening reply read against the record's kinds: ``valid``; ``kept`` the letters
    kept, in order (``None``: keep the record whole); ``detail`` why."""

    valid: bool
    kept: tuple[str, ...] | None
    detail: str


def read_kinds(text: str, kinds: Sequence[LineKind]) -> KindsReading:
    """Read a shortening reply: ``all``, a JSON array of letters, or letters separated by
    commas, spaces or lines (the bare form, or free decoding). A word that is not an offered
    letter makes the reply invalid (never applied)."""
    stripped = text.strip()
    if stripped.strip(_EDGE).casefold() == SHORTEN_ALL:
        return KindsReading(True, None, "keeps every line")
    try:
        value = json.loads(stripped)
    except ValueError:
        value = None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        written = [str(v) for v in value]
    else:
        written = [w for w in re.split(r"[\s,;]+", stripped) if w.strip(_EDGE)]
    offered = {k.letter for k in kinds}
    kept: set[str] = set()
    for word in written:
        letter = word.strip(_EDGE).upper()
        if letter not in offered:
            return KindsReading(False, None, f"{word!r} is not an offered kind; nothing applied")
        kept.add(letter)
    if not kept:
        return KindsReading(False, None, "the reply names no kind; nothing applied")
    ordered = tuple(k.letter for k in kinds if k.letter in kept)
    lines = sum(len(k.lines) for k in kinds if k.letter in kept)
    total = sum(len(k.lines) for k in kinds)
    return KindsReading(
        True, ordered, f"keeps kinds {', '.join(ordered)}: {lines} of {total} lines"
    )


def shortened_body(lines: Sequence[str], kinds: Sequence[LineKind], kept: Sequence[str]) -> str:
    """The record's new body: the lines of the kept kinds, in record order."""
    keep = {i for k in kinds if k.letter in kept for i in k.lines}
    return "\n".join(line for i, line in enumerate(lines) if i in keep)
