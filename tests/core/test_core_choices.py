"""The incremental decision protocol with the scripted backend: one constrained choice per new
record, one atomic edit, the same validator and receipts, illegal replies never applied."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kettle import SCOPE, TEST_BUDGET, answer_from, kettle_snapshot
from picocontext import (
    AppendTransaction,
    ContextSession,
    EditStyle,
    ModelInput,
    ModelResponse,
    ModelToolCall,
    Outcome,
    Phase,
    PreparedPrompt,
    Record,
    Role,
    RunBudget,
    RunMode,
    RunReport,
    Snapshot,
    ToolCall,
)
from picocontext.choices import (
    BARE_WORDS_KEY,
    CHOICE_OUTPUT_TOKENS,
    MAX_CHOICES_PER_STEP,
    SHARED_ALIKE,
    SHARED_WITHIN,
    ChoiceRules,
    adds_nothing,
    asks_about,
    body_lines,
    content_words,
    decided_by_values,
    judge_answer,
    judge_recheck,
    line_shape,
    lines_about,
    lines_left_out,
    members_missing,
    plan,
    question_for,
    read_question,
    read_reply,
    relevant_lines,
    replacement_edit,
    restate_excerpt,
    shared_question,
    statement_lines,
    text_shape,
    units,
    value_change,
    value_words,
)
from picocontext.models import ByteCounter, ScriptedBackend
from picocontext.policies import policy_registry
from picocontext.policies.registry import PolicyError
from picocontext.policies.simple import EditableConfig
from picocontext.prompts import QUOTE_CHARS

Reply = Callable[[PreparedPrompt], str]


def chooser(reply: Reply | str | list[str]) -> ScriptedBackend:
    """Choice prompts get ``reply`` (a fixed text, one text per question, or a function);
    completion prompts are answered from what they show."""
    queue = list(reply) if isinstance(reply, list) else None

    def respond(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        if prompt.input.phase is Phase.COMPLETION:
            return answer_from(prompt)
        assert prompt.input.phase is Phase.CHOICE
        if queue is not None:
            text = queue.pop(0)
        else:
            text = reply if isinstance(reply, str) else reply(prompt)  # type: ignore[operator]
        return ModelResponse(text=text, generated_tokens=3)

    return ScriptedBackend(respond)


def notes(*bodies: str, task: str = "Report the lamp price.") -> Snapshot:
    records = [Record(id="task", role=Role.USER, protected=True, body=task)]
    records += [Record(id=f"n{i}", role=Role.USER, body=b) for i, b in enumerate(bodies, 1)]
    return Snapshot(scope=SCOPE, records=tuple(records))


def run(
    snapshot: Snapshot, backend: ScriptedBackend, budget: RunBudget = TEST_BUDGET
) -> tuple[ContextSession, RunReport]:
    session = ContextSession(snapshot, ByteCounter(), backend)
    return session, session.run(RunMode.EDITABLE, budget, EditStyle.INCREMENTAL)


def test_a_chosen_replacement_becomes_one_atomic_validated_edit_with_a_receipt() -> None:
    backend = chooser('"old-result"')
    session = ContextSession(kettle_snapshot(), ByteCounter(), backend)
    report = session.run(RunMode.EDITABLE, TEST_BUDGET, EditStyle.INCREMENTAL)
    assert report.failure is None, report.failure
    # The first tool group has nothing earlier to replace: one question, about the second.
    assert [c.records for c in report.choices] == [("new-call", "new-result", "warranty-result")]
    choice = report.choices[0]
    assert choice.options == ("old-result",) and choice.chosen == "old-result" and choice.valid
    # The whole assistant/tool group goes; the transcript keeps it.
    assert session.context.ids == [
        "instructions",
        "task",
        "new-call",
        "new-result",
        "warranty-result",
    ]
    assert session.original_context.record("old-result") is not None
    assert [a.outcome for a in report.attempts] == [Outcome.EDITED]
    assert json.loads(report.attempts[0].arguments)["operations"] == [
        {"action": "delete", "recordID": "old-call"},
        {"action": "delete", "recordID": "old-result"},
    ]
    assert (report.edit_call_count, report.keep_call_count) == (1, 0)
    assert report.answer.startswith("SKU CK-88")
    # The answer reads the edited history plus the receipt (protected runtime records).
    final = report.final_prompt
    assert final is not None and final.input.context == session.context
    receipt = final.input.control_records
    assert [r.role for r in receipt] == [Role.ASSISTANT, Role.TOOL]
    assert receipt[0].tool_calls[0].name == "edit_context" and all(r.protected for r in receipt)
    assert receipt[1].body == "Accepted revision 1. Answer the latest user request now."


def test_none_keeps_the_revision_and_answers_without_a_receipt() -> None:
    session, report = run(kettle_snapshot(), chooser('"none"'))
    assert report.failure is None
    assert session.context == kettle_snapshot()
    assert [a.outcome for a in report.attempts] == [Outcome.KEPT]
    assert report.attempts[0].detail == "Kept revision 0. Answer the latest user request now."
    final = report.final_prompt
    assert final is not None and final.input.control_records == ()
    assert final.input.context == kettle_snapshot()


def test_choice_prompts_are_short_trailing_questions_over_the_shared_prefix() -> None:
    backend = chooser(['"none"', '"n1"'])
    session, _ = run(
        notes("Lamp price 30 EUR.", "Desk price 80 EUR.", "Lamp price now 35 EUR."), backend
    )
    choice_prompts = [p for p in backend.prompts if p.input.phase is Phase.CHOICE]
    assert len(choice_prompts) == 2
    for prompt, allowance in zip(backend.prompts, backend.max_tokens, strict=True):
        if prompt.input.phase is Phase.CHOICE:
            assert allowance == CHOICE_OUTPUT_TOKENS
            # Every question renders the same snapshot: the same system text and history.
            assert prompt.input.context == choice_prompts[0].input.context
            assert prompt.input.tools is None and prompt.input.system_text is None
            assert not prompt.input.tool_call_step
    first, second = (json.loads(p.input.answer_schema_json or "") for p in choice_prompts)
    assert first == {"type": "string", "enum": ["n1", "none"]}
    assert second == {"type": "string", "enum": ["n1", "n2", "none"]}
    assert "new record n3" in (choice_prompts[1].input.guidance or "")
    answer = backend.prompts[-1]
    assert answer.input.phase is Phase.COMPLETION and answer.input.tools is None
    # Byte-level: every call starts with the system text and history of the step.
    history = ByteCounter().render(choice_prompts[0].input.model_copy(update={"guidance": None}))
    for prompt in choice_prompts:
        assert prompt.rendered.startswith(history)
    assert session.context.ids == ["task", "n2", "n3"]


def test_protected_records_are_never_offered_and_chosen_records_are_not_offered_again() -> None:
    records = (
        Record(id="task", role=Role.USER, protected=True, body="Track the lamp."),
        Record(id="rule", role=Role.USER, protected=True, body="Lamp price 20 EUR (contract)."),
        Record(id="a", role=Role.USER, body="Lamp price 30 EUR."),
        Record(id="b", role=Role.USER, body="Lamp price 35 EUR."),
        Record(id="c", role=Role.USER, body="Lamp price 40 EUR."),
    )
    backend = chooser(['"a"', '"b"'])
    session, report = run(Snapshot(scope=SCOPE, records=records), backend)
    offered = [c.options for c in report.choices]
    assert offered == [("a",), ("b",)]  # "a" is already going when "c" is asked
    assert session.context.ids == ["task", "rule", "c"]


def test_illegal_free_replies_are_recorded_invalid_and_never_applied() -> None:
    for reply in ("maybe the first one", '"task"', "n9", "", '{"name": "x"}'):
        session, report = run(notes("Lamp 30.", "Lamp 35."), chooser(reply))
        (choice,) = report.choices
        assert not choice.valid and choice.chosen is None and "nothing applied" in choice.detail
        assert choice.reply == reply
        assert session.context.revision == 0 and len(session.context.records) == 3
        assert [a.outcome for a in report.attempts] == [Outcome.KEPT]


def test_a_tool_call_as_a_choice_is_invalid() -> None:
    def respond(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        if prompt.input.phase is Phase.COMPLETION:
            return answer_from(prompt)
        call = ModelToolCall(name="edit_context", arguments="{}")
        return ModelResponse(text='"n1"', tool_calls=(call,), generated_tokens=3)

    session, report = run(notes("Lamp 30.", "Lamp 35."), ScriptedBackend(respond))
    assert not report.choices[0].valid and session.context.revision == 0


def test_free_replies_are_read_leniently_but_only_as_an_offered_option() -> None:
    question = question_for(units(notes("a", "b", "c"))[3], units(notes("a", "b", "c"))[:3])
    assert question is not None and question.answers == ["n1", "n2", "none"]
    read = {
        t: read_reply(t, question)
        for t in ('"n2"', "n2", " N2.", "n2 - same lamp", "None", "`none`")
    }
    assert [r.option.handle if r.option else None for r in read.values()] == [
        "n2",
        "n2",
        "n2",
        "n2",
        None,
        None,
    ]
    assert all(r.valid for r in read.values())
    assert not read_reply("task", question).valid  # protected: not an option
    assert not read_reply("the second", question).valid


def test_long_ids_are_answered_by_short_handles() -> None:
    records = (
        Record(id="task", role=Role.USER, protected=True, body="Track the lamp."),
        Record(id="note-2026-01-01-lamp", role=Role.USER, body="Lamp 30."),
        Record(id="note-2026-01-02-desk", role=Role.USER, body="Desk 80."),
        Record(id="note-2026-01-03-lamp", role=Role.USER, body="Lamp 35."),
    )
    backend = chooser(['"none"', '"A"'])
    session, report = run(Snapshot(scope=SCOPE, records=records), backend)
    last = report.choices[-1]
    assert last.handles == ("A", "B") and last.chosen == "note-2026-01-01-lamp"
    question = backend.prompts[1].input.guidance or ""
    assert "A (record note-2026-01-01-lamp)" in question
    assert session.context.ids == ["task", "note-2026-01-02-desk", "note-2026-01-03-lamp"]


def test_only_new_records_are_asked_on_later_steps() -> None:
    backend = chooser('"none"')
    session = ContextSession(notes("Lamp 30.", "Desk 80."), ByteCounter(), backend)
    first = session.run(RunMode.EDITABLE, TEST_BUDGET, EditStyle.INCREMENTAL)
    assert [c.records for c in first.choices] == [("n2",)]
    session.append_records([Record(id="n3", role=Role.USER, body="Lamp 35.")])
    second = session.run(RunMode.EDITABLE, TEST_BUDGET, EditStyle.INCREMENTAL)
    assert [c.records for c in second.choices] == [("n3",)]
    assert session.judged_ids >= {"n1", "n2", "n3"}


def test_more_new_records_than_the_step_limit_are_reported_not_asked() -> None:
    bodies = [f"Item {i} costs {i} EUR." for i in range(MAX_CHOICES_PER_STEP + 3)]
    _, report = run(notes(*bodies), chooser('"none"'))
    skipped = [c for c in report.choices if not c.asked]
    asked = [c for c in report.choices if c.asked]
    assert len(asked) == MAX_CHOICES_PER_STEP and len(skipped) == 3
    assert all("not asked" in c.detail for c in skipped)


def test_a_question_the_budget_cannot_afford_is_not_asked_and_stays_new() -> None:
    snapshot = notes("Lamp 30.", "Lamp 35.")
    answer_prompt = ByteCounter().prepare(ModelInput(context=snapshot, phase=Phase.COMPLETION))
    # Enough for the answer, not for a question plus the answer.
    budget = RunBudget(
        context_window=32_000,
        total_tokens=answer_prompt.token_count + 512 + 100,
        completion_output_tokens=512,
    )
    backend = chooser('"n1"')
    session, report = run(snapshot, backend, budget)
    (choice,) = report.choices
    assert not choice.asked and "not asked" in choice.detail
    assert "n2" not in session.judged_ids and session.context.revision == 0


def test_the_edit_is_built_from_whole_units() -> None:
    snapshot = kettle_snapshot()
    grouped = units(snapshot)
    assert [u.ids for u in grouped][2:] == [
        ("old-call", "old-result"),
        ("new-call", "new-result", "warranty-result"),
    ]
    assert [u.editable for u in grouped] == [False, False, True, True]
    edit = replacement_edit(snapshot, [grouped[2]])
    assert edit is not None and [op.record_id for op in edit.operations] == [
        "old-call",
        "old-result",
    ]
    assert replacement_edit(snapshot, []) is None
    steps = plan(snapshot, judged=())
    assert [u.key for u in steps.asked] == ["old-result", "warranty-result"]


def test_a_group_with_a_protected_record_is_never_offered() -> None:
    records = (
        Record(id="task", role=Role.USER, protected=True, body="Track the lamp."),
        Record(
            id="call",
            role=Role.ASSISTANT,
            body="Checking.",
            tool_calls=(ToolCall(id="c1", name="price", arguments="{}"),),
        ),
        Record(id="res", role=Role.TOOL, tool_call_id="c1", protected=True, body="Lamp 30."),
        Record(id="n1", role=Role.USER, body="Lamp 35."),
    )
    _, report = run(Snapshot(scope=SCOPE, records=records), chooser('"none"'))
    assert report.choices == ()
    assert [a.outcome for a in report.attempts] == [Outcome.KEPT]


def test_the_editable_policy_takes_the_protocol_as_its_config() -> None:
    picking = {"decision": "incremental", "apply_at": 0, "pick_overlap": 0.4, "ask_model": False}
    choosing = {"decision": "incremental", "apply_at": 0, "judge": "choice"}
    # The model's choice is a choice call, then the answer; the runtime's pick by repeated
    # words is one setting away (no choice call: only the answer call).
    for config, calls in ((choosing, 2), (picking, 1)):
        backend = chooser("old-result")
        policy = policy_registry().create("editable", backend, config)
        session = ContextSession(kettle_snapshot(), ByteCounter(), backend)
        report = policy.turn(session, TEST_BUDGET)
        assert report.edit_style is EditStyle.INCREMENTAL and report.policy == "editable"
        assert session.context.record("old-result") is None
        assert len(report.call_prefill_tokens) == len(report.calls) == calls


def test_an_accepted_edit_is_charged_its_window_saving_and_its_re_prefill() -> None:
    """The window saved is the unedited answer prompt minus the edited one, under the same
    receipt (what later prompts are spared); the prefill cost is what the answer call must
    compute beyond the tail of a keep's answer (no receipt), counted against the tokens of
    the last call (the cache): everything from the first deleted record on, the edit's
    receipt included."""
    backend = chooser('"old-result"')
    session = ContextSession(kettle_snapshot(), ByteCounter(), backend)
    report = session.run(RunMode.EDITABLE, TEST_BUDGET, EditStyle.INCREMENTAL)
    counter = ByteCounter()
    final = report.final_prompt
    assert final is not None and final.input.control_records  # the edit's receipt
    unedited = counter.prepare(final.input.model_copy(update={"context": kettle_snapshot()}))
    assert report.edit_window_saved_tokens == unedited.token_count - final.token_count > 0
    kept = counter.prepare(
        final.input.model_copy(update={"context": kettle_snapshot(), "control_records": ()})
    )
    cached = report.calls[0].token_ids
    expected = (final.token_count - shared(final.token_ids, cached)) - (
        kept.token_count - shared(kept.token_ids, cached)
    )
    assert report.edit_prefill_cost_tokens == expected > 0
    _, keep = run(kettle_snapshot(), chooser('"none"'))
    assert (keep.edit_window_saved_tokens, keep.edit_prefill_cost_tokens) == (0, 0)


class _Declares:
    decision_protocol = "tool-call"


class _Wraps:
    def __init__(self, backend: object) -> None:
        self.backend = backend


def test_auto_is_incremental_unless_the_backend_or_what_it_wraps_declares_otherwise() -> None:
    from picocontext.policies.simple import EditableConfig, declared_protocol

    auto = EditableConfig()
    assert auto.decision == "auto"
    assert auto.style(object()) is EditStyle.INCREMENTAL
    assert auto.style(_Wraps(_Wraps(_Declares()))) is EditStyle.TARGETED
    assert declared_protocol(_Wraps(object())) is None
    assert EditableConfig(decision="incremental").style(_Declares()) is EditStyle.INCREMENTAL
    assert EditableConfig(decision="tool-call").style(object()) is EditStyle.TARGETED
    # the scripted test backend replays tool-call scripts, so auto asks it for tool calls
    scripted = policy_registry().create("editable", ScriptedBackend(), {})
    assert scripted.style is EditStyle.TARGETED  # type: ignore[attr-defined]


def _scored(option_logprob: float, none_logprob: float) -> ScriptedBackend:
    """Picks ``old-result``; reports ``none_logprob`` when the grammar allows only none."""

    def respond(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        if prompt.input.phase is Phase.COMPLETION:
            return answer_from(prompt)
        if json.loads(prompt.input.answer_schema_json or "{}").get("enum") == ["none"]:
            return ModelResponse(text='"none"', generated_tokens=3, logprob=none_logprob)
        return ModelResponse(text='"old-result"', generated_tokens=3, logprob=option_logprob)

    return ScriptedBackend(respond)


def test_a_pick_is_scored_against_none_and_overruled_only_under_the_margin() -> None:
    session = ContextSession(kettle_snapshot(), ByteCounter(), _scored(-0.5, -1.5))
    report = session.run(RunMode.EDITABLE, TEST_BUDGET, EditStyle.INCREMENTAL, none_margin=0.0)
    choice = report.choices[0]
    assert (choice.option_logprob, choice.none_logprob) == (-0.5, -1.5)
    assert choice.chosen == "old-result" and not choice.overruled
    # the scoring call reuses the question's prompt tokens exactly and is charged like any call
    assert len(report.calls) == 3 and report.calls[1].token_ids == report.calls[0].token_ids
    assert session.context.record("old-result") is None

    for margin, kept in ((0.5, False), (1.0, True), (2.0, True)):
        session = ContextSession(kettle_snapshot(), ByteCounter(), _scored(-0.5, -1.5))
        report = session.run(
            RunMode.EDITABLE, TEST_BUDGET, EditStyle.INCREMENTAL, none_margin=margin
        )
        choice = report.choices[0]
        assert choice.overruled is kept and (choice.chosen is None) is kept
        assert (session.context.record("old-result") is not None) is kept
        assert [a.outcome for a in report.attempts] == [Outcome.KEPT if kept else Outcome.EDITED]


def test_no_scoring_call_without_a_margin_probabilities_or_a_pick() -> None:
    session = ContextSession(kettle_snapshot(), ByteCounter(), _scored(-0.5, -1.5))
    report = session.run(RunMode.EDITABLE, TEST_BUDGET, EditStyle.INCREMENTAL)
    assert len(report.calls) == 2 and report.choices[0].none_logprob is None
    session = ContextSession(kettle_snapshot(), ByteCounter(), chooser('"old-result"'))
    report = session.run(RunMode.EDITABLE, TEST_BUDGET, EditStyle.INCREMENTAL, none_margin=0.0)
    assert len(report.calls) == 2 and report.choices[0].none_logprob is None
    _, report = run(kettle_snapshot(), chooser('"none"'))
    assert len(report.calls) == 2


def test_chosen_deletions_wait_until_the_window_needs_the_room_then_apply_together() -> None:
    """With ``apply_at`` a chosen record stays (a keep: the cache survives) until the answer
    prompt would fill more than that share of the window; then every pending choice applies
    as one edit, even in a step that asks nothing new, and is not offered again meanwhile."""
    backend = chooser('"old-result"')
    session = ContextSession(kettle_snapshot(), ByteCounter(), backend)
    roomy = TEST_BUDGET
    first = session.run(RunMode.EDITABLE, roomy, EditStyle.INCREMENTAL, apply_at=0.75)
    assert first.choices[0].chosen == "old-result"
    assert [a.outcome for a in first.attempts] == [Outcome.KEPT]
    assert session.context.record("old-result") is not None
    needed = first.run_start_prompt_tokens + roomy.completion_output_tokens
    tight = roomy.model_copy(update={"context_window": int(needed / 0.75) - 1})
    second = session.run(RunMode.EDITABLE, tight, EditStyle.INCREMENTAL, apply_at=0.75)
    assert second.choices == ()  # nothing new to ask; the pending choice applies
    assert [a.outcome for a in second.attempts] == [Outcome.EDITED]
    assert session.context.record("old-result") is None
    assert session.context.record("old-call") is None
    assert second.edit_window_saved_tokens > 0


def test_at_apply_at_1_deletions_wait_until_the_answer_would_not_fit() -> None:
    """The default (1.0) keeps a chosen record while the answer prompt and its allowance still
    fit the window, to the token, and applies it in the first step where they would not."""
    roomy = ContextSession(kettle_snapshot(), ByteCounter(), chooser('"old-result"'))
    first = roomy.run(RunMode.EDITABLE, TEST_BUDGET, EditStyle.INCREMENTAL, apply_at=1.0)
    needed = first.run_start_prompt_tokens + TEST_BUDGET.completion_output_tokens
    for window, outcome in ((needed, Outcome.KEPT), (needed - 1, Outcome.EDITED)):
        session = ContextSession(kettle_snapshot(), ByteCounter(), chooser('"old-result"'))
        budget = TEST_BUDGET.model_copy(update={"context_window": window})
        report = session.run(RunMode.EDITABLE, budget, EditStyle.INCREMENTAL, apply_at=1.0)
        assert report.choices[0].chosen == "old-result"
        assert [a.outcome for a in report.attempts] == [outcome]
        assert (session.context.record("old-result") is None) is (outcome is Outcome.EDITED)


def test_the_policy_config_carries_apply_at_and_refuses_a_share_outside_0_1() -> None:
    spec = policy_registry().get("editable")
    assert spec.parse_config({}).apply_at == 1.0
    for bad in (-0.1, 1.5):
        with pytest.raises(PolicyError):
            spec.parse_config({"apply_at": bad})


# -- the rules for asking: shared-word candidates, bare-word replies ------------------------------
SHARED_WORDS = ChoiceRules(candidates="shared-word")


def test_content_words_are_stemmed_and_drop_stop_words() -> None:
    snapshot = notes("The tomatoes need watering every morning.")
    (unit,) = [u for u in units(snapshot) if u.key == "n1"]
    assert content_words(snapshot, unit) == {"tomato", "water", "morn"}


def test_shared_word_candidates_offer_only_earlier_records_that_share_a_content_word() -> None:
    snapshot = notes("Lamp price 30 EUR.", "The desk is oak.", "The lamps now cost 35.")
    steps = plan(snapshot, (), rules=SHARED_WORDS)
    by_key = {u.key: u for u in steps.all_units}
    assert steps.question(by_key["n2"], ()) is None  # the desk shares nothing with the lamp
    question = steps.question(by_key["n3"], ())
    assert question is not None and [o.handle for o in question.options] == ["n1"]
    # Offering every earlier record is one setting away.
    every = plan(snapshot, (), rules=ChoiceRules(candidates="all"))
    asked = every.question({u.key: u for u in every.all_units}["n3"], ())
    assert asked is not None and [o.handle for o in asked.options] == ["n1", "n2"]


def test_a_record_sharing_no_word_is_none_without_a_model_call_and_reported() -> None:
    backend = chooser(["n1"])
    session = ContextSession(
        notes("Lamp price 30 EUR.", "The desk is oak.", "The lamps now cost 35."),
        ByteCounter(),
        backend,
    )
    report = session.run(
        RunMode.EDITABLE, TEST_BUDGET, EditStyle.INCREMENTAL, choice_rules=SHARED_WORDS
    )
    assert report.failure is None
    choice_prompts = [p for p in backend.prompts if p.input.phase is Phase.CHOICE]
    assert len(choice_prompts) == 1  # only the lamp note is asked about
    desk, lamp = report.choices
    assert desk.records == ("n2",) and not desk.asked and desk.chosen is None
    assert "shares a content word" in desk.detail and desk.generated_tokens == 0
    assert lamp.asked and lamp.options == ("n1",) and lamp.chosen == "n1"
    # The pick still becomes one atomic, validated edit with the usual receipt.
    assert session.context.ids == ["task", "n2", "n3"]
    assert [a.outcome for a in report.attempts] == [Outcome.EDITED]
    assert {"n2", "n3"} <= session.judged_ids


def test_protected_records_are_never_offered_even_when_they_share_words() -> None:
    records = (
        Record(id="task", role=Role.USER, protected=True, body="Track the lamp."),
        Record(id="rule", role=Role.USER, protected=True, body="Lamp price 20 EUR."),
        Record(id="a", role=Role.USER, body="Lamp price 30 EUR."),
    )
    backend = chooser(["none"])
    _, report = run_with(Snapshot(scope=SCOPE, records=records), backend, SHARED_WORDS)
    assert [c.options for c in report.choices] == []  # "rule" is protected: nothing to offer


def test_bare_word_replies_mark_the_schema_and_are_read_like_json_ones() -> None:
    backend = chooser(["n1"])
    session, report = run_with(
        notes("Lamp price 30 EUR.", "Lamp price now 35 EUR."),
        backend,
        ChoiceRules(reply="word"),
    )
    (prompt,) = [p for p in backend.prompts if p.input.phase is Phase.CHOICE]
    schema = json.loads(prompt.input.answer_schema_json or "")
    assert schema == {"type": "string", "enum": ["n1", "none"], BARE_WORDS_KEY: True}
    assert report.choices[0].chosen == "n1" and session.context.ids == ["task", "n2"]


def test_the_policy_config_carries_the_rules_for_asking() -> None:
    spec = policy_registry().get("editable")
    default = spec.parse_config({}).choice_rules()
    assert default == ChoiceRules(
        candidates="shared-word", reply="word", judge="question", recheck=True
    )
    assert default.ask and default.pick_overlap is None  # the model decides, by default
    config = spec.parse_config(
        {"candidates": "all", "choice_reply": "json", "pick_overlap": 0.4, "ask_model": False}
    )
    assert config.choice_rules() == ChoiceRules(
        pick_overlap=0.4, ask=False, judge="question", recheck=True
    )
    assert not spec.parse_config({"recheck": False}).choice_rules().recheck
    with pytest.raises(PolicyError):
        spec.parse_config({"candidates": "some"})
    with pytest.raises(PolicyError):
        spec.parse_config({"choice_reply": "yaml"})


def run_with(
    snapshot: Snapshot, backend: ScriptedBackend, rules: ChoiceRules
) -> tuple[ContextSession, RunReport]:
    session = ContextSession(snapshot, ByteCounter(), backend)
    report = session.run(RunMode.EDITABLE, TEST_BUDGET, EditStyle.INCREMENTAL, choice_rules=rules)
    return session, report


def test_the_runtime_picks_the_record_whose_words_the_new_one_repeats_without_a_call() -> None:
    backend = chooser([])  # any model call would fail the run: the queue is empty
    rules = ChoiceRules(pick_overlap=0.5, ask=False)
    session, report = run_with(
        notes("Lamp price 30 EUR.", "Lamp cord is two metres.", "Lamp price now 35 EUR."),
        backend,
        rules,
    )
    assert report.failure is None
    assert not [p for p in backend.prompts if p.input.phase is Phase.CHOICE]
    cord, price = report.choices
    # The cord note repeats one of the price note's four content words (lamp): below the
    # share, and the model is not asked. The new price repeats three of them (not the old 30)
    # and one of the cord note's four.
    assert cord.chosen is None and not cord.asked
    assert price.chosen == "n1" and not price.asked and "75%" in price.detail
    assert session.context.ids == ["task", "n2", "n3"]
    assert [a.outcome for a in report.attempts] == [Outcome.EDITED]


# -- judge: "question" ------------------------------------------------------------------


def asker(questions: dict[str, str], answers: dict[str, str]) -> ScriptedBackend:
    """Choice prompts are the two short questions of the question judge: a restatement
    (answered from ``questions`` by a word the quoted record holds) and an answer (from
    ``answers`` by a word of the question)."""

    def reply(prompt: PreparedPrompt) -> str:
        guidance = prompt.input.guidance or ""
        assert prompt.input.answer_schema_json is None  # free text, capped
        table = questions if "Write the one question" in guidance else answers
        probe = guidance.split("\n")[0] if table is questions else guidance
        return next((text for word, text in table.items() if word in probe), "no idea")

    return chooser(reply)


QUESTION_RULES = ChoiceRules(candidates="shared-word", reply="word", judge="question")


def test_the_question_judge_replaces_an_earlier_record_when_the_answer_takes_the_new_value() -> (
    None
):
    backend = asker(
        {"30 EUR": "What does the lamp cost?", "two metres": "How long is the lamp cord?"},
        {"cost": "It costs 35 EUR now.", "cord": "The cord is two metres."},
    )
    session, report = run_with(
        notes("Lamp price 30 EUR.", "Lamp cord is two metres.", "Lamp price now 35 EUR."),
        backend,
        QUESTION_RULES,
    )
    assert report.failure is None
    # n2 (the cord) is judged against n1 first; n3 against both, in record order.
    judged = [(c.records, c.options, c.chosen) for c in report.choices]
    assert judged == [
        (("n2",), ("n1",), None),
        (("n3",), ("n1",), "n1"),
        (("n3",), ("n2",), None),
    ]
    assert "35" in report.choices[1].detail and "replaces n1" in report.choices[1].detail
    assert session.context.ids == ["task", "n2", "n3"]
    assert [a.outcome for a in report.attempts] == [Outcome.EDITED]
    # Every question of the step reads the same history (the shared prefix) and trails
    # after it: two restatements (n1, n2) and three answers, n1's restatement asked once.
    choice_calls = [p for p in backend.prompts if p.input.phase is Phase.CHOICE]
    assert len(choice_calls) == 5
    assert {p.input.context for p in choice_calls} == {session.original_context}


def test_the_question_judge_keeps_a_record_whose_value_the_answer_repeats() -> None:
    backend = asker(
        {"500 g": "How much flour does the bread dough need?"},
        {"flour": "500 g, as the first record says."},
    )
    session, report = run_with(
        notes("The bread dough needs 500 g of flour.", "The pizza dough needs 500 g as well."),
        backend,
        QUESTION_RULES,
    )
    assert report.failure is None and report.choices[0].chosen is None
    assert "repeats nothing only the new record says" in report.choices[0].detail
    assert session.context == notes(
        "The bread dough needs 500 g of flour.", "The pizza dough needs 500 g as well."
    )


def test_each_earlier_record_is_restated_once_across_steps() -> None:
    backend = asker({"30 EUR": "What does the lamp cost?"}, {"cost": "30 EUR."})
    session = ContextSession(
        notes("Lamp price 30 EUR.", "Lamp colour is red."), ByteCounter(), backend
    )
    session.run(RunMode.EDITABLE, TEST_BUDGET, EditStyle.INCREMENTAL, choice_rules=QUESTION_RULES)
    new = Record(id="n3", role=Role.USER, body="The lamp price stays as it was.")
    session.append(
        AppendTransaction(scope=SCOPE, base_revision=session.context.revision, records=(new,))
    )
    session.run(RunMode.EDITABLE, TEST_BUDGET, EditStyle.INCREMENTAL, choice_rules=QUESTION_RULES)
    restated = [
        p.input.guidance
        for p in backend.prompts
        if (p.input.guidance or "").startswith("Record n1")
    ]
    assert len(restated) == 1


def test_a_long_feed_is_restated_from_one_line_of_each_kind() -> None:
    feed = "FACT heron=KX-7302-B\n" + "\n".join(
        f"Sensor sweep 1, frame {t}: relay idle; notebook unchanged." for t in range(24)
    )
    excerpt = restate_excerpt(feed)
    assert excerpt == (
        "FACT heron=KX-7302-B\nSensor sweep 1, frame 0: relay idle; notebook unchanged. …"
    )
    # the restatement call quotes that excerpt, not the first 200 characters of the feed
    backend = asker({"heron": "What is heron's value?"}, {"heron": "KX-7302-B."})
    run_with(notes(feed, "FACT heron=KX-7355-F", task="Report heron."), backend, QUESTION_RULES)
    restated = [p.input.guidance or "" for p in backend.prompts]
    restated = [g for g in restated if g.startswith("Record n1")]
    assert restated and "frame 0: relay idle; notebook unchanged. …" in restated[0]
    assert "frame 1" not in restated[0]
    # a long record without repeated kinds is quoted as before (cut at QUOTE_CHARS)
    prose = "\n".join(f"Line about topic {w} and nothing else." for w in "abcdefghij")
    assert restate_excerpt(prose) == prose
    # so is a short one, whatever its kinds
    short = "FACT heron=KX-1\nFACT dunlin=R5"
    assert restate_excerpt(short) == short


@given(st.lists(st.text(alphabet="ab1 \n", max_size=30), max_size=30))
def test_a_restatement_excerpt_keeps_every_kind_and_adds_nothing(pieces: list[str]) -> None:
    text = "\n".join(pieces)
    excerpt = restate_excerpt(text)
    if len(" ".join(text.split())) <= QUOTE_CHARS:
        assert excerpt == text
        return
    if excerpt == text:
        return
    lines = body_lines(text)
    kept = excerpt.removesuffix(" …").split("\n")
    # one line of each kind, the first, in order; nothing that is not a line of the text
    assert kept == [
        lines[min(i for i, x in enumerate(lines) if line_shape(x) == shape)]
        for shape in dict.fromkeys(line_shape(x) for x in lines)
    ]
    assert len(excerpt) < len(text)


def test_a_reply_without_a_question_keeps_the_record_and_says_so() -> None:
    backend = asker({"30 EUR": "The lamp."}, {})
    _session, report = run_with(
        notes("Lamp price 30 EUR.", "Lamp price now 35 EUR."), backend, QUESTION_RULES
    )
    (choice,) = report.choices
    assert choice.chosen is None and not choice.valid and "no question" in choice.detail


def test_the_question_judge_stops_asking_when_the_budget_cannot_afford_it() -> None:
    backend = asker({"30 EUR": "What does the lamp cost?"}, {"cost": "35 EUR."})
    snapshot = notes("Lamp price 30 EUR.", "Lamp price now 35 EUR.")
    answer_prompt = ByteCounter().prepare(ModelInput(context=snapshot, phase=Phase.COMPLETION))
    budget = RunBudget(
        context_window=32_000,
        total_tokens=answer_prompt.token_count + 512 + 100,
        completion_output_tokens=512,
    )
    session = ContextSession(snapshot, ByteCounter(), backend)
    report = session.run(
        RunMode.EDITABLE, budget, EditStyle.INCREMENTAL, choice_rules=QUESTION_RULES
    )
    (choice,) = report.choices
    assert not choice.asked and "not asked" in choice.detail
    assert "n2" not in session.judged_ids and session.context.revision == 0


def test_the_judge_never_spends_what_the_answer_needs_receipt_included() -> None:
    """Whatever the total allowance, the answer (its keep receipt included) runs whenever it
    fits on its own: the judge's calls reserve the answer prompt as it is sent."""
    snapshot = notes("Lamp price 30 EUR.", "Lamp price now 35 EUR.")

    def backend() -> ScriptedBackend:
        return asker({"30 EUR": "What does the lamp cost?"}, {"cost": "30 EUR."})

    quiet = ContextSession(snapshot, ByteCounter(), backend())
    alone = quiet.run(
        RunMode.EDITABLE,
        TEST_BUDGET,
        EditStyle.INCREMENTAL,
        choice_rules=ChoiceRules(candidates="shared-word", ask=False),
    )
    assert alone.final_prompt is not None and alone.failure is None
    answer = alone.final_prompt.token_count + 512  # the keep's answer prompt and allowance
    for extra in range(0, 1_500, 25):
        budget = RunBudget(
            context_window=32_000, total_tokens=answer + extra, completion_output_tokens=512
        )
        session = ContextSession(snapshot, ByteCounter(), backend())
        report = session.run(
            RunMode.EDITABLE, budget, EditStyle.INCREMENTAL, choice_rules=QUESTION_RULES
        )
        assert report.failure is None, (extra, report.failure)


