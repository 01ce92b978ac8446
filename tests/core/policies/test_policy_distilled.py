"""The distilled policy's protocol on the deterministic backend: the view, the map, valid and
invalid tool calls, budgets, cancellation, incrementality and verbatim recall."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from pydantic import ValidationError

from kettle import CORRECT_ANSWER, SCOPE, answer_from, kettle_snapshot
from picocontext import (
    Cancelled,
    CancelToken,
    ChatMessage,
    ContextSession,
    ModelResponse,
    ModelToolCall,
    Phase,
    PreparedPrompt,
    Record,
    Role,
    RunBudget,
    RunMode,
    Snapshot,
    ToolCall,
    ToolSpec,
    validate_snapshot,
)
from picocontext.distill.data import SummaryInput
from picocontext.distill.testing import FakeSummarizer
from picocontext.models import ByteCounter, ScriptedBackend
from picocontext.policies import ContextPolicy, DistilledPolicy
from picocontext.policies.distilled import GUIDANCE, SYSTEM_TEXT, DistilledConfig
from picocontext.policies.distilled_history import chunk_text, group_text, session_scopes
from picocontext.policies.history import history_units

BUDGET = RunBudget(
    context_window=12_000,
    total_tokens=200_000,
    edit_output_tokens=300,
    completion_output_tokens=300,
)
# a tail of 35% (4200 bytes) holds the newest kettle group (about 3.6 KB) but not the old one
KETTLE_TAIL = DistilledConfig(tail_share=0.35)
# a tail of 5% holds nothing: every unprotected kettle record is distilled
ALL_OLDER = DistilledConfig(tail_share=0.05, map_share=0.2)

Responder = Callable[[PreparedPrompt, int], ModelResponse]


def calls(*pairs: tuple[str, str]) -> ModelResponse:
    return ModelResponse(
        tool_calls=tuple(ModelToolCall(name=n, arguments=a) for n, a in pairs),
        generated_tokens=8 * len(pairs),
    )


def results(prompt: PreparedPrompt) -> list[Record]:
    return [r for r in prompt.input.control_records if r.role is Role.TOOL]


def script(*steps: ModelResponse) -> Responder:
    """Tool steps in order; once they are used up, answer from what the prompt shows."""
    queue = list(steps)

    def respond(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        if queue and prompt.input.phase is Phase.TOOLS:
            return queue.pop(0)
        return answer_from(prompt, 9)

    return respond


def session_for(respond: Responder, snapshot: Snapshot | None = None) -> ContextSession:
    return ContextSession(snapshot or kettle_snapshot(), ByteCounter(), ScriptedBackend(respond))


def policy_at(
    tmp_path: Path,
    settings: DistilledConfig = ALL_OLDER,
    summarizer: FakeSummarizer | None = None,
) -> DistilledPolicy:
    return DistilledPolicy(summarizer or FakeSummarizer(), corpus_dir=tmp_path, config=settings)


def notes_history(groups: int, lines: int = 12, start: int = 0) -> tuple[Record, ...]:
    """Tool groups of gauge readings: group i reports ``reading-i=value-i`` among filler."""
    out: list[Record] = []
    for i in range(start, start + groups):
        filler = [
            f"Gauge pass {i}.{t}: needle steady; seal intact; log rotated." for t in range(lines)
        ]
        out += [
            Record(
                id=f"g{i}-call",
                role=Role.ASSISTANT,
                tool_calls=(ToolCall(id=f"g{i}-link", name="gauge", arguments=f'{{"n":{i}}}'),),
            ),
            Record(
                id=f"g{i}-data",
                role=Role.TOOL,
                tool_call_id=f"g{i}-link",
                body="\n".join([f"READING reading-{i}=value-{i * 7}", *filler]),
            ),
        ]
    return tuple(out)


def gauge_snapshot(groups: int, lines: int = 12) -> Snapshot:
    head = (
        Record(id="rules", role=Role.SYSTEM, body="Report readings exactly."),
        Record(id="task", role=Role.USER, protected=True, body="Track every gauge reading."),
    )
    return Snapshot(scope=SCOPE, records=head + notes_history(groups, lines))


# -- protocol and view ---------------------------------------------------------------------


def test_policy_protocol_and_report(tmp_path: Path) -> None:
    policy = policy_at(tmp_path, KETTLE_TAIL)
    assert isinstance(policy, ContextPolicy) and policy.name == "distilled"
    session = session_for(script())
    report = policy.turn(session, BUDGET)
    assert report.failure is None and report.answer != ""
    assert report.policy == "distilled" and report.mode is RunMode.DISTILLED
    first = report.calls[0].input
    assert first.phase is Phase.TOOLS
    assert first.system_text == SYSTEM_TEXT and first.guidance == GUIDANCE
    assert [t["function"]["name"] for t in first.tools or []] == ["digest", "resolve", "recall"]
    assert report.tool_steps == ()


def test_view_is_protected_records_plus_recent_tail_and_a_protected_map(tmp_path: Path) -> None:
    policy = policy_at(tmp_path, KETTLE_TAIL)
    session = session_for(script())
    report = policy.turn(session, BUDGET)
    first = report.calls[0]
    view = first.input.context
    assert view.ids == ["instructions", "task", "new-call", "new-result", "warranty-result"]
    # the older group is only in the tree (the map's excerpts may quote its summary)
    assert all("OUTDATED" not in r.body for r in view.records)
    (digest_map,) = first.input.control_records
    assert digest_map.protected and digest_map.role is Role.USER
    assert digest_map.id not in {r.id for r in kettle_snapshot().records}
    assert digest_map.body.startswith("Digest map: 2 older records (1 groups)")
    assert "digest:2:tenant" in digest_map.body
    validate_snapshot(Snapshot(scope=SCOPE, records=(*view.records, digest_map)))
    # the newest data was visible, so the scripted model answered without tools
    assert report.answer == CORRECT_ANSWER
    (turn,) = policy.turns(SCOPE)
    assert turn.older_records == 2 and turn.visible_records == 5
    assert turn.map_tokens > 0 and turn.result_allowance > 0


def test_newest_unprotected_request_is_always_visible(tmp_path: Path) -> None:
    long_request = "Please compare every gauge reading with last week. " * 80
    snapshot = gauge_snapshot(3)
    snapshot = snapshot.model_copy(
        update={"records": (*snapshot.records, Record(id="ask", role=Role.USER, body=long_request))}
    )
    report = policy_at(tmp_path).turn(session_for(script(), snapshot), BUDGET)
    assert report.failure is None
    assert report.calls[0].input.context.ids == ["rules", "task", "ask"]


def test_nothing_older_means_no_distillation(tmp_path: Path) -> None:
    summarizer = FakeSummarizer()
    policy = policy_at(tmp_path, DistilledConfig(tail_share=0.8, map_share=0.05), summarizer)
    report = policy.turn(session_for(script()), BUDGET)
    assert report.calls[0].input.context == kettle_snapshot()
    assert "nothing older has been distilled" in report.calls[0].input.control_records[0].body
    assert summarizer.calls == 0 and report.answer == CORRECT_ANSWER


# -- valid and invalid tool calls ----------------------------------------------------------


def test_valid_digest_resolve_and_recall_calls(tmp_path: Path) -> None:
    sem: list[str] = []

    def respond(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        done = results(prompt)
        if prompt.input.phase is not Phase.TOOLS:
            return answer_from(prompt)
        if not done:
            return calls(("digest", '{"nodeId": "digest:2:tenant"}'))
        if len(done) == 1:
            sem.append(re.findall(r"sem ([0-9a-f]{16})", done[0].body)[0])
            return calls(("resolve", json.dumps({"hash": sem[0]})))
        if len(done) == 2:
            query = "TODAY Corvid kettle SKU price stock warranty months"
            return calls(
                ("recall", json.dumps({"query": query, "altitude": "entity", "budget": 900}))
            )
        return answer_from(prompt)

    policy = policy_at(tmp_path, ALL_OLDER)
    report = policy.turn(session_for(respond), BUDGET)
    assert report.failure is None
    assert [(t.name, t.ok) for t in report.tool_steps] == [
        ("digest", True),
        ("resolve", True),
        ("recall", True),
    ]
    digest, resolve, recall = (t.result for t in report.tool_steps)
    assert digest.startswith("digest:2:tenant (tenant, level 2") and "Children (" in digest
    assert f"sem {sem[0]}" in digest
    assert "near: digest:2:tenant (tenant, level 2, 0 bits)" in resolve
    assert recall.startswith("recall at entity altitude:")
    # verbatim older records came back and the model answered from them
    assert "TODAY: Corvid kettle SKU CK-88, price EUR 54.90, stock 9." in recall
    assert "Corvid kettle warranty: 18 months" in recall
    assert report.answer == CORRECT_ANSWER
    assert len(report.calls) == 4


INVALID = [
    ("digest", "{}", "digest: invalid arguments (nodeId: Field required)"),
    ("digest", '{"nodeId": "nope"}', 'No digest node "nope". Use a node id from the digest map'),
    ("recall", "not json", "recall: arguments are not valid JSON"),
    ("recall", '{"query": "x", "altitude": "sideways"}', "altitude must be auto, entity"),
    ("recall", '{"query": "x", "budget": 0}', "budget: Input should be greater than 0"),
    ("recall", '{"query": "x", "bogus": 1}', "bogus: Extra inputs are not permitted"),
    ("recall", '{"query": "x", "scope": "digest:1:nope"}', 'No digest node "digest:1:nope"'),
    ("resolve", '["abc"]', "resolve: arguments must be a JSON object."),
    ("resolve", '{"hash": ""}', "hash: String should have at least 1 character"),
    ("map", "{}", "Unknown tool. Available tools: digest, recall, resolve."),
    ("edit_context", '{"baseRevision": 0}', "Unknown tool."),
]


def test_invalid_tool_calls_are_clear_errors_not_crashes(tmp_path: Path) -> None:
    respond = script(calls(*((name, args) for name, args, _ in INVALID)))
    session = session_for(respond)
    report = policy_at(tmp_path).turn(session, BUDGET)
    assert report.failure is None
    assert len(report.tool_steps) == len(INVALID)
    for step, (name, args, message) in zip(report.tool_steps, INVALID, strict=True):
        assert not step.ok and step.name == name and step.arguments == args
        assert message in step.result, (name, args, step.result)
    # a model that gives up still gets its forced answer; the session is unchanged
    assert report.answer != "" and session.context == kettle_snapshot()
    assert "Example:" in report.tool_steps[0].result  # errors say how to call it right


# -- budgets ---------------------------------------------------------------------------------


def _prompts_fit(session: ContextSession, window: int) -> None:
    backend = session.backend
    assert isinstance(backend, ScriptedBackend)
    for prompt, cap in zip(backend.prompts, backend.max_tokens, strict=True):
        assert prompt.token_count <= window - cap


def test_recall_budget_is_reduced_to_fit_the_window(tmp_path: Path) -> None:
    budget = BUDGET.model_copy(update={"context_window": 6_500})
    big = json.dumps({"query": "kettle stock", "altitude": "entity", "budget": 100_000})
    session = session_for(script(calls(("recall", big)), calls(("recall", big))))
    report = policy_at(tmp_path).turn(session, budget)
    assert report.failure is None
    first, second = report.tool_steps
    assert first.ok and "(budget reduced from 100000 to " in first.result
    # the second recall gets what is left (possibly nothing), never more than the window
    assert "budget reduced" in second.result or second.result.startswith("No room is left")
    _prompts_fit(session, budget.context_window)


def test_no_room_left_is_a_refused_call_not_a_failure(tmp_path: Path) -> None:
    budget = BUDGET.model_copy(update={"context_window": 8000})
    digest = calls(("digest", '{"nodeId": "digest:2:tenant"}'))
    session = session_for(script(*[digest] * 6))
    settings = ALL_OLDER.model_copy(update={"max_steps": 6})
    report = policy_at(tmp_path, settings).turn(session, budget)
    assert report.failure is None
    oks = [t.ok for t in report.tool_steps]
    assert len(oks) == 6 and oks[0] and not oks[-1]
    assert report.tool_steps[-1].result.startswith("No room is left in the context window")
    _prompts_fit(session, budget.context_window)


def test_total_allowance_exhaustion_is_reported(tmp_path: Path) -> None:
    budget = BUDGET.model_copy(update={"total_tokens": 4_000})
    session = session_for(script(calls(("digest", '{"nodeId": "digest:2:tenant"}'))))
    report = policy_at(tmp_path).turn(session, budget)
    assert report.failure == (
        "Token budget exceeded: total input/output allowance cannot reserve the next completion"
    )
    assert session.context == kettle_snapshot()


def test_window_smaller_than_the_protected_records_is_reported(tmp_path: Path) -> None:
    budget = BUDGET.model_copy(update={"context_window": 1_200})
    backend = ScriptedBackend([])
    session = ContextSession(kettle_snapshot(), ByteCounter(), backend)
    report = policy_at(tmp_path).turn(session, budget)
    assert report.failure == (
        "Token budget exceeded: input plus reserved output exceeds the context window"
    )
    assert backend.prompts == [] and report.calls == ()


def test_map_is_fitted_to_its_share_and_says_what_it_left_out(tmp_path: Path) -> None:
    settings = DistilledConfig(tail_share=0.05, map_share=0.15, span_groups=2)
    policy = policy_at(tmp_path, settings)
    session = session_for(script(), gauge_snapshot(24, lines=4))
    report = policy.turn(session, BUDGET)
    assert report.failure is None
    (turn,) = policy.turns(SCOPE)
    assert turn.map_nodes_omitted > 0 and turn.map_nodes_listed >= 1
    assert turn.map_tokens <= 0.15 * BUDGET.context_window
    body = report.calls[0].input.control_records[0].body
    assert f"({turn.map_nodes_omitted} more digest nodes not listed" in body
    # newest spans come first
    assert body.index("span of groups 0023-0024") < body.index("span of groups 0021-0022")


# -- cancellation ----------------------------------------------------------------------------


def test_cancel_during_a_tool_step(tmp_path: Path) -> None:
    token = CancelToken()

    def respond(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        token.cancel()
        return calls(("digest", '{"nodeId": "digest:2:tenant"}'))

    policy = policy_at(tmp_path)
    session = session_for(respond)
    with pytest.raises(Cancelled):
        policy.turn(session, BUDGET, token)
    assert session.context == kettle_snapshot()
    session.append_records([Record(id="later", role=Role.USER, body="still usable")])


class CancellingSummarizer(FakeSummarizer):
    """Cancels the turn's token on its n-th call (as a user pressing Stop mid-distillation)."""

    def __init__(self, token: CancelToken, at: int) -> None:
        super().__init__()
        self.token = token
        self.at = at

    def summarize(self, request: SummaryInput) -> str:
        if self.calls + 1 == self.at:
            self.token.cancel()
        return super().summarize(request)


