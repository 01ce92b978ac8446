"""Four policies in one comparison: the registry, one core policy object per episode session,
the deterministic reader of the tools phase, the long-history task and ``--policies``."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from picocontext import (
    Cancelled,
    CancelToken,
    ContextSession,
    ModelInput,
    ModelResponse,
    Phase,
    Record,
    Role,
    RunBudget,
    RunMode,
    Scope,
    Snapshot,
    ToolCall,
)
from picocontext.backend import ChatMessage, ToolSpec
from picocontext.distill.summarizer import ChatSummarizer
from picocontext.distill.testing import FakeSummarizer
from picocontext.models import ByteCounter
from picocontext.policies import (
    AppendOnlyPolicy,
    ContextPolicy,
    DistilledPolicy,
    EditablePolicy,
    NavigatedPolicy,
)
from picocontext_diagnostics import cli, policies
from picocontext_diagnostics.backends import deterministic_backend, provenance
from picocontext_diagnostics.episodes.episode import Episode, generated_episode
from picocontext_diagnostics.episodes.episode_runner import EpisodeRunner
from picocontext_diagnostics.episodes.fixtures import Scenario, fixtures_dir
from picocontext_diagnostics.episodes.notebook_backend import (
    DeterministicNotebookBackend,
    ShownOnlyReader,
    history_chunks,
)
from picocontext_diagnostics.errors import InvalidConfiguration
from picocontext_diagnostics.evaluation import (
    EvaluationConfig,
    EvaluationLimits,
    EvaluationReport,
    EvaluationRunner,
    load_config,
)
from picocontext_diagnostics.policies import (
    BUILTIN_POLICIES,
    DISTILLED,
    FOUR_POLICIES,
    NAVIGATED,
    Policy,
    PolicyRun,
    create_policy_object,
    parse_policy_list,
)

SCOPE = Scope(user_id="u", conversation_id="four", branch_id="main")
WIDE = RunBudget(
    context_window=16_384,
    total_tokens=100_000,
    edit_output_tokens=1_024,
    completion_output_tokens=1_024,
)
# Tails so short that the previous answer is archived: the reader must fetch older history.
NARROW_NAVIGATED = Policy(
    name="navigated",
    config={"tail_share": 0.05, "nav_share": 0.6, "max_steps": 12},
)
NARROW_DISTILLED = Policy(
    name="distilled",
    config={"tail_share": 0.05, "map_share": 0.1, "max_steps": 8},
)


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def long_episode(steps: int = 8, seed: int = 17) -> Episode:
    return generated_episode(Scenario.STATE_UPDATES, seed, steps, 48, protect_requests=False)


# -- registry ---------------------------------------------------------------------------------


def test_builtin_registry_holds_the_four_compared_policies() -> None:
    assert FOUR_POLICIES == ("append-only", "editable", "navigated", "distilled")
    assert all(name in BUILTIN_POLICIES for name in FOUR_POLICIES)
    assert NAVIGATED.mode is RunMode.NAVIGATED and NAVIGATED.uses_tools
    assert DISTILLED.mode is RunMode.DISTILLED and DISTILLED.uses_tools
    assert not BUILTIN_POLICIES["editable"].uses_tools


def test_settings_must_match_the_kind() -> None:
    with pytest.raises(ValueError, match="Invalid config for policy 'editable'"):
        Policy(name="x", kind="editable", config={"tail_share": 0.2})
    with pytest.raises(ValueError, match="Invalid config for policy 'navigated'"):
        Policy(name="x", kind="navigated", config={"map_share": 0.2})
    with pytest.raises(ValueError, match="Unknown policy 'nope'; known policies: append-only"):
        Policy(name="nope")


def test_reports_of_the_first_layout_still_load() -> None:
    legacy = {"name": "summarize", "mode": "editable", "edit_style": "summarize"}
    assert Policy.model_validate(legacy) == BUILTIN_POLICIES["summarize"]
    narrow = {"name": "navigated", "mode": "navigated", "navigated": {"tail_share": 0.05}}
    assert Policy.model_validate(narrow).config == {"tail_share": 0.05}


def test_policy_with_settings_round_trips_through_json() -> None:
    text = NARROW_NAVIGATED.model_dump_json()
    assert Policy.model_validate_json(text) == NARROW_NAVIGATED


class _ChatBackend(DeterministicNotebookBackend):
    """A backend that is also a ChatModel, like the MLX models."""

    def count_tokens(self, text: str) -> int:
        return len(text.encode("utf-8"))

    def chat(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        cancel: CancelToken | None = None,
    ) -> ModelResponse:
        return ModelResponse(text="a summary", generated_tokens=2)


def test_policy_objects_follow_the_backend() -> None:
    plain = DeterministicNotebookBackend()
    baseline = create_policy_object(BUILTIN_POLICIES["append-only"], plain)
    assert isinstance(baseline, AppendOnlyPolicy)
    editable = create_policy_object(BUILTIN_POLICIES["summarize"], plain)
    assert isinstance(editable, EditablePolicy) and editable.name == "summarize"
    nav = create_policy_object(NARROW_NAVIGATED, plain)
    assert isinstance(nav, NavigatedPolicy) and nav.config.tail_share == 0.05
    fake = create_policy_object(DISTILLED, plain)
    assert isinstance(fake, DistilledPolicy)
    assert isinstance(fake.summarizer, FakeSummarizer) and not fake.config.extract_leaves
    live = create_policy_object(DISTILLED, _ChatBackend())
    assert isinstance(live, DistilledPolicy) and isinstance(live.summarizer, ChatSummarizer)
    assert live.config.extract_leaves and live.name == "distilled"
    for made in (fake, live):
        assert isinstance(made, ContextPolicy)
        made.close()


def test_one_policy_object_per_session_closed_after() -> None:
    episode = long_episode(2)
    session = ContextSession(episode.initial, ByteCounter(), DeterministicNotebookBackend())
    runs = PolicyRun(DISTILLED, session)
    first = runs.instance
    assert runs.instance is first
    assert isinstance(first, DistilledPolicy)
    other = PolicyRun(
        DISTILLED, ContextSession(episode.initial, ByteCounter(), DeterministicNotebookBackend())
    )
    assert other.instance is not first  # isolated sessions share nothing
    folder = first.corpus_dir
    assert folder.exists()
    runs.close()
    other.close()
    runs.close()  # a second close is harmless
    assert not folder.exists()
    assert runs.instance is not first  # a new object after closing
    runs.close()


def test_an_unregistered_kind_is_a_configuration_error() -> None:
    session = ContextSession(long_episode(1).initial, ByteCounter(), DeterministicNotebookBackend())
    with pytest.raises(InvalidConfiguration, match="Unknown policy 'gone'"):
        _ = PolicyRun(NAVIGATED.model_copy(update={"kind": "gone"}), session).instance


@pytest.mark.parametrize("cancel_at", [None, 2])
def test_episode_runner_closes_the_policy_object(
    monkeypatch: pytest.MonkeyPatch, cancel_at: int | None
) -> None:
    made: list[DistilledPolicy] = []
    real = policies.create_policy_object

    def spy(policy: Policy, backend: Any) -> ContextPolicy:
        obj = real(policy, backend)
        assert isinstance(obj, DistilledPolicy)
        made.append(obj)
        return obj

    monkeypatch.setattr(policies, "create_policy_object", spy)
    token = CancelToken()

    def on_step(step: Any) -> None:
        if cancel_at is not None and step.step.id == f"step-{cancel_at}":
            token.cancel()

    runner = EpisodeRunner(ByteCounter(), DeterministicNotebookBackend())
    if cancel_at is None:
        report = runner.run(long_episode(3), DISTILLED, WIDE, 1_000_000, on_step, token)
        assert report.passed
    else:
        with pytest.raises(Cancelled):
            runner.run(long_episode(3), DISTILLED, WIDE, 1_000_000, on_step, token)
    assert len(made) == 1
    assert not made[0].corpus_dir.exists()  # closed: the temporary corpus is gone
    with pytest.raises(Exception, match="closed"):
        made[0].distiller(SCOPE)


def test_policy_run_names_the_report_after_the_policy() -> None:
    renamed = Policy(name="nav-b", kind="navigated")
    episode = long_episode(1)
    session = ContextSession(episode.initial, ByteCounter(), DeterministicNotebookBackend())
    session.append_records(episode.steps[0].records)
    with PolicyRun(renamed, session) as runs:
        report = runs.turn(WIDE)
    assert report.policy == "nav-b" and report.failure is None
    assert report.mode is RunMode.NAVIGATED


# -- the deterministic reader -----------------------------------------------------------------


def _prompt(records: Sequence[Record], control: Sequence[Record] = (), tools: str = "") -> Any:
    names = [n for n in tools.split(",") if n]
    spec = json.dumps([{"type": "function", "function": {"name": n}} for n in names])
    task = Record(id="task", role=Role.USER, protected=True, body="Keep the notebook.")
    model_input = ModelInput(
        context=Snapshot(scope=SCOPE, records=(task, *records)),
        phase=Phase.TOOLS,
        control_records=tuple(control),
        tools_json=spec,
        system_text="policy text",
    )
    return ByteCounter().prepare(model_input)


def _request(*keys: str) -> Record:
    shape = json.dumps({"facts": {k: "<current value>" for k in keys}}, separators=(",", ":"))
    return Record(id="ask", role=Role.USER, body=f"Report the notebook as {shape}.")


def test_reader_answers_from_its_visible_answer_and_newer_lines() -> None:
    records = [
        Record(id="old", role=Role.ASSISTANT, body='{"facts":{"a":"1","b":"2"}}'),
        Record(id="new", role=Role.USER, body="FACT b=3\nREMOVE a\nFACT c=4"),
        _request("b", "c"),
    ]
    reply = DeterministicNotebookBackend().generate(_prompt(records, tools="recall"), 1_000)
    assert reply.tool_calls == () and json.loads(reply.text) == {"facts": {"b": "3", "c": "4"}}


def test_reader_recalls_each_missing_key_once_then_answers_with_what_it_knows() -> None:
    backend = DeterministicNotebookBackend()
    asked = [_request("a", "z")]
    first = backend.generate(_prompt(asked, tools="digest,resolve,recall"), 1_000)
    assert [c.name for c in first.tool_calls] == ["recall"]
    assert json.loads(first.tool_calls[0].arguments) == {
        "altitude": "entity",
        "budget": 400,
        "query": "FACT a",
    }
    call = Record(
        id="c1",
        role=Role.ASSISTANT,
        protected=True,
        tool_calls=(ToolCall(id="t1", name="recall", arguments=first.tool_calls[0].arguments),),
    )
    result = Record(
        id="r1",
        role=Role.TOOL,
        protected=True,
        tool_call_id="t1",
        body="recall: 2 items. Older records oldest first:\n--- older group 3 (n3)\nFACT a=new"
        "\n--- older group 1 (n1)\nFACT a=old",
    )
    second = backend.generate(_prompt(asked, (call, result), "digest,resolve,recall"), 1_000)
    assert json.loads(second.tool_calls[0].arguments)["query"] == "FACT z"
    # group order, not listing order, decides: group 3 is newer than group 1
    done = backend.generate(_prompt(asked, (call, result), "digest,resolve"), 1_000)
    assert json.loads(done.text) == {"facts": {"a": "new"}}  # z never seen: not invented


def test_reader_opens_the_newest_unopened_index_line() -> None:
    index = Record(
        id="idx",
        role=Role.USER,
        protected=True,
        body="ARCHIVE INDEX\nr [branch:2] History: all\nturns-1-2 [branch:2] Turns 1-2 #3-#9: x\n"
        "turn-3 [branch:3] Turn 3 #10-#12: y\n",
    )
    reply = DeterministicNotebookBackend().generate(
        _prompt([_request("a")], (index,), "index,look,open,close"), 1_000
    )
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("open", '{"id":"turn-3"}')]


def _exchange(n: int, verb: str, node: str, result: str) -> tuple[Record, Record]:
    call = Record(
        id=f"c{n}",
        role=Role.ASSISTANT,
        protected=True,
        tool_calls=(ToolCall(id=f"t{n}", name=verb, arguments=json.dumps({"id": node})),),
    )
    return call, Record(
        id=f"r{n}", role=Role.TOOL, protected=True, tool_call_id=f"t{n}", body=result
    )


NAV_TOOLS = "index,look,open,close"
LISTING = (
    "ARCHIVE INDEX\nr [branch:1] History: all\n"
    "turn-1 [branch:4] Turn 1 #3-#9: #4 tool result, #6 assistant, #8 tool result\n"
)


def _next(control: Sequence[Record]) -> tuple[str, str]:
    index = Record(id="idx", role=Role.USER, protected=True, body=LISTING)
    reply = DeterministicNotebookBackend().generate(
        _prompt([_request("a", "b")], (index, *control), NAV_TOOLS), 1_000
    )
    assert len(reply.tool_calls) == 1, reply.text
    return reply.tool_calls[0].name, json.loads(reply.tool_calls[0].arguments)["id"]


def test_reader_opens_its_newest_archived_answer_first_then_newer_parts_in_order() -> None:
    """Its own answers are full notebooks: the newest one first, then only what is newer, and
    the parts of one record in reading order."""
    listed = _exchange(
        1,
        "open",
        "turn-1",
        "d-4 [leaf] #4 tool result: FACT a=0\nans-6 [leaf] #6 assistant: #6 assistant\n"
        "d-8 [branch:2] #8 tool result: parts\n",
    )
    assert _next(listed) == ("open", "ans-6")
    answer = _exchange(2, "open", "ans-6", '[context] H › #6 assistant\n{"facts":{"a":"1"}}')
    assert _next((*listed, *answer)) == ("open", "d-8")
    parts = _exchange(
        3,
        "open",
        "d-8",
        "d-8~p2 [leaf] #8 tool result (part 2 of 2): noise\n"
        "d-8~p1 [leaf] #8 tool result (part 1 of 2): FACT b=2\n",
    )
    assert _next((*listed, *answer, *parts)) == ("open", "d-8~p1")


def test_reader_closes_its_oldest_open_leaf_when_the_reading_budget_is_spent() -> None:
    listed = _exchange(
        1,
        "open",
        "turn-1",
        "ans-6 [leaf] #6 assistant: #6 assistant\nd-8 [leaf] #8 tool result: x\n",
    )
    answer = _exchange(2, "open", "ans-6", '[context] H › #6 assistant\n{"facts":{"a":"1"}}')
    refused = _exchange(
        3, "open", "d-8", "Opening 'd-8' costs 300 tokens but only 20 remain; close something."
    )
    control = (*listed, *answer, *refused)
    assert _next(control) == ("close", "ans-6")
    closed = _exchange(4, "close", "ans-6", "Closed ans-6: 280 tokens freed, 300 left.")
    # the refused leaf was never read, so it is tried again; the closed answer stays known
    assert _next((*control, *closed)) == ("open", "d-8")


def test_reader_answers_when_the_budget_is_spent_and_nothing_is_open() -> None:
    refused = _exchange(
        1, "open", "turn-1", "Opening 'turn-1' costs 900 tokens but only 20 remain; close first."
    )
    index = Record(id="idx", role=Role.USER, protected=True, body=LISTING)
    reply = DeterministicNotebookBackend().generate(
        _prompt([_request("a")], (index, *refused), NAV_TOOLS), 1_000
    )
    assert reply.tool_calls == () and json.loads(reply.text) == {"facts": {}}


def test_navigated_reader_keeps_every_answer_under_retention_pressure() -> None:
    """The playground's four-column pressure smoke: 48 noise lines per update push older
    answers into the archive, where the reader finds them (its newest answer first)."""
    from picocontext_diagnostics.episodes.episode import fixture_episode

    episode = fixture_episode(Scenario.RETENTION, noise_lines=48)
    budget = RunBudget(
        context_window=16_384,
        total_tokens=96_000,
        edit_output_tokens=4_096,
        completion_output_tokens=2_048,
    )
    report = EpisodeRunner(ByteCounter(), DeterministicNotebookBackend()).run(
        episode, NAVIGATED, budget, 320_000
    )
    assert report.passed, [(s.step.id, s.failure, s.answer_problem) for s in report.steps]
    for step in report.steps[1:]:
        assert step.run is not None
        assert _fetched(step.run, "open"), step.step.id


def test_history_chunks_are_ordered_and_deduplicated() -> None:
    chunks = history_chunks(
        [
            "[context] A › Turn 2 #5-#8 › #8 tool\nFACT a=8",
            "[context] A › Turn 2 #5-#8 › #6 assistant\nFACT a=6",
            "[context] A › Turn 2 #5-#8 › #8 tool\nFACT a=8 again",
            "listing\nturn-1 [branch:2] Turn 1",
        ]
    )
    assert chunks == [
        "listing\nturn-1 [branch:2] Turn 1",
        "[context] A › Turn 2 #5-#8 › #6 assistant\nFACT a=6",
        "[context] A › Turn 2 #5-#8 › #8 tool\nFACT a=8",
    ]


def test_superseded_requests_are_deleted_only_when_unprotected() -> None:
    backend = DeterministicNotebookBackend()
    snap = long_episode(2).environment()
    ops = backend.targeted_operations(snap)
    assert {"action": "delete", "recordID": "step-1-request"} in ops
    assert all(op["recordID"] != "step-2-request" for op in ops)
    protected = generated_episode(Scenario.STATE_UPDATES, 17, 2, 48).environment()
    assert all(op["action"] == "replace" for op in backend.targeted_operations(protected))


@pytest.mark.parametrize(
    ("policy", "verb"), [(NARROW_NAVIGATED, "open"), (NARROW_DISTILLED, "recall")]
)
def test_tool_policies_fetch_archived_history_and_stay_correct(policy: Policy, verb: str) -> None:
    runner = EpisodeRunner(ByteCounter(), DeterministicNotebookBackend())
    report = runner.run(long_episode(6), policy, WIDE, 2_000_000)
    assert report.passed, [(s.step.id, s.failure, s.answer_problem) for s in report.steps]
    for step in report.steps:
        assert step.run is not None and step.run.mode is policy.mode
        assert _fetched(step.run, verb), step.step.id
        # nothing of the history was changed: the graded context is the full history
        assert step.run.revised == step.run.run_start


def _fetched(run: Any, verb: str) -> bool:
    """Older history reached the reader: its own ``verb`` call, or (navigated) leaves the
    prefetching navigator spliced into the archive index of its first prompt."""
    own = any(t.name == verb and t.ok for t in run.tool_steps)
    return own or (verb == "open" and "[context]" in run.calls[0].rendered)


def test_a_document_navigator_prefetches_an_earlier_request_on_notebook_episodes() -> None:
    """Why the navigated policy's prefetch is not a document navigator: for a model that
    never calls a tool (the 0.5B model live), ``subtree-scan`` searches with the latest
    request, whose words match the earlier requests best, and opens one of those instead of
    a record with facts."""
    policy = Policy(
        name="navigated", config={**NARROW_NAVIGATED.config, "navigator": "subtree-scan"}
    )
    report = EpisodeRunner(ByteCounter(), ShownOnlyReader()).run(
        long_episode(4), policy, WIDE, 2_000_000
    )
    assert not report.passed
    step = report.steps[1]
    assert step.run is not None and not step.run.tool_steps
    index = step.run.calls[0].rendered
    opened = index[index.index("[context]") :]
    assert opened.split("\n")[1] == "--- step-1-request (full) ---"


@pytest.mark.parametrize("steps", [4, 8])
def test_the_archive_navigator_carries_a_reader_that_never_calls_a_tool(steps: int) -> None:
    """The default prefetch opens the reply to the previous asking and what came after it,
    so the same reader answers every step; with the model navigating alone it cannot."""
    episode = long_episode(steps)
    helped = EpisodeRunner(ByteCounter(), ShownOnlyReader()).run(
        episode, NARROW_NAVIGATED, WIDE, 2_000_000
    )
    alone = Policy(name="navigated", config={**NARROW_NAVIGATED.config, "navigator": None})
    unhelped = EpisodeRunner(ByteCounter(), ShownOnlyReader()).run(episode, alone, WIDE, 2_000_000)
    assert helped.passed and helped.answer_correct_steps == steps
    assert unhelped.answer_correct_steps < steps
    prefetched = [s.run.prefetch_steps for s in helped.steps if s.run is not None]
    assert any(prefetched) and all(t.name == "open" for p in prefetched for t in p)
    assert all(not s.run.tool_steps for s in helped.steps if s.run is not None)


def test_a_reader_that_may_not_fetch_fails_once_the_answer_is_archived() -> None:
    """Control: the same narrow tails without the tools' help lose the older facts."""

    report = EpisodeRunner(ByteCounter(), ShownOnlyReader()).run(
        long_episode(4), NARROW_DISTILLED, WIDE, 2_000_000
    )
    assert not report.passed and report.answer_correct_steps < len(report.steps)