def test_a_pair_judged_before_the_budget_stops_the_unit_still_counts() -> None:
    """A unit judged against two earlier ones: when the budget stops its second pair, what
    the first pair chose is still applied (it was lost once, and asked again a step later)."""
    snapshot = notes("Lamp price 30 EUR.", "Lamp cord two metres.", "Lamp price now 35 EUR.")

    def backend() -> ScriptedBackend:
        return asker(
            {"30 EUR": "What does the lamp cost?", "two metres": "How long is the lamp cord?"},
            {"cost": "35 EUR.", "cord": "Two metres."},
        )

    stopped_midway = 0
    for total in range(1_000, 6_000, 40):
        budget = RunBudget(context_window=32_000, total_tokens=total, completion_output_tokens=64)
        session = ContextSession(snapshot, ByteCounter(), backend())
        report = session.run(
            RunMode.EDITABLE, budget, EditStyle.INCREMENTAL, choice_rules=QUESTION_RULES
        )
        chose = {c.chosen for c in report.choices if c.chosen}
        assert chose <= set(report.original.ids) - set(session.context.ids), total
        about_n3 = [c for c in report.choices if c.records == ("n3",)]
        if any(c.chosen for c in about_n3) and any(not c.asked for c in about_n3):
            stopped_midway += 1
    assert stopped_midway  # the sweep does reach a budget that stops n3 after its first pair