def test_cancel_during_distillation_then_resume(tmp_path: Path) -> None:
    token = CancelToken()
    summarizer = CancellingSummarizer(token, at=3)
    policy = policy_at(tmp_path, summarizer=summarizer)
    backend = ScriptedBackend(script())
    session = ContextSession(kettle_snapshot(), ByteCounter(), backend)
    with pytest.raises(Cancelled):
        policy.turn(session, BUDGET, token)
    assert backend.prompts == []  # nothing reached the model
    assert summarizer.calls == 3  # it stopped at the next call after the cancel
    report = policy.turn(session, BUDGET, CancelToken())
    assert report.failure is None
    turn = policy.turns(SCOPE)[-1]
    leaves = [n for n in policy.distiller(SCOPE).store.nodes() if n.level == 0]
    assert len(leaves) == turn.leaves == 6  # nothing lost: every leaf is in the tree


# -- incrementality --------------------------------------------------------------------------


def leaf_raws(summarizer: FakeSummarizer, since: int) -> list[str]:
    return [i.raw for i in summarizer.inputs[since:] if i.level == 0]


def expected_units(records: Sequence[Record], words: int) -> list[str]:
    return [c for g in history_units(records) for c in chunk_text(group_text(g), words)]


def last_view(session: ContextSession) -> set[str]:
    backend = session.backend
    assert isinstance(backend, ScriptedBackend)
    return set(backend.prompts[-1].input.context.ids)


