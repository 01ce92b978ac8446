"""Property tests of the distilled policy's pure parts: leaf chunking and the history split."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from kettle import kettle_snapshot
from picocontext import (
    ContextSession,
    ModelInput,
    Phase,
    Record,
    Role,
    RunBudget,
    Scope,
    Snapshot,
    ToolCall,
    validate_snapshot,
)
from picocontext.distill.testing import FakeSummarizer
from picocontext.models import ByteCounter, ScriptedBackend
from picocontext.policies import DistilledPolicy
from picocontext.policies.distilled import DistilledConfig
from picocontext.policies.distilled_history import chunk_text
from picocontext.policies.history import history_units, split_history
from picocontext.session import ToolLoop, ToolResult

SCOPE = Scope(user_id="u", conversation_id="c", branch_id="b")
WORD = st.text(alphabet="abcdefghij", min_size=1, max_size=6)
SPACE = st.sampled_from([" ", "  ", "\t"])
LINE = st.lists(WORD, min_size=0, max_size=9).map(" ".join)


@st.composite
def texts(draw: st.DrawFn) -> str:
    lines = draw(st.lists(LINE, min_size=1, max_size=30))
    out = draw(st.sampled_from(["", " ", "\n"]))
    for line in lines:
        out += line + draw(SPACE) * draw(st.integers(0, 1))
        out += draw(st.sampled_from(["\n", "\r\n", "\n\n"]))
    return out


@given(texts(), st.integers(min_value=1, max_value=12))
def test_chunks_rebuild_the_text_and_respect_the_word_limit(text: str, limit: int) -> None:
    chunks = chunk_text(text, limit)
    assert "".join(chunks) == text
    assert all(len(c.split()) <= limit for c in chunks)
    if text.split():
        assert all(c.split() for c in chunks)  # no blank leaves (a blank unit deletes a leaf)


@given(texts(), st.integers(min_value=9, max_value=20))
def test_chunks_cut_only_at_line_ends_when_lines_fit(text: str, limit: int) -> None:
    chunks = chunk_text(text, limit)
    for chunk, following in itertools.pairwise(chunks):
        assert chunk.endswith(("\n", "\r"))
        # greedy: the next line would not have fitted into this chunk
        next_line = following.splitlines(keepends=True)[0]
        first_words = len(next_line.split())
        assert first_words == 0 or len(chunk.split()) + first_words > limit


# -- the split -------------------------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> Snapshot:
    records: list[Record] = [
        Record(id="sys", role=Role.SYSTEM, body="rules"),
        Record(id="task", role=Role.USER, protected=True, body="the task"),
    ]
    for n in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["user", "assistant", "tools"]))
        protected = draw(st.booleans())
        body = "x" * draw(st.integers(0, 400))
        if kind == "user":
            records.append(Record(id=f"u{n}", role=Role.USER, protected=protected, body=body))
        elif kind == "assistant":
            records.append(Record(id=f"a{n}", role=Role.ASSISTANT, protected=protected, body=body))
        else:
            count = draw(st.integers(1, 3))
            links = [f"l{n}-{k}" for k in range(count)]
            records.append(
                Record(
                    id=f"c{n}",
                    role=Role.ASSISTANT,
                    protected=protected and draw(st.booleans()),
                    tool_calls=tuple(ToolCall(id=link, name="t") for link in links),
                )
            )
            for k, link in enumerate(links):
                records.append(
                    Record(
                        id=f"r{n}-{k}",
                        role=Role.TOOL,
                        protected=protected and draw(st.booleans()),
                        tool_call_id=link,
                        body=body,
                    )
                )
    snapshot = Snapshot(scope=SCOPE, records=tuple(records))
    validate_snapshot(snapshot)
    return snapshot


def _protected(group: tuple[Record, ...]) -> bool:
    return any(r.protected for r in group)


def measure(view: Snapshot) -> int:
    return ByteCounter().prepare(ModelInput(context=view, phase=Phase.COMPLETION)).token_count


@settings(max_examples=150, deadline=None)
@given(histories(), st.integers(min_value=0, max_value=3000))
def test_split_keeps_groups_whole_protected_visible_and_the_tail_within_budget(
    snapshot: Snapshot, tail_budget: int
) -> None:
    split = split_history(snapshot, measure, tail_budget, charge_request=True)
    validate_snapshot(split.view)
    ids = snapshot.ids
    visible = split.view.ids
    older = list(split.archived_ids)
    # a partition of the history, in order
    assert sorted(visible + older, key=ids.index) == ids
    assert visible == sorted(visible, key=ids.index) and not set(visible) & set(older)
    # groups are never split and protected records are always shown
    for group in history_units(snapshot.records):
        shown = [r.id in visible for r in group]
        assert all(shown) or not any(shown)
        if any(r.protected for r in group):
            assert all(shown)
    # the distilled part is strictly older than every visible unprotected record
    unprotected_visible = [
        ids.index(r.id)
        for g in history_units(split.view.records)
        if not any(r.protected for r in g)
        for r in g
    ]
    if older and unprotected_visible:
        assert max(ids.index(i) for i in older) < min(unprotected_visible)
    # the tail fits its budget, unless it starts at the newest unprotected user request
    protected_only = Snapshot(
        scope=SCOPE,
        records=tuple(r for g in history_units(snapshot.records) if _protected(g) for r in g),
    )
    cost = measure(split.view) - measure(protected_only)
    requests = [r.id for r in snapshot.records if r.role is Role.USER and not r.protected]
    first_tail = [snapshot.records[i].id for i in sorted(unprotected_visible)][:1]
    assert cost <= tail_budget or (requests and first_tail == [requests[-1]])
    # and it is the longest tail that fits: one more older group would not
    if older and cost <= tail_budget:
        last = split.archive[-1]
        wider = Snapshot(
            scope=SCOPE,
            records=tuple(
                r for r in snapshot.records if r.id in visible or r.id in {x.id for x in last}
            ),
        )
        assert measure(wider) - measure(protected_only) > tail_budget


# -- tool arguments ----------------------------------------------------------------------------

_LOOPS: list[ToolLoop] = []
_POLICIES: list[DistilledPolicy] = []  # kept alive: its corpus lives as long as the policy


def _loop() -> ToolLoop:
    """One distilled turn's tool loop over the kettle history (built once per process)."""
    if not _LOOPS:
        # the policy owns a temporary corpus, removed when the process ends
        policy = DistilledPolicy(FakeSummarizer(), config=DistilledConfig(tail_share=0.05))
        _POLICIES.append(policy)
        session = ContextSession(kettle_snapshot(), ByteCounter(), ScriptedBackend([]))
        budget = RunBudget(context_window=200_000, total_tokens=1_000_000)
        _LOOPS.append(policy._build(session.state, session.counter, budget, None))
    return _LOOPS[0]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5000) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
ARGUMENTS = st.one_of(
    st.text(max_size=60),
    JSON_VALUES.map(json.dumps),
    st.fixed_dictionaries(
        {},
        optional={
            "nodeId": st.sampled_from(["digest:2:tenant", "digest:0:history:old-call/1", "x"]),
            "hash": st.text(alphabet="0123456789abcdef", max_size=20),
            "query": st.text(max_size=20),
            "budget": st.integers(-3, 3000),
            "altitude": st.sampled_from(["auto", "entity", "scope", "tenant", "up", 2]),
            "scope": st.sampled_from(["", "digest:2:tenant", "nope"]),
        },
    ).map(json.dumps),
)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["digest", "resolve", "recall"]), ARGUMENTS)
def test_any_arguments_give_a_tool_result_never_an_exception(name: str, arguments: str) -> None:
    result = _loop().execute(name, arguments)
    assert isinstance(result, ToolResult) and result.text.strip()
    assert "unavailable" not in result.text and "failed:" not in result.text
    try:
        payload = json.loads(arguments)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        assert not result.ok  # only a JSON object can be a valid call