def test_the_policy_config_carries_the_judge_and_refuses_an_unknown_one() -> None:
    spec = policy_registry().get("editable")
    assert spec.parse_config({}).choice_rules().judge == "question"
    assert spec.parse_config({"judge": "choice"}).choice_rules().judge == "choice"
    with pytest.raises(PolicyError):
        spec.parse_config({"judge": "vote"})


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120))
def test_a_read_question_is_a_one_line_piece_of_the_reply_ending_in_a_question_mark(
    text: str,
) -> None:
    question = read_question(text)
    if question is not None:
        assert question.endswith("?") and "\n" not in question and question in text
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    head = lines[0].split("?")[0] if lines and "?" in lines[0] else ""
    if any(ch.isalnum() for ch in head):
        assert question is not None  # a worded question on the first line is always read


def test_values_stay_whole_and_question_words_do_not_count() -> None:
    assert {"20:00", "0.05", "3,000", "mol/l"} <= value_words(
        "At 20:00 it is 0.05 mol/L for 3,000 EUR."
    )
    assert "the" not in value_words("The tablet")
    verdict = judge_answer(
        "Grandpa takes his tablet at 20:00.",
        "At what time does Grandpa take his tablet?",
        "Grandpa takes his blood pressure tablet at 8:00.",
        "The doctor moved the blood pressure tablet to the evening, 20:00.",
    )
    assert verdict.stale and verdict.new == ("20:00",) and verdict.old == ()
    kept = judge_answer("At 8:00.", "When?", "Tablet at 8:00.", "Tablet again at 8:00 or 9:00.")
    assert not kept.stale


