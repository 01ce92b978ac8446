"""An append is checked against an index of the transcript, not by re-walking both views: the
result must be exactly what validating both whole snapshots says, for any history reached
through the API (appends, edits, forks of older revisions), and its cost must not grow with
the session."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext import (
    AppendTransaction,
    ContextError,
    Delete,
    Edit,
    Record,
    Role,
    Scope,
    Snapshot,
    ToolCall,
    WorkingContext,
    validate_snapshot,
)

SCOPE = Scope(user_id="u", conversation_id="c", branch_id="b")
RECORD_IDS = [f"r{i}" for i in range(8)]
CALL_IDS = ["k0", "k1", "k2", ""]


def _start() -> WorkingContext:
    return WorkingContext.start(
        Snapshot(
            scope=SCOPE,
            records=(
                Record(id="sys", role=Role.SYSTEM, body="rules"),
                Record(id="task", role=Role.USER, protected=True, body="the task"),
            ),
        )
    )


@st.composite
def records(draw: st.DrawFn) -> Record:
    role = draw(st.sampled_from(list(Role)))
    calls: tuple[ToolCall, ...] = ()
    if draw(st.booleans()) and role in (Role.ASSISTANT, Role.USER):
        names = st.sampled_from(["look", ""])
        calls = tuple(
            ToolCall(id=i, name=draw(names))
            for i in draw(st.lists(st.sampled_from(CALL_IDS), min_size=1, max_size=3))
        )
    fields: dict[str, Any] = {
        "id": draw(st.sampled_from([*RECORD_IDS, "", "task"])),
        "role": role,
        "body": draw(st.sampled_from(["", "note", "x" * 10])),
        "protected": draw(st.booleans()),
        "tool_calls": calls,
        "tool_call_id": draw(st.sampled_from([None, *CALL_IDS])),
    }
    # model_construct also reaches the rule that system records must be protected.
    return Record.model_construct(**fields) if draw(st.booleans()) else Record(**fields)


def _expected(context: WorkingContext, new: tuple[Record, ...]) -> str:
    """What the full validation of both views says: "ok" or the first error."""
    revision = context.revision + 1
    try:
        for base in (context.original, context.snapshot):
            validate_snapshot(
                Snapshot.model_construct(scope=SCOPE, revision=revision, records=base.records + new)
            )
    except ContextError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def _incremental(context: WorkingContext, new: tuple[Record, ...]) -> tuple[str, WorkingContext]:
    try:
        after = context.append(
            AppendTransaction(scope=SCOPE, base_revision=context.revision, records=new)
        )
    except ContextError as exc:
        return f"{type(exc).__name__}: {exc}", context
    return "ok", after


@st.composite
def plausible(draw: st.DrawFn) -> list[Record]:
    """Mostly valid appends (a note, or a tool call with its results), so histories grow
    long and fork; ids come from small pools, so some collide with earlier records."""
    ids = st.sampled_from([f"p{i}" for i in range(40)])
    if draw(st.booleans()):
        role = draw(st.sampled_from([Role.USER, Role.ASSISTANT]))
        return [Record(id=draw(ids), role=role, body="note")]
    calls = draw(st.lists(st.sampled_from([f"q{i}" for i in range(10)]), min_size=1, max_size=3))
    group = [
        Record(
            id=draw(ids),
            role=Role.ASSISTANT,
            tool_calls=tuple(ToolCall(id=c, name="look") for c in calls),
        )
    ]
    answered = calls if draw(st.integers(0, 4)) else calls[:-1]
    group += [Record(id=draw(ids), role=Role.TOOL, tool_call_id=c, body="r") for c in answered]
    return group


steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 50), plausible()),
        st.tuples(st.just("append"), st.integers(0, 50), plausible()),
        st.tuples(
            st.just("append"), st.integers(0, 50), st.lists(records(), min_size=1, max_size=4)
        ),
        st.tuples(
            st.just("delete"),
            st.integers(0, 50),
            st.sampled_from([*RECORD_IDS, *(f"p{i}" for i in range(40))]),
        ),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(steps)
def test_the_incremental_check_agrees_with_full_validation(
    plan: list[tuple[str, int, object]],
) -> None:
    history = [_start()]  # every committed state; appends may fork from any of them
    for kind, pick, arg in plan:
        context = history[pick % len(history)]
        if kind == "append":
            assert isinstance(arg, list)
            new = tuple(arg)
            expected = _expected(context, new)
            outcome, after = _incremental(context, new)
            assert outcome == expected, (outcome, expected)
            if outcome == "ok":
                validate_snapshot(after.original)
                validate_snapshot(after.snapshot)
                history.append(after)
        else:
            assert isinstance(arg, str)
            edit = Edit(
                scope=SCOPE, base_revision=context.revision, operations=(Delete(record_id=arg),)
            )
            with contextlib.suppress(ContextError):
                history.append(context.apply(edit))


def test_a_fork_does_not_see_ids_appended_on_another_branch() -> None:
    base = _start()

    def add(context: WorkingContext, record_id: str) -> WorkingContext:
        record = Record(id=record_id, role=Role.USER, body="b")
        transaction = AppendTransaction(
            scope=SCOPE, base_revision=context.revision, records=(record,)
        )
        return context.append(transaction)

    left = add(base, "left")
    right = add(base, "left")  # the same id on a fork of the older revision is fine
    assert [r.id for r in right.original.records] == ["sys", "task", "left"]
    assert add(add(left, "x"), "y").original.records[-1].id == "y"
    assert add(right, "x").original.records[-1].id == "x"


def _long_context(n: int) -> WorkingContext:
    records = [
        Record(id="sys", role=Role.SYSTEM, body="rules"),
        Record(id="task", role=Role.USER, protected=True, body="the task"),
    ]
    records += [Record(id=f"r{i}", role=Role.ASSISTANT, body="note") for i in range(n)]
    return WorkingContext.start(Snapshot(scope=SCOPE, records=tuple(records)))


def _append_seconds(context: WorkingContext, appends: int) -> float:
    started = time.perf_counter()
    for i in range(appends):
        record = Record(id=f"a{i}", role=Role.USER, body="b")
        context = context.append(
            AppendTransaction(scope=SCOPE, base_revision=context.revision, records=(record,))
        )
    return time.perf_counter() - started


def test_append_cost_does_not_grow_with_the_session() -> None:
    """200 appends to a 20,000-record session against 200 to a 100-record one: the first
    builds the index once (as the first append after a load does); the tuple copy is all
    that grows after that."""
    small, large = _long_context(100), _long_context(20_000)
    small_s = min(_append_seconds(small, 200) for _ in range(3))
    large_s = min(_append_seconds(large, 200) for _ in range(3))
    assert large_s < 10 * small_s + 0.05, (small_s, large_s)
