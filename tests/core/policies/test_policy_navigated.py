"""The navigated policy's protocol on a deterministic backend: the split, the archive manifest,
valid and invalid verb calls, the runtime and window budgets, cancellation and caching."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import picocontext.policies.navigated as navigated_module
from picocontext import (
    BudgetExceeded,
    Cancelled,
    CancelToken,
    ChatMessage,
    ContextSession,
    ModelInput,
    ModelResponse,
    ModelToolCall,
    Phase,
    PreparedPrompt,
    Record,
    Role,
    RunBudget,
    RunMode,
    Scope,
    Snapshot,
    ToolCall,
    ToolSpec,
    validate_snapshot,
)
from picocontext.build.compiler import compile_tree
from picocontext.build.errors import SelfCheckFailed
from picocontext.cancel import CancelToken as _Token
from picocontext.manifest import HeuristicCounter, NavAction
from picocontext.models import ByteCounter, ScriptedBackend
from picocontext.policies import ContextPolicy, NavigatedPolicy
from picocontext.policies.archive_tree import archive_tree, key_words, leaf_text, session_tree
from picocontext.policies.history import TextMeter, history_units, split_history, text_meter_for
from picocontext.policies.navigated import (
    PLAIN_SYSTEM_TEXT,
    NavigatedConfig,
    NavigatedTurn,
    NavPlan,
    newest_that_compiles,
    tail_ladder,
    with_index,
)
from picocontext.policies.navigated_tools import NAV_TOOLS, NO_ROOM, parse_arguments
from picocontext.report import RunReport

# The model navigates alone (the default, said explicitly): these tests drive the tool
# protocol itself, which a prefetching navigator would partly do for it.
ALONE = NavigatedConfig(navigator=None)
# Checked at the full view (lines with "when" and keys): these scenarios need an archive the
# default tail cannot leave room for, which the exact check at the brief view would admit.
CHECKED_FULL = NavigatedConfig(navigator=None, check_view="full")


def index_text(plan: NavPlan) -> str:
    """The archive index record's text (the plan must have an archive)."""
    assert plan.index is not None
    return plan.index.body


def turn_with_info(
    policy: NavigatedPolicy, session: ContextSession, budget: RunBudget
) -> tuple[RunReport, NavigatedTurn | None]:
    """The report and the turn record this turn added (None when it added none)."""
    before = len(policy.turns(session.scope))
    report = policy.turn(session, budget)
    turns = policy.turns(session.scope)
    return report, (turns[-1] if len(turns) > before else None)


SCOPE = Scope(user_id="u-1", conversation_id="ledger", branch_id="main")
ACCOUNTS = ("north", "quarry", "harbor", "meadow", "summit", "delta", "canyon", "orchard")
WINDOW = 16_384
BUDGET = RunBudget(
    context_window=WINDOW,
    total_tokens=200_000,
    edit_output_tokens=256,
    completion_output_tokens=256,
)


def balance(sheet: int) -> str:
    return f"{sheet * 1731 % 9973}.{sheet * 37 % 100:02d}"


def sheet_body(sheet: int, lines: int = 30) -> str:
    noise = "\n".join(
        f"row {sheet}.{i:02d}: reconciled, memo {(sheet * 97 + i * 13) % 4096:03x}"
        for i in range(lines)
    )
    account = ACCOUNTS[sheet % len(ACCOUNTS)]
    return f"Sheet {sheet} lists account {account} with balance {balance(sheet)}.\n{noise}"


def ledger(turns: int = 10, lines: int = 30, question: str = "") -> Snapshot:
    records = [
        Record(id="rules", role=Role.SYSTEM, body="Quote balances exactly."),
        Record(id="task", role=Role.USER, protected=True, body="Help me audit the ledger."),
    ]
    for t in range(1, turns + 1):
        records += [
            Record(id=f"ask-{t}", role=Role.USER, body=f"Turn {t}: fetch ledger sheet {t}."),
            Record(
                id=f"fetch-{t}",
                role=Role.ASSISTANT,
                body="Fetching.",
                tool_calls=(
                    ToolCall(id=f"c-{t}", name="ledger", arguments=json.dumps({"sheet": t})),
                ),
            ),
            Record(
                id=f"sheet-{t}", role=Role.TOOL, tool_call_id=f"c-{t}", body=sheet_body(t, lines)
            ),
        ]
    records.append(
        Record(
            id="question",
            role=Role.USER,
            body=question or "Which balance did sheet 2 list? Answer with the number only.",
        )
    )
    return Snapshot(scope=SCOPE, records=tuple(records))


def call(name: str, arguments: object, n: int = 8) -> ModelResponse:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ModelResponse(tool_calls=(ModelToolCall(name=name, arguments=text),), generated_tokens=n)


def answer(text: str) -> ModelResponse:
    return ModelResponse(text=text, generated_tokens=len(text))


def shown_text(prompt: PreparedPrompt) -> str:
    return "\n".join(r.body for r in prompt.input.control_records)