def test_a_long_record_is_quoted_by_the_lines_the_question_is_about() -> None:
    feed = "FACT heron=KX-7302-B\n" + "\n".join(
        f"Sensor sweep 1, frame {t}: relay idle." for t in range(24)
    )
    assert relevant_lines(feed, "What is heron's value?") == "FACT heron=KX-7302-B"
    # no line shares a word: the first line stands for the record
    assert relevant_lines(feed, "Who reviews PAY-41?") == "FACT heron=KX-7302-B"
    # every line that shares a word comes along, in order, and no other
    feed = "FACT heron=KX-7302-B\n" + "\n".join(
        f"Sweep 1, frame {t}: relay idle." if t % 3 else f"Sensor sweep 1, frame {t}: relay idle."
        for t in range(24)
    )
    assert relevant_lines(feed, "Which sensor was idle?") == "\n".join(
        line for line in feed.splitlines() if line.startswith("Sensor")
    )
    # a word on more than half of the lines is the record's boilerplate: the question about
    # heron "in the notebook" is about the FACT line, not the telemetry that says "notebook"
    noted = "FACT heron=KX-7302-B\n" + "\n".join(
        f"Sweep 1, frame {t}: notebook unchanged." for t in range(24)
    )
    question = 'What is the value of the "heron" key in the current notebook?'
    assert relevant_lines(noted, question) == "FACT heron=KX-7302-B"
    other = noted.replace("heron=KX-7302-B", "dunlin=R5:green/17")
    assert relevant_lines(other, question) == "FACT dunlin=R5:green/17"  # the first line
    assert not asks_about(relevant_lines(other, question), question)
    # a one-line note is quoted whole, whatever the question
    note = "Lamp price 30 EUR in the shop. Desk 90 EUR."
    assert relevant_lines(note, "What does the desk cost?") == note