# -- the long-history task --------------------------------------------------------------------


def long_history_config() -> EvaluationConfig:
    return load_config(str(fixtures_dir() / "evaluation" / "long-history.json"))


def test_long_history_profile_shape() -> None:
    config = long_history_config()
    assert config.step_count >= 16 and config.noise_lines == 48
    assert config.policies == FOUR_POLICIES and not config.protect_requests
    assert config.limits.context_window == 4_096
    assert (len(config.seeds), config.repetitions) == (2, 2)


def test_long_history_append_only_fails_by_window_and_the_others_fit() -> None:
    base = long_history_config()
    scale = 4  # the deterministic backend counts bytes: the 4,096-token window as bytes ×4
    config = EvaluationConfig.parse(
        json.dumps(
            {
                **base.model_dump(mode="json"),
                "seeds": [17],
                "repetitions": 1,
                "limits": base.limits.scaled(scale).model_dump(mode="json"),
            }
        )
    )
    window = config.limits.context_window
    runner = EvaluationRunner(
        config,
        ByteCounter(),
        DeterministicNotebookBackend(),
        provenance(deterministic_backend()),
    )
    report = runner.run()
    results = {r.policy.name: r for r in report.results}
    assert set(results) == set(FOUR_POLICIES)
    # the history exceeds the window several times over
    assert results["append-only"].environment_prompt_tokens is not None
    assert results["append-only"].environment_prompt_tokens > 3 * window
    append_only = results["append-only"]
    assert not append_only.passed and append_only.failure is not None
    assert "context window" in append_only.failure
    assert len(append_only.steps) < config.step_count
    outputs = max(config.limits.decision_output_tokens, config.limits.completion_output_tokens)
    for name in ("editable", "navigated", "distilled"):
        result = results[name]
        assert result.passed, (name, result.failure)
        assert len(result.steps) == config.step_count
        sizes = [c.token_count for s in result.steps for c in s.calls]
        assert sizes and max(sizes) + outputs <= window, name
    assert all(
        s.episodes.rate == (0.0 if s.policy == "append-only" else 1.0)
        for s in report.summary.policies
    )
    # the JSON report carries every turn's tool steps and reads back
    data = json.loads(report.to_json())
    assert all("tool_steps" in s for r in data["results"] for s in r["steps"])
    assert EvaluationReport.from_json(report.to_json()).summary == report.summary