def scripted(
    steps: Sequence[ModelResponse | Callable[[PreparedPrompt], ModelResponse]],
) -> ScriptedBackend:
    """Tool-phase prompts get the scripted steps in order; the forced completion (and any
    prompt after the script) answers from what is visible."""
    queue = list(steps)

    def respond(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        if prompt.input.phase is Phase.TOOLS and queue:
            item = queue.pop(0)
            return item if isinstance(item, ModelResponse) else item(prompt)
        return answer(balance(2) if balance(2) in prompt.rendered else "not found")

    return ScriptedBackend(respond)


def session_for(snapshot: Snapshot, backend: ScriptedBackend) -> ContextSession:
    return ContextSession(snapshot, ByteCounter(), backend)


# -- the policy object -----------------------------------------------------------------------


def test_is_a_context_policy_with_strict_tools() -> None:
    policy = NavigatedPolicy()
    assert isinstance(policy, ContextPolicy) and policy.name == "navigated"
    assert NavigatedPolicy(name="nav-llm").name == "nav-llm"
    names = [t.name for t in NAV_TOOLS]
    assert names == ["index", "look", "open", "close"]
    for spec in NAV_TOOLS:
        assert isinstance(spec, ToolSpec)
        assert spec.parameters["additionalProperties"] is False
    assert NAV_TOOLS[2].parameters["required"] == ["id"]


def test_config_rejects_shares_that_leave_no_room() -> None:
    with pytest.raises(ValueError, match="below 1"):
        NavigatedConfig(tail_share=0.6, nav_share=0.4)
    with pytest.raises(ValueError):
        NavigatedConfig(max_steps=17)


# -- splitting ---------------------------------------------------------------------------------


def _bytes(view: Snapshot) -> int:
    return ByteCounter().prepare(ModelInput(context=view, phase=Phase.COMPLETION)).token_count


def test_split_keeps_protected_records_the_latest_request_and_whole_groups() -> None:
    snapshot = ledger()
    split = split_history(snapshot, _bytes, 2000)
    validate_snapshot(split.view)
    view_ids = [r.id for r in split.view.records]
    archived = [r.id for u in split.archive for r in u]
    assert sorted(view_ids + archived) == sorted(snapshot.ids)  # a partition
    assert {"rules", "task", "question"} <= set(view_ids)
    assert split.pinned_ids == ("question",)
    assert archived[:3] == ["ask-1", "fetch-1", "sheet-1"]
    # the tail is the newest suffix of unprotected units and stays within its share
    assert split.tail_ids == tuple(view_ids[2:-1])
    assert 0 < split.tail_tokens <= 2000
    assert split.view.records[-1].id == "question"


def test_zero_tail_still_shows_the_latest_request() -> None:
    split = split_history(ledger(), _bytes, 0)
    assert [r.id for r in split.view.records] == ["rules", "task", "question"]
    assert split.tail_ids == () and split.tail_tokens == 0


unit_kinds = st.lists(
    st.tuples(
        st.sampled_from(["user", "assistant", "calls"]),
        st.integers(1, 3),
        st.booleans(),
        st.integers(0, 300),
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=60, deadline=None)
@given(kinds=unit_kinds, share=st.integers(0, 3000))
def test_split_property_valid_view_and_whole_units(
    kinds: list[tuple[str, int, bool, int]], share: int
) -> None:
    records = [Record(id="task", role=Role.USER, protected=True, body="task")]
    for i, (kind, calls, protected, size) in enumerate(kinds):
        body = "x" * size
        if kind == "calls":
            links = tuple(ToolCall(id=f"c{i}-{j}", name="t") for j in range(calls))
            records.append(
                Record(id=f"a{i}", role=Role.ASSISTANT, protected=protected, tool_calls=links)
            )
            records += [
                Record(id=f"r{i}-{j}", role=Role.TOOL, tool_call_id=link.id, body=body)
                for j, link in enumerate(links)
            ]
        else:
            role = Role.USER if kind == "user" else Role.ASSISTANT
            records.append(Record(id=f"m{i}", role=role, protected=protected, body=body))
    snapshot = Snapshot(scope=SCOPE, records=tuple(records))
    validate_snapshot(snapshot)
    split = split_history(snapshot, _bytes, share)
    validate_snapshot(split.view)  # whole groups only, first user protected
    view = {r.id for r in split.view.records}
    assert all(r.id in view for r in records if r.protected)
    for unit in split.archive:
        assert not any(r.protected for r in unit)
    assert [r for r in records if r.id in view] == list(split.view.records)  # order kept
    units = history_units(records)
    assert sum(len(u) for u in units) == len(records)
    assert split.tail_tokens <= share
    if split.archive:  # maximal: the newest archived unit would not have fit
        base = Snapshot(
            scope=SCOPE, records=tuple(r for r in split.view.records if r.id not in split.tail_ids)
        )
        grown = Snapshot(
            scope=SCOPE,
            records=tuple(r for r in records if r.id in view or r in split.archive[-1]),
        )
        assert _bytes(grown) - _bytes(base) > share
    users = [r for r in records if r.role is Role.USER]
    assert users[-1].id in view  # the latest request is always shown


# -- the archive manifest ----------------------------------------------------------------------


def test_archive_tree_is_chronological_and_keeps_records_verbatim() -> None:
    snapshot = ledger(turns=12)
    units = history_units(snapshot.records[2:-1])
    positions = {r.id: i for i, r in enumerate(snapshot.records, start=1)}
    tree = archive_tree(units, positions, segment_records=8, group_width=5)
    groups = tree.root.children
    assert [g.title for g in groups] == [
        "Turns 1-5 #3-#17",
        "Turns 6-10 #18-#32",
        "Turns 11-12 #33-#38",
    ]
    first_turn = groups[0].children[0]
    assert first_turn.title == "Turn 1 #3-#5"
    leaves = {n.id: n for n in tree.root.walk() if n.is_leaf}
    assert set(leaves) == {r.id for u in units for r in u}
    for unit in units:
        for record in unit:
            assert leaves[record.id].content == leaf_text(record)
    assert leaves["sheet-1"].content == snapshot.record("sheet-1").body  # type: ignore[union-attr]
    assert leaves["fetch-1"].content.endswith('-> ledger({"sheet": 1}) [call c-1]')
    assert leaves["sheet-1"].title == "#5 tool result of ledger"


def test_record_ids_that_collide_with_tree_ids_stay_record_ids() -> None:
    records = (
        Record(id="r", role=Role.ASSISTANT, body="named like the root"),
        Record(id="turn-1", role=Role.ASSISTANT, body="named like a turn"),
    )
    tree = archive_tree([(r,) for r in records], {"r": 3, "turn-1": 4}, 8, 5)
    leaf_ids = [n.id for n in tree.root.walk() if n.is_leaf]
    assert leaf_ids == ["r~2", "turn-1"]
    assert tree.root.children[0].id == "turn-1~2"


def test_every_archived_record_is_reachable_verbatim() -> None:
    session = session_for(ledger(), scripted([]))
    policy = NavigatedPolicy(ALONE)
    plan = policy.plan(session.counter, session.state, BUDGET)
    manifest = plan.info.manifest
    assert manifest is not None and plan.info.archived_ids
    for rid in plan.info.archived_ids:
        fresh = policy.plan(session.counter, session.state, BUDGET)
        assert fresh.info.compiled == "reused"
        text = ""
        for nid in [*manifest.ancestors(rid)[1:], rid]:
            result = fresh.loop.execute("open", json.dumps({"id": nid}))
            assert result.ok, result.text
            text = result.text
        record = session.context.record(rid)
        assert record is not None and leaf_text(record) in text
        assert f"--- {rid} (full) ---" in text


def test_a_record_too_big_to_open_whole_is_paged_verbatim() -> None:
    snapshot = ledger(turns=6)
    big = "\n".join(f"entry {i:03d}: balance line kept exactly" for i in range(120))
    records = list(snapshot.records)
    records.insert(2, Record(id="dump", role=Role.ASSISTANT, body=big))
    session = session_for(Snapshot(scope=SCOPE, records=tuple(records)), scripted([]))
    policy = NavigatedPolicy(ALONE)
    plan = policy.plan(session.counter, session.state, BUDGET)
    manifest = plan.info.manifest
    assert manifest is not None and not manifest.get("dump").is_leaf
    texts = []
    for part in manifest.get("dump").children or ():
        fresh = policy.plan(session.counter, session.state, BUDGET)
        for nid in [*manifest.ancestors(part)[1:], part]:
            result = fresh.loop.execute("open", json.dumps({"id": nid}))
            assert result.ok, result.text
        texts.append(result.text)
    joined = "\n".join(texts)
    assert all(line in joined for line in big.split("\n"))


# -- turns -------------------------------------------------------------------------------------


def test_valid_navigation_reads_a_verbatim_record_and_answers() -> None:
    backend = scripted(
        [
            call("index", {}),
            call("open", {"id": "turns-1-5"}),
            call("look", {"ids": ["turn-2"]}),
            call("open", {"id": "turn-2"}),
            call("open", {"id": "sheet-2"}),
            call("close", {"id": "sheet-2"}),
        ]
    )
    snapshot = ledger()
    session = session_for(snapshot, backend)
    report, info = turn_with_info(NavigatedPolicy(ALONE), session, BUDGET)
    assert report.failure is None and report.answer == balance(2)
    assert report.mode is RunMode.NAVIGATED and report.policy == "navigated"
    assert [(t.name, t.ok) for t in report.tool_steps] == [
        ("index", True),
        ("open", True),
        ("look", True),
        ("open", True),
        ("open", True),
        ("close", True),
    ]
    assert "turns-1-5 [branch:5]" in report.tool_steps[0].result
    assert "turn-2 [branch:3]" in report.tool_steps[1].result
    assert "| when:" in report.tool_steps[2].result  # look shows the full line
    assert "sheet-2 [leaf]" in report.tool_steps[3].result
    assert sheet_body(2) in report.tool_steps[4].result  # verbatim
    assert "tokens freed" in report.tool_steps[5].result
    # the first prompt shows the index as a protected record where the archive was: after
    # the protected head, before the shown tail and the question (time order kept)
    first = backend.prompts[0]
    assert first.input.phase is Phase.TOOLS and first.input.tools_json is not None
    shown = first.input.context.records
    index = next(r for r in shown if r.body.startswith("ARCHIVE INDEX"))
    assert index.protected and not first.input.control_records
    ids = [r.id for r in shown]
    assert ids.index("task") < ids.index(index.id) < ids.index("question")
    tail = [r.id for r in shown[ids.index(index.id) + 1 :]]
    assert tail and all(i.startswith(("ask-", "fetch-", "sheet-", "question")) for i in tail)
    assert "sheet-2" not in ids
    assert balance(2) not in first.rendered  # the fact is only in the archive
    # the answer came after the model read it; the working context never changed
    assert session.context == snapshot == report.revised == report.run_start
    assert session.original_context == snapshot
    assert info is not None and info.counter == "rendered:ByteCounter"
    assert info.manifest is not None and info.manifest.source.tokenizer == info.counter
    assert info.shown_tokens > info.index_tokens and info.refused == 0
    assert all(p.token_count <= WINDOW - 256 for p in backend.prompts)


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("open", {"id": "no-such-node"}, "Unknown node id 'no-such-node'"),
        ("open", {"id": "r"}, "is the root"),
        ("open", {"id": "sheet-2"}, "is not on the frontier"),
        ("look", {"ids": ["sheet-2"]}, "is not on the frontier"),
        ("open", "not json", "not valid JSON"),
        ("open", "[1, 2]", "must be a JSON object"),
        ("open", {"id": "turn-2", "level": "full"}, "Invalid arguments"),
        ("open", {"id": 2}, "Invalid arguments (id"),
        ("open", {}, "Invalid arguments (id"),
        ("look", {"ids": []}, "Invalid arguments (ids"),
        ("index", {"x": 1}, "index takes no arguments"),
        ("close", {"id": "nowhere"}, "Unknown node id"),
        ("forget", {"id": "turn-2"}, "Unknown tool. Available tools: close, index, look, open."),
    ],
)
def test_invalid_calls_get_a_clear_error_and_the_model_may_retry(
    name: str, arguments: object, message: str
) -> None:
    backend = scripted(
        [
            call(name, arguments),
            call("open", {"id": "turns-1-5"}),
            call("open", {"id": "turn-2"}),
            call("open", {"id": "sheet-2"}),
        ]
    )
    snapshot = ledger()
    session = session_for(snapshot, backend)
    report = NavigatedPolicy(ALONE).turn(session, BUDGET)
    assert report.failure is None and report.answer == balance(2)
    first = report.tool_steps[0]
    assert not first.ok and message in first.result, first.result
    assert [t.ok for t in report.tool_steps[1:]] == [True, True, True]
    assert session.context == snapshot


