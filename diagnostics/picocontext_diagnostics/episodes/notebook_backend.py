"""A deterministic "ideal model" for notebook episodes.

It plays both phases by rule, so the whole pipeline — decisions, edits, receipts, budgets,
answers and grading — runs without weights, in any policy:

* decision phase, targeted style: every unprotected tool result is replaced by its own
  ``FACT``/``REMOVE`` lines (unchanged records are skipped), and unprotected user requests
  that a newer user record follows (answered already, no notebook line in them) are deleted
  (at most 32 operations in all);
* decision phase, summarize style: the last unprotected record receives the sorted
  ``FACT key=value`` lines of the folded notebook and every other unprotected record is
  emptied; if that needs more than 32 operations it proposes nothing;
* no operations → ``keep_context``; otherwise ``edit_context`` (sorted-key JSON arguments);
* completion: sorted-key ``{"facts": ...}`` JSON of the fold of the live context;
* tools phase (navigated and distilled policies), a reader of what it is shown: the state is
  its newest visible answer (a full notebook it wrote earlier) updated by every newer visible
  FACT/REMOVE line, with what earlier tool results returned (and what a navigator prefetched
  into the archive index) folded underneath. When a key the
  latest request asks for is still unknown it looks deterministically — ``recall`` of
  ``FACT <key>`` at entity altitude (digest tools), or ``open`` of the newest index line it has
  not opened (navigation tools) — and otherwise answers with what it knows (a missing key is
  then graded as a miss, never invented). The completion that ends a tool loop reads the same
  way.

Usage is counted in UTF-8 bytes of the output. Output longer than the allowance is clipped on
a character boundary and flagged ``reached_token_limit`` (a clipped decision carries no call).
``drop_keys`` is deliberate fault injection: those keys' lines are lost when editing, which
lets tests and demos show that the graders catch lost live context.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

from picocontext import (
    EDIT_TOOL,
    KEEP_TOOL,
    CancelToken,
    EditStyle,
    ModelResponse,
    ModelToolCall,
    Phase,
    PreparedPrompt,
    Record,
    Role,
    Snapshot,
)
from picocontext.policies import NAVIGATED_INDEX_HEADER
from picocontext_diagnostics.episodes.fixtures import dumps_sorted
from picocontext_diagnostics.episodes.grading import (
    FACT_PREFIX,
    REMOVE_PREFIX,
    fold_lines,
    notebook_state,
    parse_facts_answer,
)
from picocontext_diagnostics.errors import AnswerFormatError

MAX_OPERATIONS = 32
RECALL_WORDS = 400
# One line of a navigated index: node id, kind (``leaf`` or ``branch:N``), text.
INDEX_LINE = re.compile(r"^(\S+) \[(leaf|branch:\d+)\] (.*)$", re.MULTILINE)
_RECORD_NUMBER = re.compile(r"#(\d+)")
_LEAF_PART = re.compile(r"\(part (\d+) of \d+\)\s*$")
_OWN_ANSWER = re.compile(r"#(\d+) assistant(?! calls)\b")
_OUT_OF_BUDGET = re.compile(r"^Opening '[^'\n]*' costs \d+ tokens but only \d+ remain")
_RECALL_PIECE = re.compile(
    r"^--- older group (\d+)(?:, part (\d+)/\d+)? \([^)\n]*\)$", re.MULTILINE
)
MODEL_ID = "deterministic-notebook"
MODEL_REVISION = "1"


def clip_utf8(text: str, max_bytes: int) -> tuple[str, int, bool]:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes on a character boundary: the text,
    its length in bytes, and whether anything was cut."""
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text, len(raw), False
    clipped = raw[:max_bytes].decode("utf-8", errors="ignore")
    return clipped, len(clipped.encode("utf-8")), True


def history_chunks(results: Sequence[str]) -> list[str]:
    """Tool results cut into pieces of older history, oldest first and each once.

    A distilled recall lists pieces as ``--- older group G[, part P/N] (node id)``; an opened
    navigated leaf starts with its breadcrumb ``[context] … › #N …``. Text without such a
    position (branch listings, headers) comes first, in call order."""
    unplaced: list[str] = []
    placed: dict[tuple[int, int], str] = {}
    for text in results:
        first = text.split("\n", 1)[0]
        if first.startswith("[context]"):
            numbers = _RECORD_NUMBER.findall(first)
            if numbers:
                part = _LEAF_PART.search(first)
                placed.setdefault((int(numbers[-1]), int(part.group(1)) if part else 0), text)
                continue
        pieces = _RECALL_PIECE.split(text)
        unplaced.append(pieces[0])
        for i in range(1, len(pieces) - 2, 3):
            key = (int(pieces[i]), int(pieces[i + 1] or 1))
            placed.setdefault(key, pieces[i + 2])
    return [*unplaced, *(placed[k] for k in sorted(placed))]


