"""The incremental decision inside an editable turn: ask, collect, apply when room is needed.

For each new editable unit the runtime asks short trailing questions after the shared prefix
(the model's choice among earlier units, or the question judge's restatement and answer,
:mod:`picocontext.choices`), remembers the units chosen for deletion, and applies them as one
atomic :class:`~picocontext.edits.Edit` through the core's validator once the answer prompt
would fill more than ``apply_at`` of the window, receipted like a model's ``edit_context``
call. A turn without an edit is a keep, reported like a model's ``keep_context`` call; its
answer prompt carries no receipt, so it is append-only's answer prompt. With
``ChoiceRules.shorten_over`` each long record is also asked once which kinds of its lines to
keep, and the kept lines replace its body in the step's edit at once.

The decision runs against a :class:`DecisionRun` (the session's run of one turn: its budget,
usage, report lists and model calls) and the session's :class:`DecisionMemory` (what it asked
about, chose and restated, kept across turns); it never touches the session itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from picocontext.backend import ModelResponse, ModelToolCall, Phase, PreparedPrompt
from picocontext.budget import RunBudget, Usage, check_prompt
from picocontext.cancel import CancelToken, check
from picocontext.choices import (
    CHOICE_OUTPUT_TOKENS,
    MAX_CHOICES_PER_STEP,
    SHORTEN_KEEPS_AT_MOST,
    AnswerVerdict,
    ChoiceRules,
    Option,
    Plan,
    Question,
    Unit,
    ValueChange,
    adds_nothing,
    asks_about,
    decided_by_values,
    judge_answer,
    judge_recheck,
    kinds_schema,
    lines_about,
    lines_left_out,
    members_missing,
    none_schema,
    plan,
    read_kinds,
    read_question,
    relevant_lines,
    replacement_edit,
    restate_excerpt,
    shared_question,
    shorten_candidates,
    shortened_body,
    unit_text,
    value_change,
)
from picocontext.edits import EDIT_TOOL, edit_payload, keep_payload
from picocontext.errors import BudgetExceeded, PicoContextError
from picocontext.prompts import (
    ANSWER_OUTPUT_TOKENS,
    QUESTION_OUTPUT_TOKENS,
    SHORTEN_OUTPUT_TOKENS,
    accepted_detail,
    answer_question,
    kept_detail,
    recheck_question,
    restate_question,
    shorten_question,
)
from picocontext.receipts import Receipts
from picocontext.records import Record, Snapshot
from picocontext.report import Choice, Outcome
from picocontext.working import WorkingContext


@dataclass
class DecisionMemory:
    """What the incremental decision keeps across the turns of one session, in memory (a
    reopened session asks again)."""

    # Record ids already asked about (at most MAX_CHOICES_PER_STEP questions a step).
    judged: set[str] = field(default_factory=set)
    # Units chosen but not deleted yet, waiting for the window to need the room, by key.
    pending: dict[str, Unit] = field(default_factory=dict)
    # The question each earlier unit answers (question judge), by (unit key, unit text).
    questions: dict[tuple[str, str], str | None] = field(default_factory=dict)
    # The unit whose question another unit took, and why (``shared_question``), by the same
    # key.
    shared_from: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    # The reply and verdict of each pair decided by its values, by its question and the
    # values only one side had (:func:`value_change`), with the pair it was asked of.
    answers: dict[ValueChange, tuple[str, str, AnswerVerdict]] = field(default_factory=dict)
    # Record ids already asked which of their lines to keep (``shorten_over``).
    shorten_asked: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class DecisionSettings:
    """How one turn decides: ``rules`` for asking, ``apply_at`` (share of the window the
    answer prompt may fill before pending deletions apply; 0: at once) and ``none_margin``
    (nats a picked option must beat ``none`` by, where the engine reports probabilities)."""

    rules: ChoiceRules = field(default_factory=ChoiceRules)
    apply_at: float = 0.0
    none_margin: float | None = None


class DecisionRun(Protocol):
    """What the decision needs of the session's run of one turn."""

    budget: RunBudget
    usage: Usage
    cancel: CancelToken | None
    choices: list[Choice]
    edit_calls: int
    keep_calls: int
    final_prompt: PreparedPrompt | None

    @property
    def state(self) -> WorkingContext: ...

    def prepare(
        self,
        snapshot: Snapshot,
        phase: Phase,
        control: tuple[Record, ...] = (),
        *,
        guidance: str | None = None,
        answer_schema_json: str | None = None,
    ) -> PreparedPrompt: ...

    def dispatch(self, prompt: PreparedPrompt, cap: int) -> ModelResponse: ...

    def receipts(self, current: WorkingContext, control: tuple[Record, ...]) -> Receipts: ...

    def commit(
        self, candidate: WorkingContext, response: ModelResponse, arguments: str
    ) -> None: ...

    def attribute(
        self, before: Snapshot, after: PreparedPrompt, keep: tuple[Record, ...] | None = None
    ) -> None: ...

    def attempt(
        self, response: ModelResponse, arguments: str, outcome: Outcome, detail: str
    ) -> None: ...