def test_error_results_say_where_ids_come_from() -> None:
    backend = scripted([call("open", {"id": "sheet-2"})])
    report = NavigatedPolicy(ALONE).turn(session_for(ledger(), backend), BUDGET)
    assert "open 'turns-1-5' first." in report.tool_steps[0].result
    assert "Ids are the first word of an index line" in report.tool_steps[0].result


def test_reopening_and_closing_what_is_not_open_are_harmless() -> None:
    backend = scripted(
        [
            call("open", {"id": "turns-1-5"}),
            call("open", {"id": "turns-1-5"}),
            call("close", {"id": "turn-5"}),
        ]
    )
    report = NavigatedPolicy().turn(session_for(ledger(), backend), BUDGET)
    assert [t.ok for t in report.tool_steps] == [True, True, True]
    assert "already open" in report.tool_steps[1].result
    assert "nothing to close" in report.tool_steps[2].result


def test_runtime_budget_refuses_an_open_until_something_is_closed() -> None:
    session = session_for(ledger(), scripted([]))
    policy = NavigatedPolicy(NavigatedConfig(navigator=None, tail_share=0.2, nav_share=0.25))
    plan = policy.plan(session.counter, session.state, BUDGET)
    assert plan.nav is not None and plan.info.manifest is not None
    run = plan.loop.execute
    refused = None
    for sheet in range(1, 7):
        for branch in plan.info.manifest.ancestors(f"sheet-{sheet}")[1:]:
            assert run("open", json.dumps({"id": branch})).ok
        result = run("open", json.dumps({"id": f"sheet-{sheet}"}))
        if not result.ok:
            refused = sheet
            break
    assert refused is not None and refused > 1
    assert "remain" in result.text and "close" in result.text
    assert not plan.nav.runtime.is_spliced(f"sheet-{refused}")  # a refusal changes nothing
    assert plan.nav.spent <= plan.info.nav_budget
    closed = run("close", '{"id": "sheet-1"}')
    assert closed.ok and "tokens freed" in closed.text
    assert run("open", json.dumps({"id": f"sheet-{refused}"})).ok