_PREFETCHED = re.compile(r"\n(?=\[context\] )")


def archive_index(prompt: PreparedPrompt) -> list[Record]:
    """The navigated policy's archive index: a protected user record standing in the shown
    history where the archive ends (the tool receipts follow the question)."""
    return [
        r
        for r in prompt.input.context.records
        if r.role is Role.USER and r.body.startswith(NAVIGATED_INDEX_HEADER)
    ]


def _facts_line(line: str) -> dict[str, str] | None:
    """The notebook of a line that is one whole facts answer, else None."""
    if not line.startswith('{"facts"'):
        return None
    try:
        return dict(parse_facts_answer(line))
    except AnswerFormatError:
        return None


def superseded(snapshot: Snapshot) -> list[Record]:
    """Unprotected user requests that a newer user record follows and that carry no notebook
    line: each was answered already, so deleting it loses nothing the fold needs. (Protected
    requests, the default in episodes, are never touched; answers are kept.)"""
    users = [r for r in snapshot.records if r.role is Role.USER]
    return [
        r
        for r in users[:-1]
        if not r.protected
        and not any(line.startswith((FACT_PREFIX, REMOVE_PREFIX)) for line in r.body.split("\n"))
    ]


class DeterministicNotebookBackend:
    """Satisfies :class:`picocontext.ModelBackend`; pair it with any token counter."""

    # Its rules consolidate the notebook through edit_context, so an ``auto`` editable policy
    # asks it for tool calls (a real small model gets the incremental choice).
    decision_protocol = "tool-call"

    def __init__(self, drop_keys: Iterable[str] = ()) -> None:
        self.drop_keys = frozenset(drop_keys)
        self.calls = 0

    @property
    def model_id(self) -> str:
        return MODEL_ID

    def _keeps(self, line: str) -> bool:
        if line.startswith(FACT_PREFIX):
            key = line[len(FACT_PREFIX) :].partition("=")[0]
        elif line.startswith(REMOVE_PREFIX):
            key = line[len(REMOVE_PREFIX) :]
        else:
            return False
        return key not in self.drop_keys

    def targeted_operations(self, snapshot: Snapshot) -> list[dict[str, str]]:
        ops: list[dict[str, str]] = []
        for record in snapshot.records:
            if record.protected or record.role is not Role.TOOL:
                continue
            body = "\n".join(line for line in record.body.split("\n") if self._keeps(line))
            if body != record.body:
                ops.append({"action": "replace", "recordID": record.id, "body": body})
        ops.extend({"action": "delete", "recordID": r.id} for r in superseded(snapshot))
        return ops[:MAX_OPERATIONS]

    def summary_operations(self, snapshot: Snapshot) -> list[dict[str, str]]:
        editable: list[Record] = [r for r in snapshot.records if not r.protected]
        if not editable:
            return []
        state = notebook_state(snapshot)
        lines = [f"{FACT_PREFIX}{k}={v}" for k, v in sorted(state.items())]
        summary = "\n".join(line for line in lines if self._keeps(line))
        ops: list[dict[str, str]] = []
        for record in editable[:-1]:
            if record.body:
                ops.append({"action": "replace", "recordID": record.id, "body": ""})
        last = editable[-1]
        if last.body != summary:
            ops.append({"action": "replace", "recordID": last.id, "body": summary})
        return ops if len(ops) <= MAX_OPERATIONS else []

    def decide(self, prompt: PreparedPrompt) -> tuple[str, str]:
        """The (tool name, arguments) this backend would send for ``prompt``."""
        snapshot = prompt.input.context
        if prompt.input.edit_style is EditStyle.SUMMARIZE:
            ops = self.summary_operations(snapshot)
        else:
            ops = self.targeted_operations(snapshot)
        if not ops:
            return KEEP_TOOL, dumps_sorted({"baseRevision": snapshot.revision})
        return EDIT_TOOL, dumps_sorted({"baseRevision": snapshot.revision, "operations": ops})

    def answer(self, prompt: PreparedPrompt) -> str:
        return dumps_sorted({"facts": notebook_state(prompt.input.context)})

    # -- tools phase: a reader of what it is shown ----------------------------------------
    def seen_state(self, prompt: PreparedPrompt) -> dict[str, str]:
        """What a careful reader knows from this prompt: older history first -- what a
        navigator prefetched into the archive index, then the tool results it fetched itself --
        then the visible records; a visible answer of its own resets the state to that full
        notebook, later FACT/REMOVE lines update it. (Index lines start with a node id, so only
        the records' own lines fold.)"""
        state: dict[str, str] = {}
        results: list[str] = []
        for r in archive_index(prompt):
            # What a navigator prefetched is spliced in as leaves, each under its own
            # breadcrumb: placed like an opened leaf, so the reading order holds.
            results.extend(_PREFETCHED.split(r.body))
        results.extend(r.body for r in prompt.input.control_records if r.role is Role.TOOL)
        for chunk in history_chunks(results):
            for line in chunk.split("\n"):
                answer = _facts_line(line)
                if answer is None:
                    fold_lines((line,), state)
                else:  # an archived answer of its own, read back verbatim
                    state = answer
        for record in prompt.input.context.records:
            if record.role is Role.ASSISTANT and record.body and not record.tool_calls:
                try:
                    state = dict(parse_facts_answer(record.body))
                    continue
                except AnswerFormatError:
                    pass
            fold_lines(record.body.split("\n"), state)
        return state

    @staticmethod
    def asked_keys(prompt: PreparedPrompt) -> tuple[str, ...] | None:
        """Keys of the answer shape in the latest user request (None: no shape found)."""
        for record in reversed(prompt.input.context.records):
            if record.role is not Role.USER:
                continue
            start = record.body.find('{"facts"')
            if start < 0:
                continue
            try:
                shape, _ = json.JSONDecoder().raw_decode(record.body[start:])
            except ValueError:
                continue
            facts = shape.get("facts") if isinstance(shape, dict) else None
            if isinstance(facts, dict):
                return tuple(str(k) for k in facts)
        return None

    @staticmethod
    def _offered(prompt: PreparedPrompt) -> set[str]:
        tools = prompt.input.tools if prompt.input.phase is Phase.TOOLS else None
        return {str(t.get("function", t).get("name", "")) for t in tools or ()}

    @staticmethod
    def _exchanges(prompt: PreparedPrompt) -> list[tuple[str, dict[str, object], str]]:
        """(verb, JSON-object arguments, result text) of this turn's tool calls, in order;
        calls whose arguments are not a JSON object are skipped."""
        results = {r.tool_call_id: r.body for r in prompt.input.control_records if r.tool_call_id}
        out: list[tuple[str, dict[str, object], str]] = []
        for record in prompt.input.control_records:
            for call in record.tool_calls:
                try:
                    value = json.loads(call.arguments)
                except ValueError:
                    continue
                if isinstance(value, dict):
                    out.append((call.name, value, results.get(call.id, "")))
        return out

    def look_up(self, prompt: PreparedPrompt, missing: Sequence[str]) -> ModelToolCall | None:
        """The next deterministic look into older history, or None when none is left."""
        offered = self._offered(prompt)
        if "recall" in offered:
            asked = {str(a.get("query")) for v, a, _ in self._exchanges(prompt) if v == "recall"}
            for key in missing:
                query = f"{FACT_PREFIX}{key}"
                if query not in asked:
                    arguments = {"altitude": "entity", "budget": RECALL_WORDS, "query": query}
                    return ModelToolCall(name="recall", arguments=dumps_sorted(arguments))
            return None
        if "open" in offered:
            return self._navigate(prompt)
        return None

    def _navigate(self, prompt: PreparedPrompt) -> ModelToolCall | None:
        """Read like someone who knows that each of its own answers is a full notebook: the
        newest archived answer first, then whatever is newer than it, newest first (branches
        are opened to list what they hold). When the runtime says the reading budget is
        spent, close the oldest leaf still open (its text stays in this turn's transcript, so
        nothing read is lost) and try again; with nothing left to close or to read, answer
        with what is known."""
        kinds: dict[str, str] = {}
        numbers: dict[str, int] = {}
        holds_answer: dict[str, int] = {}  # newest own answer a node is or lists
        for record in (*archive_index(prompt), *prompt.input.control_records):
            for node_id, kind, text in INDEX_LINE.findall(record.body):
                kinds[node_id] = kind
                newest = max((int(n) for n in _RECORD_NUMBER.findall(text)), default=0)
                numbers[node_id] = max(numbers.get(node_id, 0), newest)
                answer = max((int(n) for n in _OWN_ANSWER.findall(text)), default=0)
                if answer:
                    holds_answer[node_id] = max(holds_answer.get(node_id, 0), answer)
        read: set[str] = set()
        resident: list[str] = []  # open leaves, oldest first
        out_of_budget = False
        for verb, arguments, result in self._exchanges(prompt):
            node = str(arguments.get("id", ""))
            out_of_budget = False
            if verb == "open":
                if _OUT_OF_BUDGET.match(result):
                    out_of_budget = True
                elif not result.startswith(("Refused", "Unknown", "open needs")):
                    read.add(node)
                    if kinds.get(node) == "leaf" and node not in resident:
                        resident.append(node)
            elif verb == "close" and node in resident:
                resident.remove(node)
        if out_of_budget:
            if not resident:
                return None
            return ModelToolCall(name="close", arguments=dumps_sorted({"id": resident[0]}))
        answers_read = (n for n in read if kinds.get(n) == "leaf" and n in holds_answer)
        horizon = max((holds_answer[n] for n in answers_read), default=0)
        unread = {n: k for n, k in numbers.items() if n != "r" and n not in read and k > horizon}
        if not unread:
            return None
        # A newer answer of its own first (the leaf itself before a branch listing it), then
        # the rest, newest first; the parts of one record in reading order (max() keeps the
        # first of equals, and ids sort by part).
        target = max(
            sorted(unread),
            key=lambda n: (
                holds_answer.get(n, 0) > horizon,
                holds_answer.get(n, 0),
                kinds.get(n) == "leaf",
                unread[n],
            ),
        )
        return ModelToolCall(name="open", arguments=dumps_sorted({"id": target}))

    def read(self, prompt: PreparedPrompt) -> tuple[str, ModelToolCall | None]:
        """(answer, None) or ("", the tool call to make) for a tools-phase prompt."""
        state = self.seen_state(prompt)
        asked = self.asked_keys(prompt)
        keys = tuple(sorted(state)) if asked is None else asked
        missing = [k for k in keys if k not in state]
        if missing and prompt.input.phase is Phase.TOOLS:
            call = self.look_up(prompt, missing)
            if call is not None:
                return "", call
        return dumps_sorted({"facts": {k: state[k] for k in keys if k in state}}), None

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        if cancel is not None:
            cancel.check()
        self.calls += 1
        # A tool-using policy's prompt: its own phase, or the completion closing its loop.
        if prompt.input.phase is Phase.TOOLS or prompt.input.system_text is not None:
            text, call = self.read(prompt)
            if call is not None:
                clipped_args, used, clipped = clip_utf8(call.arguments, max_tokens)
                if clipped:
                    return ModelResponse(
                        text=clipped_args, generated_tokens=used, reached_token_limit=True
                    )
                return ModelResponse(tool_calls=(call,), generated_tokens=used)
            text, used, clipped = clip_utf8(text, max_tokens)
            return ModelResponse(text=text, generated_tokens=used, reached_token_limit=clipped)
        if prompt.input.phase is Phase.EDIT:
            name, arguments = self.decide(prompt)
            text, used, clipped = clip_utf8(arguments, max_tokens)
            if clipped:
                return ModelResponse(text=text, generated_tokens=used, reached_token_limit=True)
            return ModelResponse(
                tool_calls=(ModelToolCall(name=name, arguments=arguments),),
                generated_tokens=used,
            )
        text, used, clipped = clip_utf8(self.answer(prompt), max_tokens)
        return ModelResponse(text=text, generated_tokens=used, reached_token_limit=clipped)


class ShownOnlyReader(DeterministicNotebookBackend):
    """The same reader with its own fetching turned off: it answers from what it is shown and
    never calls a tool (as the 0.5B model does live), so whatever archived fact it answers
    with, a policy's prefetch put in front of it."""

    def look_up(self, prompt: PreparedPrompt, missing: Sequence[str]) -> None:
        return None