def test_each_turn_summarises_only_what_the_last_turn_added(tmp_path: Path) -> None:
    settings = DistilledConfig(tail_share=0.1, map_share=0.1, leaf_words=60)
    summarizer = FakeSummarizer()
    policy = policy_at(tmp_path / "corpus", settings, summarizer)
    session = session_for(script(), gauge_snapshot(6))
    policy.turn(session, BUDGET)
    first = policy.turns(SCOPE)[0]
    assert first.leaf_summaries == first.leaves == first.new_leaves > 0
    view = last_view(session)
    older_first = {r.id for r in session.context.records if r.id not in view}

    session.append_records(notes_history(3, start=6))
    mark = len(summarizer.inputs)
    policy.turn(session, BUDGET)
    second = policy.turns(SCOPE)[-1]
    view = last_view(session)
    newly_older = [
        r for r in session.context.records if r.id not in view and r.id not in older_first
    ]
    assert newly_older  # the tail moved on
    # exactly the groups that became older in between were summarised, nothing else at L0
    assert leaf_raws(summarizer, mark) == expected_units(newly_older, 60)
    assert second.leaf_summaries == second.new_leaves == len(expected_units(newly_older, 60))
    assert second.leaves == first.leaves + second.new_leaves
    # rollups only along the changed path: fewer calls than a rebuild from scratch
    rebuild = FakeSummarizer()
    policy_at(tmp_path / "fresh", settings, rebuild).turn(
        session_for(script(), session.context), BUDGET
    )
    assert second.summarizer_calls < rebuild.calls

    # a turn with nothing new costs no summary at all
    policy.turn(session, BUDGET)
    assert policy.turns(SCOPE)[-1].summarizer_calls == 0
    policy.close()
    # the corpus persists: a new policy over the same directory has nothing to redo
    again = FakeSummarizer()
    reopened = policy_at(tmp_path / "corpus", settings, again)
    reopened.turn(session, BUDGET)
    assert again.calls == 0 and reopened.turns(SCOPE)[-1].leaves == second.leaves
    reopened.close()