def test_transcript_guard_refuses_what_would_overflow_the_window() -> None:
    session = session_for(ledger(), scripted([]))
    plan = NavigatedPolicy(ALONE).plan(session.counter, session.state, BUDGET)
    assert plan.nav is not None and plan.executor is not None
    assert plan.loop.execute("open", '{"id": "turns-1-5"}').ok
    assert plan.loop.execute("open", '{"id": "turn-2"}').ok
    # what the model has been shown stays in this turn's prompt: leave little room
    plan.executor.used = plan.executor.limit - plan.executor.reserve - 400
    refused = plan.loop.execute("open", '{"id": "sheet-2"}')
    assert not refused.ok and "would not fit in the context window" in refused.text
    assert not plan.nav.runtime.is_spliced("sheet-2")
    plan.executor.used = plan.executor.limit
    assert plan.loop.execute("open", '{"id": "sheet-2"}').text == NO_ROOM


def test_greedy_reader_never_pushes_a_prompt_past_the_window() -> None:
    def greedy(prompt: PreparedPrompt) -> ModelResponse:
        text = shown_text(prompt)
        opened = {
            json.loads(c.arguments)["id"]
            for r in prompt.input.control_records
            for c in r.tool_calls
            if c.name == "open"
        }
        ids = [
            line.split(" ", 1)[0]
            for line in text.split("\n")
            if " [leaf]" in line or " [branch:" in line
        ]
        todo = [i for i in ids if i not in opened and i != "r"]
        return call("open", {"id": todo[0] if todo else "turn-1"})

    backend = scripted([greedy] * 16)
    session = session_for(ledger(), backend)
    policy = NavigatedPolicy(
        NavigatedConfig(navigator=None, max_steps=16, nav_share=0.6, tail_share=0.2)
    )
    report, info = turn_with_info(policy, session, BUDGET)
    assert report.failure is None and len(report.tool_steps) == 16
    refusals = [t for t in report.tool_steps if not t.ok]
    assert refusals and info is not None and info.refused == len(refusals)
    assert all(p.token_count <= WINDOW - 256 for p in backend.prompts)


def test_steps_are_bounded_and_the_last_call_must_answer() -> None:
    backend = scripted([call("index", {})] * 10)
    policy = NavigatedPolicy(NavigatedConfig(navigator=None, max_steps=3))
    report = policy.turn(session_for(ledger(), backend), BUDGET)
    assert report.failure is None and report.answer == "not found"
    assert len(report.tool_steps) == 3 and len(report.calls) == 4
    assert report.calls[-1].input.phase is Phase.COMPLETION
    assert report.calls[-1].input.tools_json is None


def test_total_budget_exhaustion_is_a_report_failure() -> None:
    backend = scripted([call("open", {"id": "turn-2"})] * 3)
    snapshot = ledger()
    session = session_for(snapshot, backend)
    tight = BUDGET.model_copy(update={"total_tokens": 24_000})
    report = NavigatedPolicy().turn(session, tight)
    assert (
        report.failure
        == BudgetExceeded("total input/output allowance cannot reserve the next completion").message
    )
    assert report.total_input_tokens <= 24_000 and session.context == snapshot


def test_no_room_for_the_index_is_a_clear_failure() -> None:
    snapshot = ledger()
    huge = Record(id="brief", role=Role.USER, protected=True, body="y" * 12_000)
    crowded = Snapshot(scope=SCOPE, records=(*snapshot.records[:2], huge, *snapshot.records[2:]))
    backend = scripted([])
    report, info = turn_with_info(NavigatedPolicy(), session_for(crowded, backend), BUDGET)
    assert report.failure is not None and "archive index" in report.failure
    assert backend.prompts == [] and report.calls == ()
    assert info is not None and info.archived_ids and info.manifest is None


def test_an_archive_the_compiler_cannot_fit_is_a_report_failure() -> None:
    config = NavigatedConfig(nav_share=0.02, min_nav_tokens=1)
    report = NavigatedPolicy(config).turn(session_for(ledger(), scripted([])), BUDGET)
    assert report.failure is not None and "variant" in report.failure


