"""Properties of sliding-window and retrieval views over random histories with tool groups:
the view is a valid snapshot in original order, tool groups are whole, protected records and
the question are always shown, and a sent prompt fits the window (else the turn is a budget
failure with nothing sent)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext import (
    ContextSession,
    Record,
    Role,
    RunBudget,
    Scope,
    Snapshot,
    ToolCall,
    validate_snapshot,
)
from picocontext.models import ByteCounter
from picocontext.policies import RetrievalPolicy, SlidingWindowPolicy
from picocontext.policies.history import history_units
from picocontext_diagnostics.conversations.extractive_backend import (
    DeterministicConversationBackend,
)

SCOPE = Scope(user_id="u", conversation_id="c", branch_id="b")
WORDS = st.sampled_from(["locker", "code", "train", "rain", "cat", "4471", "moved", "Braga"])


@st.composite
def histories(draw: st.DrawFn) -> Snapshot:
    records = [Record(id="task", role=Role.USER, body="Chat.", protected=True)]
    for i in range(draw(st.integers(0, 25))):
        body = " ".join(draw(st.lists(WORDS, min_size=1, max_size=30)))
        kind = draw(st.sampled_from(["user", "assistant", "tools", "protected"]))
        if kind == "tools":
            calls = draw(st.integers(1, 3))
            records.append(
                Record(
                    id=f"a{i}",
                    role=Role.ASSISTANT,
                    tool_calls=tuple(ToolCall(id=f"c{i}-{k}", name="f") for k in range(calls)),
                )
            )
            records += [
                Record(id=f"r{i}-{k}", role=Role.TOOL, body=body, tool_call_id=f"c{i}-{k}")
                for k in range(calls)
            ]
        else:
            role = Role.ASSISTANT if kind == "assistant" else Role.USER
            records.append(Record(id=f"m{i}", role=role, body=body, protected=kind == "protected"))
    records.append(Record(id="q", role=Role.USER, body="What is the locker code?", protected=True))
    return Snapshot(scope=SCOPE, records=tuple(records))


@settings(max_examples=60, deadline=None)
@given(histories(), st.integers(200, 3_000), st.booleans())
def test_views_are_valid_whole_and_fit(snapshot: Snapshot, window: int, retrieve: bool) -> None:
    budget = RunBudget(context_window=window, completion_output_tokens=64, edit_output_tokens=64)
    retrieval = RetrievalPolicy()
    policy = retrieval if retrieve else SlidingWindowPolicy()
    session = ContextSession(snapshot, ByteCounter(), DeterministicConversationBackend())
    report = policy.turn(session, budget)
    assert session.context == snapshot
    if report.failure is not None and "context window" in report.failure:
        assert report.calls == () and report.final_prompt is None
        return
    # Sent (an answer longer than the 64-byte allowance is a reported failure, after sending).
    assert report.failure is None or "output limit" in report.failure
    assert report.final_prompt is not None
    assert report.final_prompt.token_count <= window - 64
    view = report.final_prompt.input.context
    validate_snapshot(view)
    # Retrieval's packed turns are one runtime record (the block), standing where they were.
    last = retrieval.last if retrieve else None
    block = last.block.id if last is not None and last.block is not None else None
    ids = [i for i in view.ids if i != block]
    order = [snapshot.ids.index(i) for i in ids]
    assert order == sorted(order)
    packed = set(last.retrieved_ids) if last is not None and block is not None else set()
    shown = set(ids) | packed
    if block is not None:
        # where the archive ends: every record after it, and every unprotected record, is newer
        newest = max(snapshot.ids.index(i) for i in packed)
        after = view.ids[view.ids.index(block) + 1 :]
        unprotected = [r.id for r in view.records if not r.protected]
        assert all(snapshot.ids.index(i) > newest for i in [*after, *unprotected])
    for unit in history_units(snapshot.records):
        assert len({r.id in shown for r in unit}) == 1