# -- verbatim recall -------------------------------------------------------------------------


def test_every_older_record_is_recallable_verbatim_at_entity_altitude(tmp_path: Path) -> None:
    policy = policy_at(tmp_path)
    session = session_for(script())
    policy.turn(session, BUDGET)
    tools = policy.distiller(SCOPE).tools()
    leaves = sorted(n.id for n in tools.store.nodes() if n.level == 0)
    older = [g for g in history_units(kettle_snapshot().records) if not any(r.protected for r in g)]
    texts: dict[str, str] = {}
    for leaf in leaves:
        pack = tools.call(
            "recall", {"query": "anything", "altitude": "entity", "scope": leaf, "budget": 10**5}
        )
        assert pack["altitude"] == "entity"
        (item,) = pack["items"]
        texts[leaf] = item["text"]
    for group in older:
        chunks = [texts[k] for k in sorted(texts, key=_part) if _group_of(k) == group[0].id]
        assert "".join(chunks) == group_text(group)
        for record in group:
            assert record.body in group_text(group)


def _group_of(leaf_id: str) -> str:
    return leaf_id.removeprefix("digest:0:history:").split("/")[0]


def _part(leaf_id: str) -> tuple[str, int]:
    head, _, part = leaf_id.partition("/")
    return head, int(part or 1)