def test_an_archive_too_big_to_index_whole_is_indexed_from_its_newest_records() -> None:
    """At the largest reading budget no index of the whole archive reaches every leaf (it
    stopped a live run before); the turn indexes the newest whole units that do, answers, and
    the index and the turn record name what was left out."""
    config = NavigatedConfig(navigator=None, nav_share=0.15, min_nav_tokens=1)
    session = session_for(ledger(turns=16), scripted([]))
    policy = NavigatedPolicy(config)
    report, info = turn_with_info(policy, session, BUDGET)
    assert report.failure is None and info is not None and info.manifest is not None
    dropped = info.dropped_ids
    assert dropped and dropped == info.archived_ids[: len(dropped)]  # the oldest, in order
    kept = info.archived_ids[len(dropped) :]
    assert policy._refused  # the whole archive was refused
    first = session.context.record(kept[0])
    assert first is not None and first.role is not Role.TOOL  # whole groups
    assert all(rid in info.manifest.nodes for rid in kept)
    assert not any(rid in info.manifest.nodes for rid in dropped)
    plan = policy.plan(session.counter, session.state, BUDGET)
    assert plan.info.dropped_ids == dropped and plan.info.compiled == "reused"
    body = index_text(plan)
    assert f"({len(kept)} archived records;" in body
    assert f"{len(dropped)} oldest records, #" in body and "cannot be read" in body


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_newest_part_that_compiles_is_found_in_few_compiles(data: st.DataObject) -> None:
    """Whatever the largest archive suffix that compiles, the search keeps exactly it, in a
    number of compiles logarithmic in the archive's length; none at all raises the error
    the whole archive failed with."""
    size = data.draw(st.integers(min_value=2, max_value=80), label="units")
    fits = data.draw(st.integers(min_value=0, max_value=size - 1), label="largest suffix")
    calls: list[int] = []
    failed = SelfCheckFailed(100, ["oracle: whole archive"])

    def compile_(units: Sequence[object]) -> tuple[Any, Any, float]:
        calls.append(len(units))
        if len(units) > fits:
            raise SelfCheckFailed(100, ["oracle: too big"])
        return f"suffix-{len(units)}", "full", 1.0

    archive = [(Record(id=f"r{i}", role=Role.USER, body="x"),) for i in range(size)]
    if fits == 0:
        with pytest.raises(SelfCheckFailed) as caught:
            newest_that_compiles(archive, compile_, failed, None)
        assert caught.value is failed
    else:
        got = newest_that_compiles(archive, compile_, failed, None)
        compiled = float(sum(1 for c in calls if c <= fits))  # 1 s per compile that passed
        assert list(got) == [f"suffix-{fits}", "full", compiled, fits]
    assert len(calls) <= 2 * size.bit_length() + 1


def test_when_everything_fits_there_is_no_archive_and_no_tools() -> None:
    backend = scripted([])
    big = BUDGET.model_copy(update={"context_window": 64_000})
    report, info = turn_with_info(NavigatedPolicy(), session_for(ledger(), backend), big)
    assert report.failure is None and report.answer == balance(2)
    assert len(report.calls) == 1 and report.calls[0].input.control_records == ()
    assert report.calls[0].input.system_text == PLAIN_SYSTEM_TEXT  # no archive to talk about
    assert info is not None and info.compiled == "none" and info.archived_ids == ()


# -- cancellation ------------------------------------------------------------------------------


def test_cancellation_before_the_turn() -> None:
    token = CancelToken()
    token.cancel()
    snapshot = ledger()
    session = session_for(snapshot, scripted([]))
    with pytest.raises(Cancelled):
        NavigatedPolicy().turn(session, BUDGET, token)
    assert session.context == snapshot


def test_cancellation_during_navigation_leaves_the_session_usable() -> None:
    token = _Token()

    def cancel_then_open(prompt: PreparedPrompt) -> ModelResponse:
        token.cancel()
        return call("open", {"id": "turn-2"})

    snapshot = ledger()
    session = session_for(snapshot, scripted([cancel_then_open]))
    with pytest.raises(Cancelled):
        NavigatedPolicy().turn(session, BUDGET, token)
    assert session.context == snapshot
    session.append_records([Record(id="later", role=Role.USER, body="still usable")])


def test_cancellation_while_the_archive_is_compiled() -> None:
    token = CancelToken()

    class Cancelling(_Describer):
        def chat(
            self,
            messages: Sequence[ChatMessage],
            max_tokens: int,
            tools: Sequence[ToolSpec] = (),
            cancel: CancelToken | None = None,
        ) -> ModelResponse:
            token.cancel()
            return super().chat(messages, max_tokens, tools, cancel)

    describer = Cancelling()
    snapshot = ledger()
    backend = scripted([])
    session = session_for(snapshot, backend)
    with pytest.raises(Cancelled):
        NavigatedPolicy(describer=describer).turn(session, BUDGET, token)
    assert describer.calls == 1 and backend.prompts == []
    assert session.context == snapshot


# -- caching and counting ----------------------------------------------------------------------


def test_unchanged_history_is_not_recompiled_and_growth_is_incremental() -> None:
    policy = NavigatedPolicy()
    session = session_for(ledger(), scripted([]))
    _, first = turn_with_info(policy, session, BUDGET)
    _, again = turn_with_info(policy, session, BUDGET)
    assert first is not None and again is not None
    assert first.compiled == "full" and first.engine_calls > 0
    assert again.compiled == "reused" and again.engine_calls == 0
    assert again.manifest == first.manifest
    extra = [
        Record(id="ask-11", role=Role.USER, body="Turn 11: fetch ledger sheet 11."),
        Record(id="note-11", role=Role.ASSISTANT, body=sheet_body(11)),
        Record(id="question-2", role=Role.USER, body="And sheet 2 again?"),
    ]
    session.append_records(extra)
    _, grown = turn_with_info(policy, session, BUDGET)
    assert grown is not None and grown.compiled == "incremental"
    assert grown.cache_hits > 0 and len(grown.archived_ids) > len(first.archived_ids)
    replan = policy.plan(session.counter, session.state, BUDGET)
    assert replan.info.compiled == "reused"
    for rid in grown.archived_ids:  # the incremental build still serves every record verbatim
        record = session.context.record(rid)
        assert record is not None and replan.leaves[rid] == leaf_text(record)
    # another conversation with the same policy object has its own cache entry
    other = Scope(user_id="u-2", conversation_id="ledger", branch_id="main")
    elsewhere = ContextSession(
        ledger().model_copy(update={"scope": other}), ByteCounter(), scripted([])
    )
    _, separate = turn_with_info(policy, elsewhere, BUDGET)
    assert separate is not None and separate.compiled == "full"