def test_tool_steps_reach_the_json_report(tmp_path: Path) -> None:
    registry = {**BUILTIN_POLICIES, "distilled": NARROW_DISTILLED}
    config = EvaluationConfig(
        scenario=Scenario.STATE_UPDATES,
        seeds=(5,),
        repetitions=1,
        step_count=3,
        noise_lines=48,
        protect_requests=False,
        policies=("distilled",),
        limits=EvaluationLimits(
            context_window=16_384,
            turn_tokens=100_000,
            episode_tokens=1_000_000,
            decision_output_tokens=1_024,
            completion_output_tokens=1_024,
        ),
    )
    runner = EvaluationRunner(
        config,
        ByteCounter(),
        DeterministicNotebookBackend(),
        provenance(deterministic_backend()),
        registry,
    )
    report = runner.run()
    data = json.loads(report.to_json())
    steps = data["results"][0]["steps"]
    recalls = [t for s in steps for t in s["tool_steps"] if t["name"] == "recall"]
    assert recalls and all(t["ok"] and "older group" in t["result"] for t in recalls)
    assert report.summary.policies[0].tool_calls == len(recalls)


# -- the command line -------------------------------------------------------------------------


def short_long_history(tmp_path: Path, **change: Any) -> Path:
    """The long-history profile with fewer seeds and steps, so the CLI tests stay quick."""
    data = {**long_history_config().model_dump(mode="json"), "seeds": [17], "step_count": 6}
    data.update(change)
    path = tmp_path / "long.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_policies_flag_runs_the_policies_in_rotated_order(tmp_path: Path) -> None:
    output = tmp_path / "four.json"
    code, out, err = run_cli(
        "--config",
        str(short_long_history(tmp_path)),
        "--bytes-per-token",
        "4",
        "--policies",
        "append-only,navigated",
        "--output",
        str(output),
        "--quiet",
    )
    assert code == 3, err  # append-only fails by design: the run finished, a check failed
    data = json.loads(output.read_text(encoding="utf-8"))
    assert data["configuration"]["policies"] == ["append-only", "navigated"]
    assert data["configuration"]["limits"]["context_window"] == 16_384
    order = [(r["seed"], r["repetition"], r["policy"]["name"]) for r in data["results"]]
    assert order[:2] == [(17, 0, "append-only"), (17, 0, "navigated")]
    assert order[2:4] == [(17, 1, "navigated"), (17, 1, "append-only")]
    assert any("multiplied by 4" in n for n in data["provenance"]["model_notes"])
    assert "navigated: episodes 2/2" in out and "append-only: episodes 0/2" in out
    assert "tool calls" in out and "prefill" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policies", "append-only,wandering"], "unknown policy 'wandering'"),
        (["--policies", "editable,,navigated"], "without blanks"),
        (["--policies", ""], "needs a non-empty value"),
        (["--policies", "editable,editable"], "names editable more than once"),
        (["--bytes-per-token", "0"], "integer 1...16"),
        (["--bytes-per-token", "four"], "integer 1...16"),
        (["--bytes-per-token", "17"], "integer 1...16"),
        (["--backend", "mlx", "--bytes-per-token", "4"], "only to --backend deterministic"),
    ],
)
def test_bad_policy_and_scale_flags_exit_2(argv: list[str], message: str) -> None:
    code, _, err = run_cli(*argv)
    assert code == 2 and message in err and len(err.splitlines()) == 1
    assert err.startswith("picocontext-eval: error: ") and "--help" in err


