"""Properties over arbitrary operation sequences, and two threads hammering one session."""

from __future__ import annotations

import threading
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kettle import SCOPE, answer_from, kettle_snapshot
from picocontext import (
    AppendTransaction,
    Busy,
    ContextError,
    ContextSession,
    Delete,
    Edit,
    ModelResponse,
    Phase,
    PreparedPrompt,
    Record,
    Replace,
    Role,
    RunBudget,
    RunMode,
    SQLiteStore,
    StaleRevision,
    ToolCall,
    WorkingContext,
    decode_edit_payload,
    validate_snapshot,
)
from picocontext.models import ByteCounter, ScriptedBackend

ids = st.sampled_from(
    ["task", "instructions", "old-call", "old-result", "new-call", "new-result", "warranty-result"]
    + [f"n{i}" for i in range(6)]
    + [f"c{i}" for i in range(6)]
)
hostile_text = st.text(
    alphabet=st.characters(codec="utf-8") | st.sampled_from(["\x00", "\ud800", "é", "🫖"]),
    max_size=30,
)

append_step = st.builds(
    lambda rid, body, role, with_call: ("append", rid, body, role, with_call),
    ids,
    hostile_text,
    st.sampled_from([Role.USER, Role.ASSISTANT, Role.TOOL, Role.SYSTEM]),
    st.booleans(),
)
editable_ids = st.sampled_from(["new-result", "warranty-result", "n0", "n1", "n2", "n3"])
group_deletes = st.sampled_from(
    [("old-call", "old-result"), ("n0", "n0-r"), ("n1", "n1-r"), ("n2", "n2-r")]
)
edit_step = st.builds(
    lambda ops, groups, stale: ("edit", ops + [Delete(record_id=g) for g in groups], stale),
    st.lists(
        st.one_of(
            st.builds(Replace, record_id=editable_ids, body=hostile_text),
            st.builds(Replace, record_id=ids, body=hostile_text),
            st.builds(Delete, record_id=ids),
        ),
        min_size=0,
        max_size=3,
    ),
    st.one_of(st.just(()), group_deletes),
    st.sampled_from([False, False, False, True]),
)
payload_step = st.builds(lambda text: ("payload", text), st.text(max_size=80))


def _append(ctx: WorkingContext, rid: str, body: str, role: Role, call: bool) -> WorkingContext:
    if call:
        records: tuple[Record, ...] = (
            Record(id=rid, role=Role.ASSISTANT, tool_calls=(ToolCall(id=f"{rid}-c", name="t"),)),
            Record(id=f"{rid}-r", role=Role.TOOL, tool_call_id=f"{rid}-c", body=body),
        )
    else:
        records = (Record(id=rid, role=role, body=body),)
    return ctx.append(AppendTransaction(scope=SCOPE, base_revision=ctx.revision, records=records))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(append_step, edit_step, payload_step), max_size=12))
def test_transcript_grows_snapshots_validate_rejections_change_nothing(
    steps: list[tuple[object, ...]],
) -> None:
    ctx = WorkingContext.start(kettle_snapshot())
    for step in steps:
        before = ctx
        try:
            if step[0] == "append":
                _, rid, body, role, call = step
                ctx = _append(ctx, rid, body, role, call)  # type: ignore[arg-type]
            elif step[0] == "edit":
                _, ops, stale = step
                base = ctx.revision + (1 if stale else 0)
                ctx = ctx.apply(Edit(scope=SCOPE, base_revision=base, operations=tuple(ops)))  # type: ignore[arg-type]
            else:
                ctx = ctx.apply(decode_edit_payload(step[1], SCOPE))  # type: ignore[arg-type]
        except ContextError:
            # (c) a rejected operation leaves both views byte-identical
            assert ctx is before
            assert ctx.snapshot.model_dump_json() == before.snapshot.model_dump_json()
            continue
        # (a) the transcript only grows and never changes earlier records
        n = len(before.original.records)
        assert ctx.original.records[:n] == before.original.records
        # (b) every committed snapshot validates, and the revision advanced by one
        validate_snapshot(ctx.snapshot)
        validate_snapshot(ctx.original)
        assert ctx.revision == before.revision + 1


def test_two_threads_hammering_one_session(tmp_path: Path) -> None:
    def respond(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        if prompt.input.phase is Phase.COMPLETION:
            return answer_from(prompt, 4)
        return ModelResponse(text="no tool", generated_tokens=1)

    with SQLiteStore(tmp_path / "h.db") as store:
        s = ContextSession(kettle_snapshot(), ByteCounter(), ScriptedBackend(respond), store)
        committed: list[int] = []
        unexpected: list[BaseException] = []
        lock = threading.Lock()

        def worker(name: str) -> None:
            for i in range(150):
                try:
                    base = s.context.revision
                    if i % 3 == 0:
                        rec = Record(id=f"{name}-{i}", role=Role.USER, body=f"{name} {i}")
                        snap = s.append(
                            AppendTransaction(scope=SCOPE, base_revision=base, records=(rec,))
                        )
                    elif i % 3 == 1:
                        snap = s.apply(
                            Edit(
                                scope=SCOPE,
                                base_revision=base,
                                operations=(Replace(record_id="new-result", body=f"{name} {i}"),),
                            )
                        )
                    else:
                        report = s.run(
                            RunMode.APPEND_ONLY,
                            RunBudget(context_window=1_000_000, total_tokens=10_000_000),
                        )
                        assert report.failure is None, report.failure
                        continue
                    with lock:
                        committed.append(snap.revision)
                except (Busy, StaleRevision):
                    pass
                except BaseException as exc:
                    unexpected.append(exc)

        threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert unexpected == []
        assert len(committed) > 30  # both threads really committed
        # no lost update: every commit got its own revision, and the session ends at the last one
        assert sorted(committed) == list(range(1, len(committed) + 1))
        assert s.context.revision == len(committed)
        assert store.load(SCOPE) == s.state
        assert store.revision_numbers(SCOPE) == list(range(len(committed) + 1))