def test_recall_through_the_model_path_returns_the_leaf_text(tmp_path: Path) -> None:
    leaf = "digest:0:history:old-call/1"
    args = json.dumps({"query": "stock", "altitude": "entity", "scope": leaf, "budget": 5000})
    session = session_for(script(calls(("recall", args))))
    report = policy_at(tmp_path).turn(session, BUDGET)
    (step,) = report.tool_steps
    assert step.ok and f"--- older group 1, part 1/2 ({leaf})" in step.result
    assert "OUTDATED: price EUR 61.00, stock 2." in step.result


# -- the working context ---------------------------------------------------------------------


def test_the_working_context_is_never_modified(tmp_path: Path) -> None:
    steps = [calls(("digest", '{"nodeId": "digest:2:tenant"}')), calls(("recall", "bad"))]
    session = session_for(script(*steps))
    before = session.state
    report = policy_at(tmp_path).turn(session, BUDGET)
    assert session.state == before
    assert session.context == report.run_start == report.revised == kettle_snapshot()
    assert session.original_context == report.original == kettle_snapshot()
    assert report.diff == "" and report.attempts == ()


# -- summarizers -----------------------------------------------------------------------------


class WordChat:
    """A deterministic ChatModel: the summary is the first words of the prompt's last line."""

    def __init__(self, cancel_on: int | None = None, token: CancelToken | None = None) -> None:
        self.calls = 0
        self.cancels: list[CancelToken | None] = []
        self.cancel_on = cancel_on
        self.token = token

    @property
    def model_id(self) -> str:
        return "word-chat"

    def count_tokens(self, text: str) -> int:
        return len(text.encode("utf-8"))

    def chat(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        cancel: CancelToken | None = None,
    ) -> ModelResponse:
        self.calls += 1
        self.cancels.append(cancel)
        if self.calls == self.cancel_on and self.token is not None:
            self.token.cancel()
        if cancel is not None:
            cancel.check()  # a real model checks while it generates
        words = messages[-1].content.split("\n")[-1].split()[:12]
        return ModelResponse(text=" ".join(words) or "empty", generated_tokens=len(words))