def test_policies_flag_revalidates_the_plan(tmp_path: Path) -> None:
    code, _, err = run_cli(
        "--config",
        str(short_long_history(tmp_path, seeds=[1, 2], step_count=32, max_planned_steps=512)),
        "--policies",
        "append-only,editable,summarize,navigated,distilled",
        "--output",
        str(tmp_path / "x.json"),
    )
    assert code == 2 and "max_planned_steps 512" in err and not (tmp_path / "x.json").exists()
    code, _, err = run_cli("--profile", "long-history", "--bytes-per-token", "16")
    assert code == 2 and "limits" in err and "context_window" in err


def test_token_limits_are_at_token_scale_by_default(tmp_path: Path) -> None:
    # The deterministic backend counts bytes: without --bytes-per-token every limit is x4,
    # so the retention profile's 4,096-token window passes editable; the report says so.
    output = tmp_path / "r.json"
    code, _, err = run_cli(
        "--profile", "retention", "--policies", "append-only,editable", "--output", str(output)
    )
    assert (code, err) == (0, "")
    data = json.loads(output.read_text(encoding="utf-8"))
    assert data["configuration"]["limits"]["context_window"] == 4 * 4_096
    assert any("multiplied by 4" in n for n in data["provenance"]["model_notes"])


def test_parse_policy_list_is_strict() -> None:
    assert parse_policy_list(" editable , distilled ") == ("editable", "distilled")
    with pytest.raises(InvalidConfiguration, match="known policies"):
        parse_policy_list("nope")


@pytest.mark.parametrize(
    ("name", "scenario", "steps"),
    [("retention-four", Scenario.RETENTION, 4), ("state-four", Scenario.STATE_UPDATES, 5)],
)
def test_four_policy_profiles_of_the_short_tasks(name: str, scenario: Scenario, steps: int) -> None:
    config = load_config(str(fixtures_dir() / "evaluation" / f"{name}.json"))
    assert config.policies == FOUR_POLICIES and config.limits == EvaluationLimits()
    assert (config.scenario, config.step_count, config.noise_lines) == (scenario, steps, 12)
    assert (config.seeds, config.repetitions) == ((17, 29), 2)
    assert name in cli.PROFILES
