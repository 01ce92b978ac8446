"""The registrations of the policies that run the session's own loop: append-only, editable
and summarize (editable with the fold-everything decision style). Only editable has a setting:
its decision protocol."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from picocontext.backend import EditStyle
from picocontext.choices import MAX_JUDGED_PAIRS, Candidates, ChoiceRules, Judge, ReplyForm
from picocontext.policies.base import AppendOnlyPolicy, EditablePolicy
from picocontext.policies.registry import NoConfig, PolicyContext, PolicySpec
from picocontext.report import RunMode

DecisionProtocol = Literal["auto", "tool-call", "incremental"]

# The decision protocol of ``editable`` when a config does not name one: ``auto`` is the
# incremental choice (the one 0.5-1.5B models can do, docs/policies.md) unless the backend
# declares the protocol its rules implement (the scripted stand-ins implement tool calls).
DEFAULT_DECISION: DecisionProtocol = "auto"
DEFAULT_NONE_MARGIN: float | None = None
# Pending deletions apply only when the answer would no longer fit: each applied edit
# re-prefills the history from its first changed record, so the longest wait batches the most
# choices into one edit. On the main job 1.0 made one edit where 0.75 made two, with the same
# checks passed and 13 % less prefill (docs/policies.md, "Deletions wait").
DEFAULT_APPLY_AT = 1.0
# The incremental decision's default (docs/policies.md): the question judge. The model writes
# the question each earlier record (among the two sharing the most content words with the new
# one) answers, then answers it over the two records, and the runtime replaces the earlier
# record when the answer takes its value from the new one: 0.771 on the 48 decision probes and
# 0.767 on the held-out file, every main-job check passed, at 4.4 calls a probe. The model's
# own choice among the records (``judge: "choice"``) scored 0.479 / 0.467 at 1.6 calls; the
# runtime's word-overlap pick (0.542 / 0.600, no model call, ``{"pick_overlap": 0.4,
# "ask_model": false}``) leaves the decision to no model at all. Both stay opt-in.
DEFAULT_CANDIDATES: Candidates = "shared-word"
DEFAULT_CHOICE_REPLY: ReplyForm = "word"
DEFAULT_PICK_OVERLAP: float | None = None
DEFAULT_ASK_MODEL = True
DEFAULT_JUDGE: Judge = "question"
# The question judge asks once more over the new record alone when its answer over both took
# the older record's value (the 1.5B's usual miss) and the new record names the question's
# subject: 0.771 -> 0.812 on the 48 probes (stale 0.64 -> 0.71, keep 0.95 both), at 5.7 calls a
# probe instead of 4.4.
DEFAULT_RECHECK = True
# Wrappers (progress, recording, cancellation) keep the model they wrap under one of these.
_WRAPPED = ("backend", "inner", "_backend", "_inner", "wrapped")


def declared_protocol(backend: object, depth: int = 4) -> DecisionProtocol | None:
    """The ``decision_protocol`` a backend (or a backend it wraps) declares, if any."""
    seen = backend
    for _ in range(depth):
        declared = getattr(type(seen), "decision_protocol", None)
        if declared in ("tool-call", "incremental"):
            return declared  # type: ignore[no-any-return]
        inner = next((getattr(seen, a) for a in _WRAPPED if getattr(seen, a, None)), None)
        if inner is None or inner is seen:
            return None
        seen = inner
    return None


class EditableConfig(BaseModel):
    """``decision``: ``incremental`` judges each new record once (which earlier record it
    replaces, or none): the model answers one constrained choice (``ask_model``); the
    runtime can pick by repeated content words instead (``pick_overlap``, opt-in).
    ``tool-call`` is the one ``edit_context``/``keep_context`` call with operations. See
    docs/policies.md for how each scores on small models."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision: DecisionProtocol = DEFAULT_DECISION
    # Incremental choices: a picked record stands only when the model's log probability of
    # that reply beats the reply "none" by more than this many nats (scored by a second,
    # grammar-forced call where the engine reports probabilities). None: the greedy reply.
    none_margin: float | None = DEFAULT_NONE_MARGIN
    # Incremental choices: chosen deletions wait until the answer prompt plus its allowance
    # would fill more than this share of the window, then apply together (an edit re-prefills
    # from its first changed record, so deleting before the room is needed costs prefill for
    # nothing); 1 (the default) waits until the answer would not fit, 0 applies them in the
    # step they are chosen.
    apply_at: float = Field(default=DEFAULT_APPLY_AT, ge=0.0, le=1.0)
    # Incremental choices: which earlier records a question offers. ``shared-word``: only
    # those sharing a stemmed content word with the new record (none sharing one: none, no
    # model call); ``all``: every earlier editable record.
    candidates: Candidates = DEFAULT_CANDIDATES
    # Incremental choices under constrained decoding: ``word`` holds the reply to the bare
    # option (what a small model writes by itself), ``json`` to a quoted JSON string.
    choice_reply: ReplyForm = DEFAULT_CHOICE_REPLY
    # Incremental choices, shared-word candidates: offer only earlier records with at least
    # this share of their content words repeated in the new record.
    offer_overlap: float = Field(default=0.0, ge=0.0, le=1.0)
    # Incremental choices: the runtime picks the earlier record with the largest share of its
    # content words repeated in the new one when that share reaches this (no model call);
    # None: never. ``ask_model`` false leaves the decision to that pick alone.
    pick_overlap: float | None = Field(default=DEFAULT_PICK_OVERLAP, ge=0.0, le=1.0)
    ask_model: bool = DEFAULT_ASK_MODEL
    # Incremental choices: ``choice`` asks which earlier record the new one replaces;
    # ``question`` asks the question each offered earlier record answers, then that question
    # over the two records, and replaces the earlier one when the answer repeats what only the
    # new one says.
    judge: Judge = DEFAULT_JUDGE
    # The question judge: the answer prompt lists the new record before the earlier one.
    newer_first: bool = False
    # The question judge: when the answer over both records repeats a value only the earlier
    # one has, ask the question once more over the new record alone (a small model often
    # answers with the first record it reads); a value only the new record has then replaces it.
    recheck: bool = DEFAULT_RECHECK
    # The question judge: how many earlier records, the most alike, each new record is judged
    # against (one answer call each). 1 asks about a quarter fewer calls on the decision
    # probes for about the same exact rate (docs/policies.md, "Fifth round").
    pairs: int = Field(default=MAX_JUDGED_PAIRS, ge=1, le=8)
    # The question judge: also ask about a new record of several lines none of which shares
    # a word with the question (off: kept without a call; docs/policies.md, "Seventh round").
    ask_unrelated: bool = False
    # The question judge: also ask about a pair whose new record says nothing on the question
    # that the earlier one does not (off: kept without a call, as any answer would decide;
    # on only to replay probe runs recorded before the rule, docs/policies.md "Eighth round").
    ask_settled: bool = False
    # The question judge: read a record whose body is a JSON object or array as its
    # ``"key": value`` members, like lines (off: as its text; docs/policies.md "Eighth round").
    json_members: bool = True
    # The question judge: an earlier record alike but for its values to one already restated
    # (a second reading of the same sensor) takes that record's question when the question
    # names no value, without a restatement call (off: the model restates every record;
    # docs/policies.md "Ninth round").
    reuse_questions: bool = True
    # The question judge: never replace an earlier record by one that leaves some of its lines
    # unsaid (lines neither about the question nor of a kind the new record repeats); such a
    # pair is kept without the answer call (off: the answer decides alone; docs/policies.md
    # "Ninth round").
    guard_lines: bool = True
    # The question judge: an earlier record that says nothing beyond one already restated
    # (the assistant's report of a feed's fact) and names what its question asks takes that
    # question without a restatement call (off: only records alike but for their values
    # share one; docs/policies.md "Tenth round").
    reuse_within: bool = True
    # The question judge: a pair with the same question and the same values only one record
    # has as a pair already answered by those values takes that verdict without a call (the
    # same change seen again in the assistant's own reports; off: every pair is asked;
    # docs/policies.md "Tenth round").
    reuse_answers: bool = True
    # Incremental decisions: a tool result or earlier user message longer than this many
    # characters is asked once which kinds of its lines to keep (a reply can only be offered
    # kinds' letters, or "all"), and replaced by those lines at once; None: never
    # (docs/policies.md).
    shorten_over: int | None = Field(default=None, ge=1)

    def choice_rules(self) -> ChoiceRules:
        """The incremental decision's rules for asking."""
        return ChoiceRules(
            candidates=self.candidates,
            reply=self.choice_reply,
            offer_overlap=self.offer_overlap,
            pick_overlap=self.pick_overlap,
            ask=self.ask_model,
            judge=self.judge,
            newer_first=self.newer_first,
            recheck=self.recheck,
            pairs=self.pairs,
            ask_unrelated=self.ask_unrelated,
            ask_settled=self.ask_settled,
            json_members=self.json_members,
            reuse_questions=self.reuse_questions,
            guard_lines=self.guard_lines,
            reuse_within=self.reuse_within,
            reuse_answers=self.reuse_answers,
            shorten_over=self.shorten_over,
        )

    def style(self, backend: object = None) -> EditStyle:
        """The session's edit style for this protocol (``auto`` resolved against
        ``backend``)."""
        protocol = self.decision
        if protocol == "auto":
            protocol = declared_protocol(backend) or "incremental"
        return EditStyle.INCREMENTAL if protocol == "incremental" else EditStyle.TARGETED