def test_questions_that_alternate_between_reading_budgets_reuse_both_compiles() -> None:
    policy = NavigatedPolicy()
    session = session_for(ledger(), scripted([]))
    wider = BUDGET.model_copy(update={"context_window": BUDGET.context_window + 2_048})
    modes = [policy.plan(session.counter, session.state, b).info for b in (BUDGET, wider) * 2]
    assert modes[0].nav_budget != modes[1].nav_budget
    assert [m.compiled for m in modes] == ["full", "incremental", "reused", "reused"]
    assert modes[2].manifest == modes[0].manifest and modes[3].manifest == modes[1].manifest


class _Tokenizing(ByteCounter):
    """A byte counter that also counts text, like a model's tokenizer would."""

    model_id = "fake-tokenizer"

    def count_tokens(self, text: str) -> int:
        return len(text.encode("utf-8"))


def test_counter_choice_is_recorded() -> None:
    assert text_meter_for(_Tokenizing()).name == "tokenizer:fake-tokenizer"
    rendered = text_meter_for(ByteCounter())
    assert isinstance(rendered, TextMeter) and rendered.name == "rendered:ByteCounter"
    assert rendered.count("héllo") == len("héllo".encode()) and rendered.count("") == 0
    assert text_meter_for(ByteCounter(), "heuristic").name == "heuristic:4chars"
    with pytest.raises(ValueError, match="count_tokens"):
        text_meter_for(ByteCounter(), "tokenizer")
    session = ContextSession(ledger(), _Tokenizing(), scripted([]))
    _, info = turn_with_info(NavigatedPolicy(), session, BUDGET)
    assert info is not None and info.counter == "tokenizer:fake-tokenizer"
    explicit = NavigatedPolicy(text_counter=HeuristicCounter())
    _, info = turn_with_info(explicit, session_for(ledger(), scripted([])), BUDGET)
    assert info is not None and info.counter == "heuristic:4chars"
    assert info.manifest is not None and info.manifest.source.tokenizer == "heuristic:4chars"


class _Describer:
    """A chat model that writes every descriptor itself (and grades everything as fine)."""

    model_id = "fake-describer"

    def __init__(self) -> None:
        self.calls = 0

    def count_tokens(self, text: str) -> int:
        return len(text) // 4

    def chat(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        cancel: CancelToken | None = None,
    ) -> ModelResponse:
        self.calls += 1
        user = messages[-1].content
        title = user.split("\n", 1)[0].split(": ", 1)[-1]
        reply = {
            "what": f"Described by the model: {title}",
            "when": f"When the audit needs {title}",
            "keywords": ["audit"],
            "score": 1.0,
            "reason": "fine",
            "expect": ["balance", "sheet"],
        }
        return ModelResponse(text=json.dumps(reply), generated_tokens=10)


def test_a_chat_model_writes_the_descriptors_when_given() -> None:
    describer = _Describer()
    policy = NavigatedPolicy(describer=describer)
    _, info = turn_with_info(policy, session_for(ledger(), scripted([])), BUDGET)
    assert info is not None and info.manifest is not None and describer.calls > 0
    assert info.engine.startswith("llm-prompts/")
    whats = [n.what for n in info.manifest.nodes.values()]
    assert any(w.startswith("Described by the model") for w in whats)


# -- strict arguments --------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(["index", "look", "open", "close"]),
    raw=st.one_of(
        st.text(max_size=40),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.sampled_from(["id", "ids", "x"]), inner, max_size=3)
            ),
            max_leaves=6,
        ).map(json.dumps),
    ),
)
@example(name="look", raw='{"ids": [""]}')  # found by a fresh clone's run: an empty id
def test_argument_parser_accepts_exactly_the_schema(name: str, raw: str) -> None:
    try:
        parsed = parse_arguments(name, raw)
    except ValueError as exc:
        assert name in str(exc) or "JSON" in str(exc)
        return
    value = json.loads(raw.strip() or "{}")
    if name == "index":
        assert value == {}
    elif name == "look":
        assert set(value) == {"ids"} and 1 <= len(value["ids"]) <= 16
        assert all(isinstance(i, str) and i for i in value["ids"])
    else:
        assert set(value) == {"id"} and isinstance(value["id"], str) and value["id"]
    assert parsed is not None


# -- records bigger than the reading budget ----------------------------------------------------

FEED_BUDGET = RunBudget(
    context_window=WINDOW,
    total_tokens=96_000,
    edit_output_tokens=4096,
    completion_output_tokens=2048,
)


def feed_snapshot(steps: int = 2, noise: int = 80) -> Snapshot:
    """Each step: a feed call, a ~4.9 KB verbatim result and a protected request (the shape of
    the playground's pressure episode)."""
    records = [
        Record(id="rules", role=Role.SYSTEM, body="Quote values exactly."),
        Record(id="task", role=Role.USER, protected=True, body="Track the sensor values."),
    ]
    for s in range(1, steps + 1):
        lines = [f"set gauge-{s} = {s * 37 % 101}"] + [
            f"sensor {s} tick {t:02d}: drift nominal, humidity steady, fan rpm {s * t % 977}"
            for t in range(noise)
        ]
        records += [
            Record(
                id=f"feed-{s}",
                role=Role.ASSISTANT,
                tool_calls=(ToolCall(id=f"f-{s}", name="feed", arguments=f'{{"step":{s}}}'),),
            ),
            Record(id=f"data-{s}", role=Role.TOOL, tool_call_id=f"f-{s}", body="\n".join(lines)),
            Record(id=f"ask-{s}", role=Role.USER, protected=True, body=f"What is gauge-{s}?"),
        ]
    return Snapshot(scope=SCOPE, records=tuple(records))


