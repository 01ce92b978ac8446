"""Tool-using policies offer their existing ids as enums, so the schema the model reads is the
one structured decoding enforces; the prompts carrying them are the ones budgets measure."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext import (
    ContextSession,
    ModelResponse,
    ModelToolCall,
    Phase,
    PreparedPrompt,
    Record,
    Role,
    RunBudget,
    Scope,
    Snapshot,
    ToolSpec,
)
from picocontext.backend import MAX_ENUM_CHARS, restrict_ids, tools_json
from picocontext.models import ByteCounter, ScriptedBackend
from picocontext.policies import NavigatedPolicy
from picocontext.policies.distilled import DistilledPolicy
from picocontext.policies.navigated_tools import LOOK_TOOL, OPEN_TOOL

SCOPE = Scope(user_id="u", conversation_id="ids", branch_id="b")
WINDOW = 12_000
BUDGET = RunBudget(
    context_window=WINDOW,
    total_tokens=200_000,
    edit_output_tokens=256,
    completion_output_tokens=256,
)


def ledger(turns: int) -> Snapshot:
    """A history whose older turns the navigated policy archives (long sheet bodies)."""
    records = [Record(id="task", role=Role.USER, protected=True, body="Audit the ledger.")]
    for t in range(1, turns + 1):
        rows = "\n".join(f"row {t}.{i:02d}: reconciled, memo {t * 97 + i:04x}" for i in range(40))
        records += [
            Record(id=f"ask-{t}", role=Role.USER, body=f"Fetch sheet {t}."),
            Record(id=f"sheet-{t}", role=Role.ASSISTANT, body=f"Sheet {t}.\n{rows}"),
        ]
    records.append(Record(id="question", role=Role.USER, body="What did sheet 1 say?"))
    return Snapshot(scope=SCOPE, records=tuple(records))


def scripted(calls: list[tuple[str, dict[str, Any]]]) -> ScriptedBackend:
    queue = list(calls)

    def respond(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        if prompt.input.phase is Phase.TOOLS and queue:
            name, arguments = queue.pop(0)
            call = ModelToolCall(name=name, arguments=json.dumps(arguments))
            return ModelResponse(tool_calls=(call,), generated_tokens=8)
        return ModelResponse(text="done", generated_tokens=4)

    return ScriptedBackend(respond)


def run(turns: int, calls: list[tuple[str, dict[str, Any]]]) -> tuple[Any, Any, ScriptedBackend]:
    backend = scripted(calls)
    session = ContextSession(ledger(turns), ByteCounter(), backend)
    policy = NavigatedPolicy()
    report = policy.turn(session, BUDGET)
    return report, policy.turns(SCOPE)[-1], backend


ID = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-:/", min_size=1, max_size=12)


@settings(deadline=None)
@given(st.lists(ID, min_size=1, max_size=8, unique=True))
def test_restrict_ids_puts_one_enum_on_strings_and_array_items(ids: list[str]) -> None:
    opened = restrict_ids(OPEN_TOOL, ids, "id")
    looked = restrict_ids(LOOK_TOOL, ids, "ids")
    assert opened.parameters["properties"]["id"]["enum"] == ids
    assert looked.parameters["properties"]["ids"]["items"]["enum"] == ids
    # the original specs are untouched (they are shared constants)
    assert "enum" not in OPEN_TOOL.parameters["properties"]["id"]
    assert "enum" not in LOOK_TOOL.parameters["properties"]["ids"]["items"]


def test_restrict_ids_leaves_empty_and_long_lists_free() -> None:
    assert restrict_ids(OPEN_TOOL, [], "id") is OPEN_TOOL
    many = [f"node-{i:04d}" for i in range(MAX_ENUM_CHARS // 8)]
    assert restrict_ids(OPEN_TOOL, many, "id") is OPEN_TOOL
    assert restrict_ids(OPEN_TOOL, ["a", "a", "b"], "id").parameters["properties"]["id"][
        "enum"
    ] == ["a", "b"]


def _open_enum(tools: list[dict[str, Any]] | None) -> list[str] | None:
    (spec,) = [t for t in tools or [] if t["function"]["name"] == "open"]
    enum: list[str] | None = spec["function"]["parameters"]["properties"]["id"].get("enum")
    return enum


def test_navigated_offers_the_manifest_ids_it_can_open_and_budgets_with_them() -> None:
    report, info, backend = run(4, [("index", {}), ("open", {"id": "turn-1"})])
    assert report.failure is None and info is not None and info.manifest is not None
    expected = [i for i in info.manifest.nodes if i != info.manifest.root.id]
    tool_prompts = [p for p in backend.prompts if p.input.tools_json is not None]
    assert tool_prompts and all(_open_enum(p.input.tools) == expected for p in tool_prompts)
    assert info.manifest.root.id not in expected
    # the enum is part of every rendered prompt, and every prompt still fits the window
    assert all(json.dumps(expected[0]) in p.rendered for p in tool_prompts)
    assert all(p.token_count <= WINDOW - 256 for p in backend.prompts)


def test_navigated_keeps_long_id_lists_free() -> None:
    report, info, backend = run(30, [("index", {})])
    assert report.failure is None and info is not None and info.manifest is not None
    ids = [i for i in info.manifest.nodes if i != info.manifest.root.id]
    assert sum(len(i) + 4 for i in ids) > MAX_ENUM_CHARS
    assert _open_enum(backend.prompts[0].input.tools) is None


def test_distilled_tool_specs_limit_digest_node_ids() -> None:
    policy = DistilledPolicy.__new__(DistilledPolicy)  # tool_specs reads no state
    free = policy.tool_specs()
    limited = policy.tool_specs(["root", "span-1"])
    assert [t.name for t in free] == [t.name for t in limited] == ["digest", "resolve", "recall"]
    assert "enum" not in free[0].parameters["properties"]["nodeId"]
    assert limited[0].parameters["properties"]["nodeId"]["enum"] == ["root", "span-1"]
    assert limited[1:] == free[1:]


def test_offered_tools_render_exactly_as_measured() -> None:
    spec = restrict_ids(OPEN_TOOL, ["turn-1", "sheet-2"], "id")
    assert isinstance(spec, ToolSpec)
    text = tools_json((spec,))
    assert json.loads(text)[0]["function"]["parameters"]["properties"]["id"]["enum"] == [
        "turn-1",
        "sheet-2",
    ]
    # a byte counter charges the enum like any other prompt text
    assert len(text) > len(tools_json((OPEN_TOOL,)))