def _append_only(config: NoConfig, context: PolicyContext) -> AppendOnlyPolicy:
    return AppendOnlyPolicy(name=context.name)


def _editable(config: EditableConfig, context: PolicyContext) -> EditablePolicy:
    return EditablePolicy(
        config.style(context.backend),
        name=context.name,
        none_margin=config.none_margin,
        apply_at=config.apply_at,
        choice_rules=config.choice_rules(),
    )


def _summarize(config: NoConfig, context: PolicyContext) -> EditablePolicy:
    return EditablePolicy(EditStyle.SUMMARIZE, name=context.name)


APPEND_ONLY = PolicySpec(
    name="append-only",
    config=NoConfig,
    factory=_append_only,
    mode=RunMode.APPEND_ONLY,
    description="The model answers from the full history; nothing is edited.",
)
EDITABLE = PolicySpec(
    name="editable",
    config=EditableConfig,
    factory=_editable,
    mode=RunMode.EDITABLE,
    description="A bounded decision per turn may shorten or delete unprotected records "
    '(decision: "auto", "incremental" or "tool-call").',
)
SUMMARIZE = PolicySpec(
    name="summarize",
    config=NoConfig,
    factory=_summarize,
    mode=RunMode.EDITABLE,
    description="One decision call per turn may fold all unprotected history into a summary.",
)