def test_records_bigger_than_the_reading_budget_are_paged_reachably() -> None:
    snapshot = feed_snapshot()
    session = session_for(snapshot, scripted([]))
    policy = NavigatedPolicy(CHECKED_FULL)
    # With the default tail (data-2 shown in full) about 3,000 bytes are left for reading:
    # less than data-1, and too little for any paging of it (every page's index line costs
    # room too), so the tail has to give way to the archive.
    default_tail = split_history(
        snapshot, lambda v: _bytes(v), int(NavigatedConfig().tail_share * WINDOW)
    )
    assert "data-2" in default_tail.tail_ids and "data-1" not in default_tail.tail_ids
    report, info = turn_with_info(policy, session, FEED_BUDGET)
    assert report.failure is None, report.failure
    assert info is not None and info.manifest is not None and "data-1" in info.archived_ids
    assert info.tail_tokens < default_tail.tail_tokens
    manifest = info.manifest
    for rid in ("data-1", *(r for r in info.archived_ids if r.startswith("data-"))):
        record = session.context.record(rid)
        assert record is not None and len(leaf_text(record).encode()) > 4000
        node = manifest.get(rid)
        parts = list(node.children or ()) if not node.is_leaf else [rid]
        pages: list[str] = []
        for part in parts:
            fresh = policy.plan(session.counter, session.state, FEED_BUDGET)
            assert fresh.info.compiled == "reused"
            result = None
            for nid in [*manifest.ancestors(part)[1:], part]:
                result = fresh.loop.execute("open", json.dumps({"id": nid}))
                assert result.ok, result.text
            assert result is not None and fresh.leaves[part] in result.text
            pages.append(fresh.leaves[part])
        assert "\n".join(pages) == leaf_text(record)


@given(st.integers(min_value=0, max_value=1_000_000))
def test_tail_ladder_shrinks_to_zero(first: int) -> None:
    ladder = tail_ladder(first)
    assert ladder[0] == first and ladder[-1] == 0 and len(ladder) <= 4
    assert all(a > b for a, b in itertools.pairwise(ladder))


def test_a_refused_archive_is_not_recompiled_on_the_next_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = session_for(feed_snapshot(), scripted([])).state
    policy = NavigatedPolicy(CHECKED_FULL)
    first = policy.plan(ByteCounter(), state, FEED_BUDGET)
    assert len(policy._refused) >= 1  # the default tail's archive was refused once
    calls: list[object] = []
    real = compile_tree

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(navigated_module, "compile_tree", counting)
    second = policy.plan(ByteCounter(), state, FEED_BUDGET)
    assert second.info.compiled == "reused" and calls == []
    assert second.info.tail_tokens == first.info.tail_tokens


def test_a_named_navigator_walks_the_archive_first_and_is_charged() -> None:
    session = session_for(ledger(), scripted([]))
    alone = NavigatedPolicy(ALONE).plan(session.counter, session.state, BUDGET)
    config = NavigatedConfig(navigator="subtree-backout", prefetch_steps=4)
    helped = NavigatedPolicy(config).plan(session.counter, session.state, BUDGET)
    assert helped.nav is not None and alone.nav is not None
    body = index_text(helped)
    assert len(body) > len(index_text(alone))
    assert "[context]" in body  # a leaf was opened and spliced with its envelope
    assert helped.info.spent > alone.info.spent
    assert helped.info.spent == helped.nav.spent
    with pytest.raises(ValueError, match="navigator must be one of"):
        NavigatedConfig(navigator="nope")


def test_a_tail_that_leaves_no_reading_room_yields_to_a_smaller_one() -> None:
    # At a 6,144-token window a 60 % tail leaves no room for the archive index; the policy
    # must go down the tail ladder (it used to fail the turn at the first rung).
    config = NavigatedConfig(tail_share=0.6, nav_share=0.35)
    budget = BUDGET.model_copy(update={"context_window": 6_144})
    session = session_for(ledger(6), ScriptedBackend([answer("2.37")]))
    report, info = turn_with_info(NavigatedPolicy(config), session, budget)
    assert info is not None and info.archived_ids
    assert info.tail_tokens < tail_ladder(int(0.6 * 6_144))[1]  # a later rung was tried
    assert "tokens for the archive index" not in (report.failure or "")


def test_the_archive_is_checked_with_the_protocol_the_model_is_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The model reads the policy's own short PROTOCOL, so reachability is proved with that
    # text charged, not with the default protocol it is never shown.
    seen: list[str | None] = []

    def spy(tree: Any, engine: Any, options: Any, **kwargs: Any) -> Any:
        seen.append(options.check_protocol)
        return compile_tree(tree, engine, options, **kwargs)

    monkeypatch.setattr(navigated_module, "compile_tree", spy)
    state = session_for(feed_snapshot(), scripted([])).state
    NavigatedPolicy().plan(ByteCounter(), state, FEED_BUDGET)
    assert seen and all(p == navigated_module.PROTOCOL for p in seen)


@pytest.mark.parametrize(("window", "steps"), [(2048, 4), (4096, 4), (6144, 6), (16_384, 8)])
def test_reserved_tool_steps_scale_with_the_window(window: int, steps: int) -> None:
    assert NavigatedConfig().steps_for(window) == steps
    assert NavigatedConfig(max_steps=3).steps_for(window) == 3


def test_fewer_reserved_steps_leave_more_to_read_in_a_small_window() -> None:
    # The same archive and budget: the default (7 steps at this window) reads with more than
    # eight reserved steps would leave, and its loop is capped at those 7 steps.
    budget = FEED_BUDGET.model_copy(
        update={"context_window": 7168, "edit_output_tokens": 256, "completion_output_tokens": 256}
    )
    state = session_for(feed_snapshot(steps=3, noise=12), scripted([])).state
    # nav_share 0.6: the room, not the share, limits reading here
    auto = NavigatedPolicy(NavigatedConfig(nav_share=0.6, tail_share=0.2, check_view="full"))
    eight = NavigatedPolicy(
        NavigatedConfig(nav_share=0.6, tail_share=0.2, max_steps=8, check_view="full")
    )
    auto_plan = auto.plan(ByteCounter(), state, budget)
    eight_plan = eight.plan(ByteCounter(), state, budget)
    assert auto_plan.loop.max_steps == NavigatedConfig().steps_for(budget.context_window) < 8
    assert eight_plan.loop.max_steps == 8
    assert auto_plan.info.nav_budget > eight_plan.info.nav_budget