def test_a_feed_with_no_line_about_the_question_is_kept_without_an_answer_call() -> None:
    telemetry = "\n".join(f"Sweep 2, frame {t}: notebook unchanged." for t in range(6))
    heron, dunlin = "FACT heron=KX-7302-B", "FACT dunlin=R5:green/17\n" + telemetry
    question = "What is heron's value?"
    assert lines_about(dunlin, question) == []
    assert lines_about(heron, "Who reviews PAY-41?") == [heron]  # one line: always about it
    assert lines_about("FACT heron=KX-1\n" + telemetry, question) == ["FACT heron=KX-1"]

    def judged(rules: ChoiceRules) -> tuple[ScriptedBackend, RunReport]:
        backend = asker({"heron": question}, {"heron": "KX-7302-B."})
        _session, report = run_with(notes(heron, dunlin, task="Report heron."), backend, rules)
        assert report.failure is None
        return backend, report

    def answer_calls(backend: ScriptedBackend) -> list[str]:
        guidance = [p.input.guidance or "" for p in backend.prompts]
        return [g for g in guidance if g.startswith("Records,")]

    # The feed shares the word "fact" with n1, so n1 is offered and restated; none of the
    # feed's lines names heron, so the pair is kept with no answer call.
    backend, report = judged(QUESTION_RULES)
    assert answer_calls(backend) == []
    (choice,) = report.choices
    assert choice.options == ("n1",) and choice.chosen is None and not choice.asked
    assert "no line of n2" in choice.detail and "kept without asking" in choice.detail
    # the step's model output says no call was made, rather than show an empty reply
    assert report.attempts[0].model_text == "n2 about n1: (no call)"
    # ``ask_unrelated`` asks as before: the prompt quotes the feed's first line.
    backend, report = judged(dataclasses.replace(QUESTION_RULES, ask_unrelated=True))
    (call,) = answer_calls(backend)
    assert "2. FACT dunlin=R5:green/17\n" in call and report.choices[0].asked
    # The policy's config carries the switch through to the rules.
    assert not EditableConfig().choice_rules().ask_unrelated
    assert EditableConfig(ask_unrelated=True).choice_rules().ask_unrelated