class IncrementalDecision:
    """One turn's incremental decision over ``run``, remembering across turns in ``memory``."""

    def __init__(
        self, run: DecisionRun, memory: DecisionMemory, settings: DecisionSettings
    ) -> None:
        self.run = run
        self.memory = memory
        self.rules = settings.rules
        self.apply_at = settings.apply_at
        self.none_margin = settings.none_margin
        # The unedited answer prompt's size for the snapshot it was rendered on: the room
        # check and every question-judge call reserve it, and rendering the whole history
        # again for each of them would tokenize it once a call.
        self._answer_size: tuple[Snapshot, int] | None = None

    def decide(self) -> None:
        """The incremental decision: one constrained choice per new editable record (which
        earlier record it replaces, or none), every question over the same snapshot so each
        prefills only its trailing message; the replacements become one atomic edit, judged
        by the validator and receipted like a model's ``edit_context`` call."""
        current = self.run.state
        snapshot = current.snapshot
        steps = plan(snapshot, self.memory.judged, rules=self.rules)
        for unit in steps.skipped:
            self.memory.judged.update(unit.ids)
            self.run.choices.append(
                Choice(
                    records=unit.ids,
                    options=(),
                    handles=(),
                    asked=False,
                    detail=f"not asked: more than {MAX_CHOICES_PER_STEP} new records this step",
                )
            )
        live = set(snapshot.ids)
        pending = self.memory.pending
        for key in [k for k, u in pending.items() if not all(i in live for i in u.ids)]:
            del pending[key]
        bodies = self.shorten(snapshot)
        chosen = self.ask_choices(snapshot, steps, list(pending.values()))
        pending.update((u.key, u) for u in chosen)
        replies = "; ".join(reply_line(c, self.rules.judge == "question") for c in self.run.choices)
        said = ModelResponse(text=replies)
        # Shortened records are replaced at once (each is among the newest, so the re-prefill
        # is short, and a long record left whole could fill the window before the next step
        # can ask anything); deletions still wait until the room is needed.
        deleting = self.room_needed()
        edit = replacement_edit(snapshot, list(pending.values()) if deleting else [], bodies)
        if edit is not None:
            self.run.edit_calls += 1
            arguments = edit_payload(edit.base_revision, edit.operations)
            try:
                candidate = current.apply(edit)
            except PicoContextError as exc:
                # Cannot happen for deletes of whole unprotected groups; if it does, the
                # context stays as it was and the run answers on it, saying so.
                self.run.attempt(said, arguments, Outcome.REJECTED, exc.message)
            else:
                call = ModelToolCall(name=EDIT_TOOL, arguments=arguments)
                detail = accepted_detail(candidate.revision)
                receipt = self.run.receipts(current, ()).decision(0, (call,), detail)
                self.run.commit(candidate, said, arguments)
                if deleting:
                    pending.clear()
                self.run.final_prompt = self.run.prepare(
                    candidate.snapshot, Phase.COMPLETION, receipt
                )
                self.run.attribute(snapshot, self.run.final_prompt, keep=())
                self.run.attempt(said, arguments, Outcome.EDITED, detail)
                return
        self.run.keep_calls += 1
        arguments = keep_payload(current.revision)
        # No receipt: the model made no call, and a keep changes nothing it reads. So the
        # answer after a keep is append-only's answer prompt token for token (same answer,
        # same cache), where a receipt cost about 108 prompt tokens a step on the main job.
        self.run.final_prompt = self.run.prepare(snapshot, Phase.COMPLETION)
        self.run.attempt(said, arguments, Outcome.KEPT, kept_detail(current.revision))

    def room_needed(self) -> bool:
        """Whether the chosen deletions apply now: always when ``apply_at`` is 0, else when
        the unedited answer prompt plus its allowance would fill more than that share of the
        window (or not fit at all)."""
        if self.apply_at <= 0:
            return True
        needed = (
            self.answer_tokens(self.run.state.snapshot) + self.run.budget.completion_output_tokens
        )
        return needed > self.apply_at * self.run.budget.context_window

    def answer_tokens(self, snapshot: Snapshot) -> int:
        """The token count of the unedited answer prompt on ``snapshot`` (kept for the last
        snapshot asked about)."""
        if self._answer_size is None or self._answer_size[0] is not snapshot:
            # as it is sent after a keep: reserving less let the judge's calls spend what the
            # answer then lacked
            tokens = self.run.prepare(snapshot, Phase.COMPLETION).token_count
            self._answer_size = (snapshot, tokens)
        return self._answer_size[1]

    def ask_choices(
        self, snapshot: Snapshot, steps: Plan, pending: Sequence[Unit] = ()
    ) -> list[Unit]:
        """Ask the planned questions in order; returns the units chosen for deletion (a unit
        already ``pending`` is not offered again). A question the budget cannot afford
        (keeping the answer's allowance) ends the asking: it and the rest are reported as not
        asked and stay new for the next step."""
        budget = self.run.budget
        cap = min(budget.edit_output_tokens, CHOICE_OUTPUT_TOKENS)
        chosen: list[Unit] = []
        for position, unit in enumerate(steps.asked):
            check(self.run.cancel)
            removed = [u.key for u in [*pending, *chosen]]
            sure = steps.runtime_pick(unit, removed)
            if sure is not None:
                self.memory.judged.update(unit.ids)
                self.run.choices.append(runtime_choice(unit, *sure))
                chosen.append(sure[0])
                continue
            question = steps.question(unit, removed)
            if question is None:
                self.memory.judged.update(unit.ids)  # nothing earlier it could replace
                if steps.words is not None and steps.earlier(unit, removed):
                    self.run.choices.append(unshared(unit))
                continue
            if self.rules.judge == "question":
                try:
                    # judged pairs land in ``chosen`` as they are judged, so a budget stop
                    # at the unit's second pair keeps what its first one chose
                    pairs = steps.most_alike(question, self.rules.pairs)
                    self.judge_by_answers(snapshot, question, pairs, chosen)
                except BudgetExceeded as exc:
                    self.not_asked(steps.asked[position:], exc)
                    break
                self.memory.judged.update(unit.ids)
                continue
            prompt = self.run.prepare(
                snapshot,
                Phase.CHOICE,
                guidance=question.text(),
                answer_schema_json=question.schema_json(),
            )
            try:
                check_prompt(
                    budget,
                    self.run.usage,
                    prompt.token_count,
                    cap,
                    reserve=budget.completion_output_tokens,
                    cancel=self.run.cancel,
                )
            except BudgetExceeded as exc:
                self.not_asked(steps.asked[position:], exc)
                break
            response = self.run.dispatch(prompt, cap)
            self.memory.judged.update(unit.ids)
            made = self.choice(question, prompt, response)
            margin, picked_logprob = self.none_margin, response.logprob
            if made.chosen is not None and margin is not None and picked_logprob is not None:
                made = self.weigh_none(snapshot, question, made, picked_logprob, margin, cap)
            self.run.choices.append(made)
            picked = self.run.choices[-1].chosen
            if picked is not None:
                chosen.extend(o.unit for o in question.options if o.unit.key == picked)
        return chosen

    def not_asked(self, units: Sequence[Unit], why: BudgetExceeded) -> None:
        """Report ``units`` as not asked: the budget could not afford their questions."""
        for later in units:
            self.run.choices.append(
                Choice(
                    records=later.ids,
                    options=(),
                    handles=(),
                    asked=False,
                    detail=f"not asked: {why.message}",
                )
            )

    def aside(self, snapshot: Snapshot, guidance: str, cap: int) -> tuple[str, int, int, int]:
        """One free-text trailing question after the shared prefix; returns the reply, its
        prompt, prefill and generated tokens. Raises BudgetExceeded when it cannot be
        afforded (keeping the answer's allowance)."""
        response, prompt_tokens, prefill = self.ask(snapshot, guidance, cap)
        return response.text, prompt_tokens, prefill, response.generated_tokens

    def ask(
        self, snapshot: Snapshot, guidance: str, cap: int, answer_schema_json: str | None = None
    ) -> tuple[ModelResponse, int, int]:
        """One trailing question after the shared prefix, its reply shaped by
        ``answer_schema_json`` when given; returns the response, its prompt and prefill
        tokens. Raises BudgetExceeded when it cannot be afforded (keeping the answer's
        allowance)."""
        prompt = self.run.prepare(
            snapshot, Phase.CHOICE, guidance=guidance, answer_schema_json=answer_schema_json
        )
        cap = min(cap, self.run.budget.edit_output_tokens)
        # Keep room for the answer itself, its prompt as well as its allowance: several
        # questions a step could otherwise spend what the answer needs.
        check_prompt(
            self.run.budget,
            self.run.usage,
            prompt.token_count,
            cap,
            reserve=self.answer_tokens(snapshot) + self.run.budget.completion_output_tokens,
            cancel=self.run.cancel,
        )
        response = self.run.dispatch(prompt, cap)
        prefill = prompt.token_count if response.prefill_tokens is None else response.prefill_tokens
        return response, prompt.token_count, prefill

    def shorten(self, snapshot: Snapshot) -> dict[str, str]:
        """``rules.shorten_over``: ask, for each long record not asked before (newest
        first), which kinds of its lines to keep; returns the new bodies to give them. A
        reply that names anything but offered kinds, hit its output limit or leaves out too
        little changes nothing. A question the budget cannot afford ends the asking; its
        record and the rest are asked at the next step."""
        over = self.rules.shorten_over
        if over is None:
            return {}
        bodies: dict[str, str] = {}
        for candidate in shorten_candidates(snapshot, self.memory.shorten_asked, over):
            check(self.run.cancel)
            record, lines, kinds = candidate.record, candidate.lines, candidate.kinds
            guidance = shorten_question(
                record.id, [(k.letter, len(k.lines), lines[k.lines[0]]) for k in kinds]
            )
            try:
                response, prompt_tokens, prefill = self.ask(
                    snapshot, guidance, SHORTEN_OUTPUT_TOKENS, kinds_schema(kinds)
                )
            except BudgetExceeded:
                break
            self.memory.shorten_asked.add(record.id)
            reading = read_kinds(response.text, kinds)
            valid, detail = reading.valid, reading.detail
            if response.tool_calls:
                valid, detail = False, "a shortening is a reply, not a tool call; nothing applied"
            elif response.reached_token_limit:
                valid, detail = False, "the reply hit its output limit; nothing applied"
            elif valid and reading.kept is not None:
                body = shortened_body(lines, kinds, reading.kept)
                if len(body) <= SHORTEN_KEEPS_AT_MOST * len(record.body):
                    bodies[record.id] = body
                    detail += f": shortened from {len(record.body):,} to {len(body):,} characters"
                else:
                    detail += "; too little left out to replace the record"
            self.run.choices.append(
                Choice(
                    records=(record.id,),
                    options=(),
                    handles=(),
                    reply=response.text,
                    valid=valid,
                    shorten=True,
                    detail=detail,
                    prompt_tokens=prompt_tokens,
                    prefill_tokens=prefill,
                    generated_tokens=response.generated_tokens,
                )
            )
        return bodies

    def judge_by_answers(
        self, snapshot: Snapshot, question: Question, pairs: Sequence[Option], chosen: list[Unit]
    ) -> None:
        """``judge: "question"``: for each earlier unit in ``pairs`` (the offered ones most
        alike the new unit), the question it answers (asked once per unit) and that question
        over the two units; the earlier unit is appended to ``chosen`` when the answer takes
        its value from the new unit only. One :class:`Choice` per pair says why. Raises
        BudgetExceeded when a call cannot be afforded; what was chosen before stays chosen."""
        new = question.new
        later = unit_text(snapshot, new)
        members = self.rules.json_members
        for option in pairs:
            check(self.run.cancel)
            earlier = unit_text(snapshot, option.unit)
            tokens = [0, 0, 0]
            missing = members_missing(earlier, later) if members else ()
            if missing:
                why = (
                    f"{new.key} lacks what {option.unit.key} says of {', '.join(missing)}, so it "
                    "cannot replace it; kept without asking"
                )
                self.run.choices.append(kept_pair(new, option, why, tokens, asked=False))
                continue
            key = (option.unit.key, earlier)
            if key not in self.memory.questions:
                shared = (
                    shared_question(
                        earlier, self.memory.questions, members, self.rules.reuse_within
                    )
                    if self.rules.reuse_questions
                    else None
                )
                if shared is not None:
                    self.memory.questions[key] = shared[1]
                    self.memory.shared_from[key] = (shared[0], shared[2])
                else:
                    reply, *spent = self.aside(
                        snapshot,
                        restate_question(option.unit.key, restate_excerpt(earlier)),
                        QUESTION_OUTPUT_TOKENS,
                    )
                    tokens = [a + b for a, b in zip(tokens, spent, strict=True)]
                    self.memory.questions[key] = read_question(reply)
            source = self.memory.shared_from.get(key)
            taken = f" (restated for {source[0]}, {source[1]})" if source else ""
            asked = self.memory.questions[key]
            if asked is None:
                why = f"no question came back for {option.unit.key}; kept"
                self.run.choices.append(kept_pair(new, option, why, tokens, valid=False))
                continue
            # Both records are quoted by the lines the question is about, and judged on them.
            older = relevant_lines(earlier, asked, members)
            newer = relevant_lines(later, asked, members)
            pair = (option.unit.key, earlier, older), (new.key, later, newer)
            settled = self.settled(asked, *pair)
            if settled is not None:
                why = f"asked {asked!r} of {option.unit.key}{taken}: {settled}; kept without asking"
                self.run.choices.append(kept_pair(new, option, why, tokens, asked=False))
                continue
            change = value_change(asked, older, newer)
            known = self.memory.answers.get(change) if self.rules.reuse_answers else None
            if known is not None:
                # the verdict of a pair with the same change, without a call (no reply)
                reply, where, verdict = known
                answer = ""
                reason = (
                    f"the same values changed in {where}, answered {_short(reply)!r} "
                    f"({verdict.explain()})"
                )
            else:
                guidance = answer_question(
                    asked, (option.unit.key, older), (new.key, newer), self.rules.newer_first
                )
                answer, *spent = self.aside(snapshot, guidance, ANSWER_OUTPUT_TOKENS)
                tokens = [a + b for a, b in zip(tokens, spent, strict=True)]
                verdict = judge_answer(answer, asked, older, newer)
                if (
                    self.rules.recheck
                    and not verdict.stale
                    and verdict.old
                    and asks_about(newer, asked)
                ):
                    again, verdict, *spent = self.recheck(snapshot, asked, older, (new.key, newer))
                    tokens = [a + b for a, b in zip(tokens, spent, strict=True)]
                    answer = f"{answer} / over {new.key} alone: {again}"
                if (
                    decided_by_values(verdict)
                    and not verdict.rechecked
                    and (verdict.stale or not self.rules.recheck)
                ):
                    # Only a verdict the recheck could not have changed: whether it is asked
                    # depends on the new record's words, which another pair need not share.
                    where = f"{new.key} over {option.unit.key}"
                    self.memory.answers.setdefault(change, (answer, where, verdict))
                reason = verdict.explain()
            outcome = f"replaces {option.unit.key}" if verdict.stale else "keeps it"
            if known is not None:
                outcome += " without asking"
            self.run.choices.append(
                Choice(
                    records=new.ids,
                    options=(option.unit.key,),
                    handles=(option.handle,),
                    reply=answer,
                    chosen=option.unit.key if verdict.stale else None,
                    asked=known is None,
                    detail=f"asked {asked!r} of {option.unit.key}{taken}: {reason}; {outcome}",
                    prompt_tokens=tokens[0],
                    prefill_tokens=tokens[1],
                    generated_tokens=tokens[2],
                )
            )
            if verdict.stale:
                chosen.append(option.unit)

    def settled(
        self, asked: str, earlier: tuple[str, str, str], later: tuple[str, str, str]
    ) -> str | None:
        """Why the pair is kept whatever the model would answer ``asked``, or ``None`` when the
        answer must decide. ``earlier`` and ``later`` are each a unit's key, text and quoted
        lines."""
        (old_key, old_text, older), (new_key, new_text, newer) = earlier, later
        members = self.rules.json_members
        if not self.rules.ask_unrelated and not lines_about(new_text, asked, members):
            # A record of several lines with none about the question: the answer prompt
            # could quote only its first line, which the question does not single out.
            return f"no line of {new_key} shares a word with it"
        if not self.rules.ask_settled and adds_nothing(asked, older, newer):
            return f"{new_key} says nothing on it that {old_key} does not"
        if self.rules.guard_lines:
            # Whatever the answer, deleting the earlier unit would lose these lines.
            left_out = lines_left_out(old_text, new_text, asked, members)
            if left_out:
                shown = ", ".join(repr(_short(line)) for line in left_out[:2])
                more = f" and {len(left_out) - 2} more" if len(left_out) > 2 else ""
                return f"{new_key} leaves unsaid {shown}{more}, so it cannot replace it"
        return None

    def recheck(
        self, snapshot: Snapshot, asked: str, older: str, newer: tuple[str, str]
    ) -> tuple[str, AnswerVerdict, int, int, int]:
        """The question once more over the new unit alone (``rules.recheck``); returns the
        reply, its verdict (:func:`judge_recheck`) and the call's prompt, prefill and
        generated tokens."""
        reply, prompt, prefill, generated = self.aside(
            snapshot, recheck_question(asked, newer), ANSWER_OUTPUT_TOKENS
        )
        return reply, judge_recheck(reply, asked, older, newer[1]), prompt, prefill, generated

    def weigh_none(
        self,
        snapshot: Snapshot,
        question: Question,
        made: Choice,
        picked: float,
        margin: float,
        cap: int,
    ) -> Choice:
        """Score the reply ``none`` on the same prompt (its grammar allows only ``none``, so
        the cached prompt is reused and a few tokens are decoded) and keep the pick only when
        it beats ``none`` by more than the margin."""
        forced = self.run.prepare(
            snapshot,
            Phase.CHOICE,
            guidance=question.text(),
            answer_schema_json=none_schema(question.reply),
        )
        try:
            check_prompt(
                self.run.budget,
                self.run.usage,
                forced.token_count,
                cap,
                reserve=self.run.budget.completion_output_tokens,
                cancel=self.run.cancel,
            )
        except BudgetExceeded:
            return made
        response = self.run.dispatch(forced, cap)
        if response.logprob is None:
            return made
        update: dict[str, object] = {"option_logprob": picked, "none_logprob": response.logprob}
        if picked - response.logprob <= margin:
            update |= {
                "chosen": None,
                "overruled": True,
                "detail": f"{made.detail}; overruled: not more likely than none by {margin} nats",
            }
        return made.model_copy(update=update)

    def choice(self, question: Question, prompt: PreparedPrompt, response: ModelResponse) -> Choice:
        """The record of one answered question; an illegal reply is invalid, never applied."""
        reading = question.read(response.text)
        valid, detail = reading.valid, reading.detail
        if response.tool_calls:
            valid, detail = False, "a choice is a reply, not a tool call; nothing applied"
        elif response.reached_token_limit and not valid:
            detail = "the reply hit its output limit before naming an option; nothing applied"
        option = reading.option if valid else None
        prefill = prompt.token_count if response.prefill_tokens is None else response.prefill_tokens
        return Choice(
            records=question.new.ids,
            options=tuple(o.unit.key for o in question.options),
            handles=tuple(o.handle for o in question.options),
            reply=response.text,
            chosen=option.unit.key if option is not None else None,
            valid=valid,
            detail=detail,
            prompt_tokens=prompt.token_count,
            prefill_tokens=prefill,
            generated_tokens=response.generated_tokens,
        )