def test_chat_model_summaries_and_the_turn_token_reaches_the_model(tmp_path: Path) -> None:
    chat = WordChat()
    policy = DistilledPolicy.over_chat_model(chat, corpus_dir=tmp_path, config=ALL_OLDER)
    token = CancelToken()
    report = policy.turn(session_for(script()), BUDGET, token)
    assert report.failure is None and chat.calls == policy.turns(SCOPE)[0].summarizer_calls > 0
    assert all(c is token for c in chat.cancels)
    assert policy.distiller(SCOPE).recipe_model.summarizer_id == "chat:word-chat"

    stop = CancelToken()
    stopping = WordChat(cancel_on=2, token=stop)
    other = DistilledPolicy.over_chat_model(stopping, corpus_dir=tmp_path / "b", config=ALL_OLDER)
    with pytest.raises(Cancelled):
        other.turn(session_for(script()), BUDGET, stop)
    assert stopping.calls == 2


def test_failed_summaries_fall_back_to_extracts_and_stay_recallable(tmp_path: Path) -> None:
    summarizer = FakeSummarizer(fail_on="OUTDATED")
    policy = policy_at(tmp_path, summarizer=summarizer)
    args = json.dumps({"query": "OUTDATED price", "altitude": "entity", "budget": 400})
    report = policy.turn(session_for(script(calls(("recall", args)))), BUDGET)
    assert report.failure is None
    assert policy.turns(SCOPE)[0].fallback_summaries >= 1
    assert "OUTDATED: price EUR 61.00, stock 2." in report.tool_steps[0].result


def test_failed_summaries_fail_the_turn_when_fallback_is_off(tmp_path: Path) -> None:
    settings = ALL_OLDER.model_copy(update={"fallback_summaries": False})
    policy = policy_at(tmp_path, settings, FakeSummarizer(fail_on="OUTDATED"))
    backend = ScriptedBackend(script())
    report = policy.turn(ContextSession(kettle_snapshot(), ByteCounter(), backend), BUDGET)
    assert report.failure is not None
    assert report.failure.startswith("Distilling older history failed (1 failures):")
    assert "fake summarizer refuses 'OUTDATED'" in report.failure
    assert backend.prompts == []


# -- lifecycle and settings ------------------------------------------------------------------


def test_owned_corpus_is_removed_on_close_and_a_closed_policy_refuses(tmp_path: Path) -> None:
    policy = DistilledPolicy(FakeSummarizer(), config=ALL_OLDER)
    owned = policy.corpus_dir
    policy.turn(session_for(script()), BUDGET)
    assert owned.is_dir() and policy.corpus_path(SCOPE).joinpath("nodes.sqlite").is_file()
    policy.close()
    assert not owned.exists()
    report = policy.turn(session_for(script()), BUDGET)
    assert report.failure == "This distilled policy was closed; create a new one."

    with policy_at(tmp_path) as kept:
        kept.turn(session_for(script()), BUDGET)
    assert (kept.corpus_path(SCOPE) / "nodes.sqlite").is_file()  # a given directory stays


def test_scopes_get_separate_corpora(tmp_path: Path) -> None:
    policy = policy_at(tmp_path)
    other = SCOPE.model_copy(update={"branch_id": "alt"})
    policy.turn(session_for(script()), BUDGET)
    policy.turn(session_for(script(), kettle_snapshot(other)), BUDGET)
    assert policy.corpus_path(SCOPE) != policy.corpus_path(other)
    assert policy.distiller(SCOPE) is not policy.distiller(other)
    assert len(policy.turns(SCOPE)) == len(policy.turns(other)) == 1