def test_a_json_report_is_read_as_its_members() -> None:
    answer = '{"facts": {"dunlin": "R5:green/17", "heron": "KX-7302-B"}}'
    assert statement_lines(answer) == ['"dunlin": "R5:green/17"', '"heron": "KX-7302-B"']
    question = 'What is the value of the "heron" key in the current notebook?'
    # quoted and judged by the member the question is about, like a record of several lines
    assert relevant_lines(answer, question) == '"heron": "KX-7302-B"'
    assert lines_about('{"facts": {"dunlin": "R5:green/17", "ibis": 4}}', question) == []
    # lists of scalars stay one member; objects inside lists are read member by member
    rows = '[{"id": 7, "tags": ["a", "b"]}, {"id": 8, "note": null}]'
    assert statement_lines(rows) == ['"id": 7', '"tags": ["a", "b"]', '"id": 8', '"note": null']
    assert statement_lines("[1, 2]") == ["[1, 2]"]
    # one member, or text that only looks like JSON: read as it is
    assert lines_about('{"heron": "KX-1"}', "Who reviews PAY-41?") == ['{"heron": "KX-1"}']
    assert statement_lines("{not json}\nsecond") == ["{not json}", "second"]
    assert statement_lines("{}") == ["{}"] and statement_lines("") == []
    # ``json_members`` off reads the object as its text, as before the rule
    assert statement_lines(answer, members=False) == [answer]
    assert relevant_lines(answer, question, members=False) == answer
    assert EditableConfig().choice_rules().json_members
    assert not EditableConfig(json_members=False).choice_rules().json_members


def test_a_json_record_cannot_replace_one_with_members_it_lacks() -> None:
    prices, tea = '{"prices": {"tea": 3.2, "coffee": 2.8}}', '{"prices": {"tea": 3.5}}'
    assert members_missing(prices, tea) == ("coffee",)
    assert members_missing(tea, prices) == ()  # the fuller list covers tea
    assert members_missing(prices, "Tea is 3.5 now.") == ()  # only between JSON records
    rows = '[{"sku": "A", "stock": 1}]'
    assert members_missing(rows, '[{"sku": "A", "stock": 0}, {"sku": "B", "stock": 2}]') == ()

    def judged(rules: ChoiceRules) -> tuple[ScriptedBackend, RunReport]:
        backend = asker({"tea": "What does tea cost?"}, {"tea": "Tea costs 3.5."})
        _session, report = run_with(notes(prices, tea, task="Keep the price list."), backend, rules)
        assert report.failure is None
        return backend, report

    # no restatement and no answer: whatever the model said of tea, coffee would be lost
    backend, report = judged(QUESTION_RULES)
    assert backend.prompts == [] or all(p.input.guidance is None for p in backend.prompts)
    (choice,) = report.choices
    assert choice.chosen is None and not choice.asked
    assert "n2 lacks what n1 says of coffee, so it cannot replace it" in choice.detail
    # read as text (the rule belongs to the member reading), the answer about tea deletes n1
    _backend, asked = judged(dataclasses.replace(QUESTION_RULES, json_members=False))
    assert asked.choices[0].chosen == "n1"


def test_a_pair_whose_new_record_adds_nothing_to_the_question_is_kept_without_asking() -> None:
    question = "What does the lamp cost?"
    assert adds_nothing(question, "Lamp price 30 EUR in the shop.", "The lamp price is 30 EUR.")
    assert not adds_nothing(question, "Lamp price 30 EUR.", "Lamp price 35 EUR.")
    # the question's own words do not count: a model restates them
    assert adds_nothing(question, "Lamp price 30 EUR.", "Lamp cost: price 30 EUR.")

    def judged(rules: ChoiceRules) -> tuple[ScriptedBackend, RunReport]:
        backend = asker({"30 EUR": question}, {"cost": "It costs 30 EUR."})
        snapshot = notes("Lamp price 30 EUR in the shop.", "The lamp price is 30 EUR.")
        _session, report = run_with(snapshot, backend, rules)
        assert report.failure is None
        return backend, report

    backend, report = judged(QUESTION_RULES)
    guidance = [p.input.guidance or "" for p in backend.prompts]
    assert [g for g in guidance if g.startswith("Records,")] == []  # restated, never answered
    (choice,) = report.choices
    assert choice.chosen is None and not choice.asked and choice.options == ("n1",)
    assert "n2 says nothing on it that n1 does not; kept without asking" in choice.detail
    # ``ask_settled`` asks as before, and the answer keeps n1 as the rule said it would
    backend, asked = judged(dataclasses.replace(QUESTION_RULES, ask_settled=True))
    assert asked.choices[0].asked and asked.choices[0].chosen is None
    assert len(backend.prompts) == len(guidance) + 1
    assert not EditableConfig().choice_rules().ask_settled
    assert EditableConfig(ask_settled=True).choice_rules().ask_settled


def test_a_record_alike_but_for_its_values_shares_the_question_already_restated() -> None:
    north, warmer, south = "North zone: 8.1 °C", "North zone: 10.4 °C", "South zone: 9.0 °C"
    assert text_shape(north) == text_shape(warmer) != text_shape(south)

    def feed(sweep: int, value: str) -> str:
        lines = (f"Sensor sweep {sweep}, frame {t}: idle." for t in range(4 + sweep))
        return f"FACT heron={value}\n" + "\n".join(lines)

    # feeds alike but for their values and length; a JSON report by its members
    assert text_shape(feed(1, "KX-7302-B")) == text_shape(feed(3, "KX-7318-D"))
    assert text_shape(feed(1, "KX-1")) != text_shape(feed(1, "KX-1").replace("heron", "dunlin"))
    # a key glued to its value stays: heron's feed never takes the question of dunlin's
    assert text_shape("FACT heron=KX-7302-B") != text_shape("FACT dunlin=R5:green/17")
    assert text_shape("FACT heron=KX-7302-B") == text_shape("FACT heron=KX-7318-D")
    assert text_shape('{"facts": {"heron": "KX-1"}}') == text_shape('{"facts": {"heron": "KX-2"}}')
    question = "What is the temperature in the north zone?"
    known: dict[tuple[str, str], str | None] = {("n1", north): question}
    assert shared_question(warmer, known) == ("n1", question, SHARED_ALIKE)
    assert shared_question(south, known) is None
    assert shared_question("", known) is None
    assert shared_question(warmer, {("n1", north): None}) is None  # no question came back
    # a question naming a value belongs to its own record, whatever the shapes say
    counted = {("n1", "Transect 3: 4 skylarks counted."): "How many skylarks in transect 3?"}
    assert shared_question("Transect 4: 3 skylarks counted.", counted) is None


def test_a_record_saying_nothing_beyond_one_restated_takes_its_question() -> None:
    question = 'What is the value of the "heron" key in the current notebook?'
    feed = "FACT heron=KX-7302-B\n" + "\n".join(f"Sweep 1, frame {t}: idle." for t in range(4))
    known: dict[tuple[str, str], str | None] = {("step-1-data", feed): question}
    report = '{"facts": {"heron": "KX-7302-B"}}'
    assert shared_question(report, known) is None  # not alike: another shape
    assert shared_question(report, known, within=True) == ("step-1-data", question, SHARED_WITHIN)
    # something the feed does not say, and the report restates its own question
    assert shared_question('{"facts": {"heron": "KX-7318-D"}}', known, within=True) is None
    assert shared_question('{"heron": "KX-7302-B", "dunlin": "R5"}', known, within=True) is None
    # a subset that shares no word with the question keeps its own restatement
    prices = {("p", "Tea: 3.20\nCoffee: 2.80"): "What does tea cost?"}
    assert shared_question("Coffee: 2.80", prices, within=True) is None
    assert shared_question("Tea: 3.20", prices, within=True) == (
        "p",
        "What does tea cost?",
        SHARED_WITHIN,
    )
    # a question naming a value the subset does not say is not its question
    shop = {("s", "Tea: 3.20 at shop 7\nCoffee: 2.80"): "What does tea cost at shop 7?"}
    assert shared_question("Tea: 3.20", shop, within=True) is None
    assert shared_question("Tea 3.20 at shop 7", shop, within=True) is not None
    assert EditableConfig().choice_rules().reuse_within
    assert not EditableConfig(reuse_within=False).choice_rules().reuse_within


_WORDS = st.sampled_from(["tea", "lamp", "shop", "price", "heron", "now", "fact", "cord"])
_VALUES = st.sampled_from(["30", "35", "12.5", "kx-7302-b", "r5:green/17", "20:00", "7"])