def _short(line: str, limit: int = 60) -> str:
    """A line as a detail quotes it: at most ``limit`` characters, cut with an ellipsis."""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def unshared(unit: Unit) -> Choice:
    """The report of a new unit with no earlier editable unit to offer under the rules (none
    shares a content word, or enough of them, or the model is not asked): it replaces
    nothing, and no model call was made."""
    return Choice(
        records=unit.ids,
        options=(),
        handles=(),
        asked=False,
        detail="no earlier record shares a content word with it (or enough of them): "
        "replaces nothing (no call)",
    )


def kept_pair(
    new: Unit,
    option: Option,
    detail: str,
    tokens: Sequence[int],
    *,
    valid: bool = True,
    asked: bool = True,
) -> Choice:
    """The report of a judged pair kept without an answer; ``tokens`` are the prompt, prefill
    and generated tokens its restatement spent."""
    prompt, prefill, generated = tokens
    return Choice(
        records=new.ids,
        options=(option.unit.key,),
        handles=(option.handle,),
        valid=valid,
        asked=asked,
        detail=detail,
        prompt_tokens=prompt,
        prefill_tokens=prefill,
        generated_tokens=generated,
    )


def reply_line(choice: Choice, judged_pairs: bool) -> str:
    """One choice in the decision's model output: the new record and the reply (``(no call)``
    when the runtime decided without asking), and for the question judge the earlier record
    the answer was about."""
    about = f" about {choice.options[0]}" if judged_pairs and len(choice.options) == 1 else ""
    # A choice made without a call has no reply; say so rather than show an empty one.
    said = choice.reply.strip() if choice.asked else "(no call)"
    return f"{','.join(choice.records)}{about}: {said}"


def runtime_choice(unit: Unit, picked: Unit, share: float) -> Choice:
    """The report of the runtime's own overlap pick (no model call)."""
    return Choice(
        records=unit.ids,
        options=(picked.key,),
        handles=(picked.key,),
        chosen=picked.key,
        asked=False,
        detail=f"picked by the runtime: it repeats {share:.0%} of the content words of "
        f"{picked.key} (no call)",
    )