@pytest.mark.parametrize(
    "values",
    [
        {"tail_share": 0.8, "map_share": 0.2},
        {"tail_share": 0.0},
        {"max_steps": 17},
        {"leaf_words": 2},
        {"unknown": 1},
    ],
)
def test_settings_are_validated(values: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        DistilledConfig.model_validate(values)


def test_extracted_leaves_leave_only_digests_to_the_model(tmp_path: Path) -> None:
    summarizer = FakeSummarizer()
    settings = ALL_OLDER.model_copy(update={"extract_leaves": True})
    policy = policy_at(tmp_path, settings, summarizer)
    args = json.dumps({"query": "OUTDATED price", "altitude": "entity", "budget": 400})
    report = policy.turn(session_for(script(calls(("recall", args)))), BUDGET)
    (turn,) = policy.turns(SCOPE)
    assert turn.extracted_leaves == turn.leaf_summaries == turn.leaves == 6
    assert all(i.level > 0 for i in summarizer.inputs)
    assert turn.summarizer_calls == turn.digest_summaries == summarizer.calls > 0
    assert "OUTDATED: price EUR 61.00, stock 2." in report.tool_steps[0].result
    policy.close()
    # the leaf recipe is part of the corpus: switching back re-summarises every leaf
    again = FakeSummarizer()
    policy_at(tmp_path, ALL_OLDER, again).turn(session_for(script()), BUDGET)
    assert sum(1 for i in again.inputs if i.level == 0) == 6


def _digest_form(result: str) -> str:
    if result.startswith("No room is left"):
        return "refused"
    if "more children not shown" in result:
        return "fewer"
    if "Gauge pass 9.2" in result:
        return "full"
    summarised = re.search(r"^- \S+ \([^)]*\): ", result, re.MULTILINE)
    return "excerpts" if summarised else "ids"


def test_digest_results_shrink_step_by_step_as_the_window_tightens(tmp_path: Path) -> None:
    settings = DistilledConfig(tail_share=0.05, map_share=0.1, span_groups=64, max_steps=1)
    digest = calls(("digest", '{"nodeId": "digest:1:scope:span:0001-0064"}'))
    forms: list[str] = []
    sizes: list[int] = []
    for window in [*range(15_000, 3_999, -1_000), 3_500]:
        session = session_for(script(digest), gauge_snapshot(24, lines=4))
        budget = BUDGET.model_copy(update={"context_window": window})
        report = policy_at(tmp_path / str(window), settings).turn(session, budget)
        assert report.failure is None
        (step,) = report.tool_steps
        forms.append(_digest_form(step.result))
        sizes.append(len(step.result))
        _prompts_fit(session, window)
        if step.ok:
            assert re.search(r"Children \(2\d\):", step.result)
            # leaves are listed in history order (group 10 after group 9, not after group 1)
            if "older group 10)" in step.result:
                assert step.result.index("older group 9)") < step.result.index("older group 10)")
    order = ["full", "excerpts", "ids", "fewer", "refused"]
    assert sorted(set(forms), key=order.index) == order
    assert forms == sorted(forms, key=order.index)  # never richer in a smaller window
    by_form = {f: max(n for n, g in zip(sizes, forms, strict=True) if g == f) for f in order}
    assert by_form["full"] > by_form["excerpts"] > by_form["ids"] > by_form["fewer"]


def test_caller_ids_that_look_like_runtime_ids_do_not_collide(tmp_path: Path) -> None:
    records = kettle_snapshot().records
    lookalikes = (
        Record(id="runtime-digest-map", role=Role.USER, protected=True, body="a caller note"),
        Record(  # protected, so the group stays visible next to the runtime's records
            id="runtime-call-0",
            role=Role.ASSISTANT,
            protected=True,
            tool_calls=(ToolCall(id="runtime-tool-0-0", name="stock", arguments="{}"),),
        ),
        Record(
            id="runtime-result-runtime-tool-0-0",
            role=Role.TOOL,
            tool_call_id="runtime-tool-0-0",
            body="TODAY: Corvid kettle SKU CK-88, price EUR 54.90, stock 9.",
        ),
    )
    snapshot = Snapshot(scope=SCOPE, records=records + lookalikes)
    digest = calls(("digest", '{"nodeId": "digest:2:tenant"}'))
    session = session_for(script(digest), snapshot)
    report = policy_at(tmp_path).turn(session, BUDGET)
    assert report.failure is None and report.tool_steps[0].ok
    control = report.calls[-1].input.control_records
    assert {r.id for r in control}.isdisjoint(snapshot.ids)
    assert control[0].body.startswith("Digest map:")


def test_concurrent_turns_of_different_scopes_share_one_policy(tmp_path: Path) -> None:
    import threading

    policy = policy_at(tmp_path)
    scopes = [SCOPE.model_copy(update={"branch_id": f"b{i}"}) for i in range(4)]
    reports: dict[str, str | None] = {}
    recall = json.dumps({"query": "TODAY kettle SKU", "altitude": "entity", "budget": 300})

    def run(scope_index: int) -> None:
        scope = scopes[scope_index]
        session = session_for(script(calls(("recall", recall))), kettle_snapshot(scope))
        report = policy.turn(session, BUDGET)
        reports[scope.branch_id] = report.failure if report.tool_steps[0].ok else "recall failed"

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert reports == {f"b{i}": None for i in range(4)}
    assert all(len(policy.turns(s)) == 1 and policy.turns(s)[0].leaves == 6 for s in scopes)
    policy.close()


def test_the_distiller_keeps_one_summarizer_for_its_whole_life(tmp_path: Path) -> None:
    # The turn's summarizer settings (cancel, counts, fallback) are switched on for its sweep,
    # never by rewiring the distiller, which another thread may be reading at that moment.
    seen: list[object] = []

    class Watching(FakeSummarizer):
        def summarize(self, request: SummaryInput) -> str:
            seen.append(policy.distiller(SCOPE).summarizer)  # what the distiller holds now
            return super().summarize(request)

    policy = policy_at(tmp_path, summarizer=Watching())
    distiller = policy.distiller(SCOPE)
    before = distiller.summarizer
    policy.turn(session_for(script()), BUDGET)
    assert seen and all(s is before for s in seen)
    assert distiller.summarizer is before and policy.turns(SCOPE)[-1].summarizer_calls > 0
    policy.close()


# -- sessions --------------------------------------------------------------------------------


def dated_history(sessions: int, turns: int) -> Snapshot:
    """``sessions`` sessions of ``turns`` dated chat turns each (a conversation as
    ``picocontext eval --conversation`` writes it), then the question."""
    records = [Record(id="task", role=Role.USER, protected=True, body="Chat.")]
    for s in range(sessions):
        for t in range(turns):
            role = Role.USER if t % 2 == 0 else Role.ASSISTANT
            body = f"[2026-0{s + 1}-03] {'Ann' if t % 2 == 0 else 'Bo'}: Turn {t} of day {s}."
            records.append(Record(id=f"s{s}t{t}", role=role, body=body))
    records.append(Record(id="q", role=Role.USER, protected=True, body="What was on day 1?"))
    return Snapshot(scope=SCOPE, records=tuple(records))


def test_a_dated_conversation_gets_one_dated_digest_per_session(tmp_path: Path) -> None:
    older = history_units(dated_history(3, 4).records[1:-1])
    assert session_scopes(older) == [
        f"00{s + 1} 2026-0{s + 1}-03" for s in range(3) for _ in "1234"
    ]
    undated = [(Record(id=f"u{i}", role=Role.USER, body="No date."),) for i in range(3)]
    assert session_scopes(undated) is None
    assert session_scopes(older[:4]) is None  # one session: nothing to tell apart
    policy = policy_at(tmp_path, DistilledConfig(tail_share=0.05, map_share=0.3))
    report = policy.turn(session_for(script(), dated_history(3, 4)), BUDGET)
    (digest_map,) = report.calls[0].input.control_records
    lines = digest_map.body.split("\n")
    listed = [line.split(" digest:")[0] for line in lines if line.startswith("- session")]
    # newest first, each dated; the newest session is partly in the verbatim tail
    assert listed[-2:] == ["- session 002 2026-02-03", "- session 001 2026-01-03"]
    spans = policy_at(tmp_path / "spans", DistilledConfig(tail_share=0.05, sessions=False))
    report = spans.turn(session_for(script(), dated_history(3, 4)), BUDGET)
    assert "- span of groups" in report.calls[0].input.control_records[0].body