@given(
    st.lists(st.one_of(_WORDS, _VALUES), min_size=1, max_size=6),
    st.lists(st.one_of(_WORDS, _VALUES), min_size=1, max_size=6),
    st.lists(st.one_of(_WORDS, _VALUES), max_size=6),
    st.lists(_WORDS, max_size=3),
    st.lists(_WORDS, max_size=3),
    st.lists(_WORDS, max_size=3),
)
def test_a_verdict_decided_by_values_is_the_same_for_every_pair_with_that_change(
    earlier: list[str],
    later: list[str],
    answer: list[str],
    older_words: list[str],
    newer_words: list[str],
    asked: list[str],
) -> None:
    """What reuse_answers rests on: a verdict the answer's values decided depends only on the
    question and the values only one side has, whatever plain words the records add."""
    question = "What is " + " ".join(asked) + "?"
    first = (" ".join(earlier), " ".join(later))
    second = (" ".join(earlier + older_words), " ".join(later + newer_words))
    assert value_change(question, *first) == value_change(question, *second)
    reply = " ".join(answer)
    verdict = judge_answer(reply, question, *first)
    if decided_by_values(verdict):
        assert judge_answer(reply, question, *second) == verdict


def test_the_judge_restates_a_shape_once_and_says_whose_question_it_took() -> None:
    snapshot = notes(
        "North zone: 8.1 °C.",
        "North zone: 10.4 °C.",
        "North zone: 12.0 °C.",
        task="Report the north zone temperature.",
    )

    def judged(rules: ChoiceRules) -> tuple[ContextSession, RunReport, list[str]]:
        backend = asker(
            {"zone": "What is the temperature in the north zone?"},
            {"12.0": "It is 12.0 °C now.", "10.4": "It is 10.4 °C now."},
        )
        session, report = run_with(snapshot, backend, rules)
        assert report.failure is None
        guidance = [p.input.guidance or "" for p in backend.prompts]
        return session, report, [g for g in guidance if "Write the one question" in g]

    session, report, restated = judged(QUESTION_RULES)
    assert len(restated) == 1 and restated[0].startswith("Record n1:")
    assert session.context.ids == ["task", "n3"]  # both earlier readings replaced
    about_n3 = [c for c in report.choices if c.records == ("n3",)]
    assert [c.options for c in about_n3] == [("n2",)] and about_n3[0].chosen == "n2"
    assert "(restated for n1, alike but for its values)" in about_n3[0].detail
    # off, the model restates n2 as well, and the outcome is the same
    session, report, restated = judged(dataclasses.replace(QUESTION_RULES, reuse_questions=False))
    assert [r.split(":")[0] for r in restated] == ["Record n1", "Record n2"]
    assert session.context.ids == ["task", "n3"]
    assert EditableConfig().choice_rules().reuse_questions
    assert not EditableConfig(reuse_questions=False).choice_rules().reuse_questions


def test_a_record_is_never_replaced_by_one_that_leaves_some_of_its_lines_unsaid() -> None:
    prices, tea = "Tea: 3.20\nCoffee: 2.80", "Tea: 3.50"
    question = "What does tea cost?"
    assert lines_left_out(prices, tea, question) == ("Coffee: 2.80",)
    # a line the newer record says again, by its shape or by its key, is not lost
    assert lines_left_out(prices, "Tea: 3.50\nCoffee: 2.90", question) == ()
    status = "api: 3 replicas, healthy\nworker: 2 replicas, degraded"
    newer = "api: 3 replicas, healthy\nworker: 2 replicas, healthy"
    assert lines_left_out(status, newer, "How many api replicas run?") == ()
    feed = "FACT heron=KX-7302-B\n" + "\n".join(f"Sweep 1, frame {t}: idle." for t in range(6))
    later = feed.replace("KX-7302-B", "KX-7318-D").replace("Sweep 1", "Sweep 3")
    assert lines_left_out(feed, later, "What is heron's value?") == ()
    # a one-line record is about its question by definition; two JSON records go by their keys
    assert lines_left_out("Tea 3.20, coffee 2.80.", tea, question) == ()
    # a one-member JSON report too, though it is read as its member line
    answer = '{"facts": {"heron": "KX-7302-B"}}'
    assert lines_left_out(answer, "FACT heron=KX-7318-D\nSweep 3: idle", "What is heron?") == ()
    ana, ben = '{"tea": 3.2, "who": "ana"}', '{"tea": 3.5, "who": "ben"}'
    assert lines_left_out(ana, ben, question) == ()
    # a JSON report beside a note: the note does not say the build's duration
    build = '{"build": 812, "result": "passed", "duration_s": 431}'
    left = lines_left_out(build, "Build 812 passed, as CI said.", "What was build 812's result?")
    assert left == ('"duration_s": 431',)

    def judged(rules: ChoiceRules) -> tuple[ContextSession, RunReport, ScriptedBackend]:
        backend = asker({"Tea": question}, {"tea": "Tea costs 3.50 now."})
        session, report = run_with(notes(prices, tea, task="Keep the price list."), backend, rules)
        assert report.failure is None
        return session, report, backend

    session, report, backend = judged(QUESTION_RULES)
    assert session.context.ids == ["task", "n1", "n2"]  # coffee's price stays
    (choice,) = report.choices
    assert choice.chosen is None and not choice.asked
    assert "n2 leaves unsaid 'Coffee: 2.80', so it cannot replace it" in choice.detail
    assert not [p for p in backend.prompts if (p.input.guidance or "").startswith("Records,")]
    # off, the answer about tea alone deletes the list, coffee and all
    session, _report, _backend = judged(dataclasses.replace(QUESTION_RULES, guard_lines=False))
    assert session.context.ids == ["task", "n2"]
    assert EditableConfig().choice_rules().guard_lines
    assert not EditableConfig(guard_lines=False).choice_rules().guard_lines


def test_a_change_of_values_already_answered_is_not_asked_again() -> None:
    question = "What does the lamp cost?"
    # one change, said twice in other words: the judge reads the values only one side has
    first = value_change(question, "FACT lamp=30 EUR", "FACT lamp=35 EUR")
    assert first == (question, frozenset({"30"}), frozenset({"35"}))
    assert value_change(question, '{"lamp": "30 EUR"}', '"lamp": "35 EUR"') == first
    assert value_change(question, "Lamp 30 EUR", "Lamp 36 EUR") != first
    assert value_change("What does it cost now?", "Lamp 30 EUR", "Lamp 35 EUR") != first
    # only a verdict the values decided is one any pair with the same change shares
    assert decided_by_values(judge_answer("It is 35 EUR.", question, "Lamp 30 EUR", "Lamp 35 EUR"))
    assert not decided_by_values(judge_answer("In the shop.", question, "Lamp 30", "Shop lamp"))
    snapshot = notes(
        "Lamp price 30 EUR.",
        "Lamp price 30 EUR, says the shop.",
        "Lamp price now 35 EUR.",
        task="Report the lamp price.",
    )

    def judged(
        rules: ChoiceRules, new_price: str = "It costs 35 EUR now."
    ) -> tuple[ContextSession, RunReport, list[str]]:
        backend = asker({"30 EUR": question}, {"35 EUR": new_price, "30 EUR": "It costs 30 EUR."})
        session, report = run_with(snapshot, backend, rules)
        assert report.failure is None
        guidance = [p.input.guidance or "" for p in backend.prompts]
        return session, report, [g for g in guidance if g.startswith("Records,")]

    session, report, answered = judged(QUESTION_RULES)
    assert session.context.ids == ["task", "n3"]
    # n2 over n1 (no value changed: asked), n3 over n1 (asked), n3 over n2 (the same change)
    assert len(answered) == 2
    by_pair = {(c.records, c.options): c for c in report.choices}
    reused = by_pair[(("n3",), ("n2",))]
    # its tokens are n2's restatement alone (the question it needed), no answer
    assert reused.chosen == "n2" and not reused.asked and not reused.reply
    assert "the same values changed in n3 over n1, answered 'It costs 35 EUR now.'" in (
        reused.detail
    )
    # off, the model is asked the third answer too, and the outcome is the same
    session, report, answered = judged(dataclasses.replace(QUESTION_RULES, reuse_answers=False))
    assert session.context.ids == ["task", "n3"] and len(answered) == 3
    # an answer the recheck over the new record alone decided is not given to another pair:
    # whether the recheck is asked depends on the new record's words
    rechecking = dataclasses.replace(QUESTION_RULES, recheck=True)
    session, report, answered = judged(rechecking, new_price="It costs 30 EUR.")
    assert session.context.ids == ["task", "n1", "n2", "n3"] and len(answered) == 3
    assert EditableConfig().choice_rules().reuse_answers
    assert not EditableConfig(reuse_answers=False).choice_rules().reuse_answers