def test_a_scanning_navigator_searches_then_opens_and_every_shown_token_is_charged() -> None:
    """A prefetch carries out the search a search-first navigator (``subtree-scan``, the best
    on the held-out corpora of docs/build.md) begins with, then opens the best hit."""
    session = session_for(ledger(), scripted([]))
    alone = NavigatedPolicy(ALONE).plan(session.counter, session.state, BUDGET)
    helped = NavigatedPolicy(NavigatedConfig(navigator="subtree-scan")).plan(
        session.counter, session.state, BUDGET
    )
    assert helped.nav is not None and alone.nav is not None
    body = index_text(helped)
    assert "search hit" in body and "[context]" in body  # hits disclosed, then a leaf spliced
    assert helped.info.spent == helped.nav.spent > alone.info.spent
    assert helped.nav.shown_tokens >= helped.nav.spent


def test_a_close_ends_the_prefetch_so_what_was_shown_stays_charged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Scripted:
        def __init__(self) -> None:
            self.actions: list[NavAction] = []

        def prepare(self, manifest: Any) -> None:
            first = manifest.children_of(manifest.root_id)[0]
            self.actions = [
                NavAction(verb="search", query="sheet balance", k=3),
                NavAction(verb="close", ids=(first,)),
                NavAction(verb="open", ids=(first,)),
            ]

        def decide(self, query: str, frontier: Any, budget_remaining: int) -> NavAction:
            return self.actions.pop(0)

    monkeypatch.setattr(navigated_module, "make_navigator", lambda name: Scripted())
    session = session_for(ledger(), scripted([]))
    plan = NavigatedPolicy(NavigatedConfig(navigator="subtree-scan")).plan(
        session.counter, session.state, BUDGET
    )
    assert plan.nav is not None
    body = index_text(plan)
    assert "search hit" in body and "[context]" not in body  # the open after the close: never
    assert plan.info.spent == plan.nav.spent


def test_the_archive_is_checked_at_the_view_the_model_is_shown() -> None:
    """The default tail's archive fails a check priced at full lines but passes the exact one
    at the brief lines the model reads, and every archived leaf is then reachable through
    the policy's own tools at that view."""
    state = session_for(feed_snapshot(), scripted([])).state
    full = NavigatedPolicy(CHECKED_FULL)
    full.plan(ByteCounter(), state, FEED_BUDGET)
    assert len(full._refused) >= 1
    exact = NavigatedPolicy(ALONE)
    plan = exact.plan(ByteCounter(), state, FEED_BUDGET)
    assert not exact._refused and plan.info.manifest is not None
    manifest = plan.info.manifest
    for leaf in manifest.leaf_ids:
        fresh = exact.plan(ByteCounter(), state, FEED_BUDGET)
        assert fresh.info.compiled == "reused"
        for nid in [*manifest.ancestors(leaf)[1:], leaf]:
            result = fresh.loop.execute("open", json.dumps({"id": nid}))
            assert result.ok, (leaf, result.text)


def test_the_index_stands_where_the_archive_ends() -> None:
    """After every shown record older than the newest archived one (a protected earlier
    request stays before it), before the recent tail and the question: time order kept."""
    records = (
        Record(id="rules", role=Role.SYSTEM, body="r"),
        Record(id="task", role=Role.USER, protected=True, body="t"),
        Record(id="ask-1", role=Role.USER, protected=True, body="report"),
        Record(id="reply-1", role=Role.ASSISTANT, body="{}"),
        Record(id="question", role=Role.USER, body="report"),
    )
    view = Snapshot(scope=SCOPE, records=records)
    # archived: records 3 and 5 of the history (#4 is ask-1, shown because it is protected)
    positions = {"rules": 1, "task": 2, "old-1": 3, "ask-1": 4, "old-2": 5, "reply-1": 6}
    positions["question"] = 7
    index = Record(id="runtime-history-index", role=Role.USER, protected=True, body="INDEX")
    placed = with_index(view, index, ("old-1", "old-2"), positions)
    assert [r.id for r in placed.records] == [
        "rules",
        "task",
        "ask-1",
        "runtime-history-index",
        "reply-1",
        "question",
    ]
    validate_snapshot(placed)


# -- sessions (opt-in) -------------------------------------------------------------------------


def dated_units(sessions: int, turns: int) -> list[tuple[Record, ...]]:
    records = []
    for d in range(sessions):
        for t in range(turns):
            role = Role.USER if t % 2 == 0 else Role.ASSISTANT
            who = "Ann" if t % 2 == 0 else "Bo"
            text = f"Turn {t} of day {d}." + (" The kettle broke." if (d, t) == (1, 2) else "")
            records.append(
                Record(id=f"d{d}t{t}", role=role, body=f"[2026-0{d + 1}-03] {who}: {text}")
            )
    return [(r,) for r in records]


def test_a_dated_archive_is_indexed_by_session_with_verbatim_passages() -> None:
    units = dated_units(3, 5)
    positions = {u[0].id: i for i, u in enumerate(units, start=3)}
    built = session_tree(units, positions, passage_records=2)
    assert built is not None
    tree, order = built
    sessions = tree.root.children
    assert [s.title for s in sessions] == [
        "Session 1 [2026-01-03] #3-#7",
        "Session 2 [2026-02-03] #8-#12",
        "Session 3 [2026-03-03] #13-#17",
    ]
    passages = sessions[1].children
    assert [len(p.content.split("\n")) for p in passages] == [2, 2, 1]
    # the date is on the session's line, every turn verbatim after its speaker
    assert passages[1].content == "Ann: Turn 2 of day 1. The kettle broke.\nBo: Turn 3 of day 1."
    assert passages[1].title.startswith("#10-#11 ") and "kettle" in passages[1].title
    assert order[passages[1].id] == 11
    assert session_tree(units[:5], positions) is None  # one session
    undated = [(Record(id=f"u{i}", role=Role.USER, body="No date."),) for i in range(4)]
    assert session_tree(undated, {f"u{i}": i for i in range(4)}) is None


def test_key_words_are_the_words_a_text_does_not_share() -> None:
    texts = ["the kettle kettle again", "the weather again", "the weather was fine again"]
    assert key_words(texts, 1) == [["kettle"], ["weather"], ["fine"]]