@given(
    st.lists(st.text(alphabet="ab1 =:\n", max_size=16), max_size=8),
    st.text(alphabet="ab1 =:\n", max_size=30),
    st.text(alphabet="ab1 ?", max_size=12),
)
def test_a_record_repeated_in_full_leaves_nothing_unsaid(
    pieces: list[str], extra: str, question: str
) -> None:
    earlier = "\n".join(pieces)
    left = lines_left_out(earlier, earlier + "\n" + extra, question)
    assert left == ()
    # what it reports is always lines of the earlier record, none about the question
    some = lines_left_out(earlier, extra, question)
    assert set(some) <= set(statement_lines(earlier))
    assert not set(some) & set(lines_about(earlier, question))


WORDS = st.sampled_from(["lamp", "cost", "price", "30", "35", "eur", "shop", "now", "not said"])


@given(
    st.lists(WORDS, max_size=5),
    st.lists(WORDS, max_size=5),
    st.lists(WORDS, max_size=5),
    st.lists(WORDS, max_size=6),
)
def test_no_answer_can_judge_a_settled_pair_stale(
    question: list[str], earlier: list[str], later: list[str], answer: list[str]
) -> None:
    q, old, new, said = (" ".join(w) for w in (question, earlier, later, answer))
    if adds_nothing(q, old, new):
        # the rule skips only calls whose answer could not change the outcome
        assert not judge_answer(said, q, old, new).stale
        assert not judge_recheck(said, q, old, new).stale


@given(
    st.lists(st.text(alphabet="ab1 =\n", max_size=20), max_size=12),
    st.text(alphabet="ab1 ?", max_size=12),
)
def test_lines_about_a_question_are_lines_of_the_text_in_order(
    pieces: list[str], question: str
) -> None:
    text = "\n".join(pieces)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    about = lines_about(text, question)
    if len(lines) <= 1:
        assert about == [text.strip()]  # a one-line note is always about it
    else:
        # a subsequence of the text's lines, each sharing a word with the question
        rest = iter(lines)
        assert all(any(line == other for other in rest) for line in about)
        assert all(value_words(line) & value_words(question) for line in about)
    # what an answer prompt quotes is never empty for a text with a line in it
    assert bool(relevant_lines(text, question)) == bool(lines)


def test_values_decide_over_words_when_the_answer_repeats_one() -> None:
    # "same day": the old record's Thursday is not repeated by the new one, but the time is
    # what changed, and the answer repeats the new time.
    verdict = judge_answer(
        "The demo is on Thursday at 14:00.",
        "When is the demo?",
        "The demo is on Thursday at 15:00.",
        "The demo now starts at 14:00, same day.",
    )
    assert verdict.stale and verdict.new == ("14:00",)
    both = judge_answer("14:00 or 15:00", "When?", "Demo at 15:00.", "Demo at 14:00.")
    assert not both.stale and both.old == ("15:00",)
    words = judge_answer(
        "It was cancelled.", "Where is lunch?", "Lunch at the Thai place.", "Lunch is cancelled."
    )
    assert words.stale and len(words.new) == 1 and not words.old


def test_the_recheck_asks_the_new_record_alone_when_the_answer_took_the_old_value() -> None:
    def guests(answer_alone: str) -> ScriptedBackend:
        return asker(
            {"48": "How many guests have confirmed?"},
            # the answer over both records repeats the first one's value; alone, the new one
            {"alone": answer_alone, "Records,": "48 guests have confirmed."},
        )

    snapshot = notes(
        "48 guests have confirmed so far.", "Three more guests confirmed, we are at 51 now."
    )
    rechecking = ChoiceRules(candidates="shared-word", reply="word", judge="question", recheck=True)
    session, report = run_with(snapshot, guests("51 guests."), rechecking)
    assert session.context.ids == ["task", "n2"]
    (choice,) = report.choices
    assert choice.chosen == "n1" and "alone" in choice.detail and "51" in choice.detail
    assert "48 guests" in choice.reply and "51 guests" in choice.reply
    # without the recheck the first answer stands: nothing is replaced
    session, report = run_with(snapshot, guests("51 guests."), QUESTION_RULES)
    assert session.context.ids == ["task", "n1", "n2"]
    # "not said", or a reply without the new value, keeps the earlier record
    for reply in ("Not said.", "Three more guests."):
        session, report = run_with(snapshot, guests(reply), rechecking)
        assert session.context.ids == ["task", "n1", "n2"], reply


def test_the_recheck_is_not_asked_of_a_record_about_something_else() -> None:
    backend = asker(
        {"30 EUR": "What does the lamp cost?"},
        {"alone": "90 EUR.", "Records,": "The lamp costs 30 EUR."},
    )
    rules = ChoiceRules(candidates="shared-word", reply="word", judge="question", recheck=True)
    # the desk note shares "price" with the lamp note (so it is judged), but no word of the
    # question: asked alone it would answer the lamp's question with the desk's price
    session, report = run_with(notes("Lamp price 30 EUR.", "Desk price 90 EUR."), backend, rules)
    assert session.context.ids == ["task", "n1", "n2"]
    (choice,) = report.choices
    assert "alone" not in choice.reply


def lamp_and_three_others(rules: ChoiceRules) -> tuple[ContextSession, RunReport]:
    """Three notes on three items, then a new lamp price, judged by the question judge."""
    backend = asker(
        {
            "Lamp": "What does the lamp cost?",
            "Desk": "What does the desk cost?",
            "Chair": "What does the chair cost?",
        },
        {"lamp cost": "35 EUR.", "cost": "It did not change."},
    )
    return run_with(
        notes(
            "Lamp price 30 EUR in the shop.",
            "Desk price 90 EUR.",
            "Chair price 40 EUR.",
            "Lamp price now 35 EUR in the shop.",
        ),
        backend,
        rules,
    )


def test_the_question_judge_asks_about_the_records_most_alike_the_new_one() -> None:
    session, report = lamp_and_three_others(QUESTION_RULES)
    last = [c for c in report.choices if c.records == ("n4",)]
    # Three earlier notes share a word with n4; the two it repeats most are asked about, in
    # record order: n1 (the lamp, most words) and the newer of the two equal ones.
    assert [c.options for c in last] == [("n1",), ("n3",)]
    assert last[0].chosen == "n1" and "n1" not in session.context.ids


def test_one_pair_judges_only_the_record_most_alike_the_new_one() -> None:
    session, report = lamp_and_three_others(dataclasses.replace(QUESTION_RULES, pairs=1))
    last = [c for c in report.choices if c.records == ("n4",)]
    assert [c.options for c in last] == [("n1",)]
    assert last[0].chosen == "n1" and "n1" not in session.context.ids
    # every new note was judged against one earlier note at most
    assert all(
        len([c for c in report.choices if c.records == r]) <= 1
        for r in {c.records for c in report.choices}
    )


def test_fewer_than_one_pair_is_refused() -> None:
    with pytest.raises(ValueError, match="pairs"):
        ChoiceRules(pairs=0)


def shared(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the common token prefix of ``a`` and ``b``."""
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def test_the_question_judges_model_output_names_the_pair_each_answer_was_about() -> None:
    backend = asker({"30 EUR": "What does the lamp cost?"}, {"cost": "35 EUR now."})
    _session, report = run_with(
        notes("Lamp price 30 EUR.", "Lamp price now 35 EUR."), backend, QUESTION_RULES
    )
    assert report.attempts[0].model_text == "n2 about n1: 35 EUR now."


def test_an_engine_that_moves_its_cache_is_charged_what_it_computed() -> None:
    """llama.cpp's KV shift computes far less than the unshared tail after an edit: the
    engine's own count of the answer call replaces the estimate, and never raises it (an
    engine that computed the whole prompt would have done so for a keep too)."""
    estimate = run(kettle_snapshot(), chooser('"old-result"'))[1].edit_prefill_cost_tokens
    for reported, expected in ((0, 0), (10**6, estimate)):
        inner = chooser('"old-result"')

        def counted(
            prompt: PreparedPrompt,
            max_tokens: int,
            inner: ScriptedBackend = inner,
            reported: int = reported,
        ) -> ModelResponse:
            response = inner.generate(prompt, max_tokens)
            if prompt.input.phase is Phase.COMPLETION:
                return response.model_copy(update={"prefill_tokens": reported})
            return response

        _, report = run(kettle_snapshot(), ScriptedBackend(counted))
        assert report.edit_prefill_cost_tokens == expected
    assert estimate > 0
