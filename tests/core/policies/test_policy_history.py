"""The one history view: the split both modes share, the text meter and the executor base."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext import ModelInput, Phase, Record, Role, Scope, Snapshot, ToolCall
from picocontext.models import ByteCounter
from picocontext.policies.history import (
    METER_CACHE,
    TextMeter,
    ToolExecutor,
    history_units,
    split_history,
)
from picocontext.receipts import sample_receipt
from picocontext.session import ToolResult, object_text
from picocontext.working import validate_snapshot

SCOPE = Scope(user_id="u", conversation_id="history", branch_id="b")


def measure(view: Snapshot) -> int:
    return ByteCounter().prepare(ModelInput(context=view, phase=Phase.COMPLETION)).token_count


@st.composite
def histories(draw: st.DrawFn) -> Snapshot:
    records = [Record(id="task", role=Role.USER, protected=True, body="the task")]
    for n in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["user", "assistant", "calls"]))
        protected = draw(st.booleans())
        body = "x" * draw(st.integers(0, 300))
        if kind == "calls":
            links = [f"l{n}-{k}" for k in range(draw(st.integers(1, 3)))]
            calls = tuple(ToolCall(id=link, name="t") for link in links)
            records.append(
                Record(id=f"c{n}", role=Role.ASSISTANT, protected=protected, tool_calls=calls)
            )
            records += [
                Record(id=f"r{n}-{k}", role=Role.TOOL, tool_call_id=link, body=body)
                for k, link in enumerate(links)
            ]
        else:
            role = Role.USER if kind == "user" else Role.ASSISTANT
            records.append(Record(id=f"m{n}", role=role, protected=protected, body=body))
    snapshot = Snapshot(scope=SCOPE, records=tuple(records))
    validate_snapshot(snapshot)
    return snapshot


@settings(max_examples=120, deadline=None)
@given(histories(), st.integers(0, 2500), st.booleans())
def test_both_modes_keep_units_whole_the_request_shown_and_the_archive_older(
    snapshot: Snapshot, share: int, charge_request: bool
) -> None:
    split = split_history(snapshot, measure, share, charge_request=charge_request)
    validate_snapshot(split.view)
    ids = list(snapshot.ids)
    shown = list(split.view.ids)
    assert sorted([*shown, *split.archived_ids], key=ids.index) == ids  # a partition, in order
    for unit in history_units(snapshot.records):
        inside = [r.id in shown for r in unit]
        assert all(inside) or not any(inside)
        assert not any(r.protected for r in unit) or all(inside)
    requests = [r for r in snapshot.records if r.role is Role.USER and not r.protected]
    if requests:  # the latest request and everything after it are always shown
        start = ids.index(requests[-1].id)
        assert set(ids[start:]) <= set(shown)
        assert split.pinned_ids == tuple(
            r.id for r in snapshot.records[start:] if r.id in split.pinned_ids
        )
    unprotected = [
        ids.index(r.id)
        for unit in history_units(split.view.records)
        if not any(r.protected for r in unit)
        for r in unit
    ]
    if split.archive and unprotected:
        assert max(ids.index(i) for i in split.archived_ids) < min(unprotected)
    assert split.tail_tokens >= 0 and (charge_request or split.tail_tokens <= share)


def test_the_request_is_free_unless_charged() -> None:
    records = [
        Record(id="task", role=Role.USER, protected=True, body="task"),
        Record(id="old", role=Role.ASSISTANT, body="o" * 200),
        Record(id="ask", role=Role.USER, body="q" * 300),
    ]
    snapshot = Snapshot(scope=SCOPE, records=tuple(records))
    free = split_history(snapshot, measure, 300)
    assert list(free.view.ids) == ["task", "old", "ask"] and free.pinned_ids == ("ask",)
    assert free.tail_ids == ("old",) and 200 < free.tail_tokens <= 300
    charged = split_history(snapshot, measure, 300, charge_request=True)
    assert list(charged.view.ids) == ["task", "ask"] and charged.archived_ids == ("old",)
    assert charged.tail_ids == () and charged.tail_tokens == 0


def test_one_meter_one_rounding_rule_one_cache() -> None:
    rendered = TextMeter(ByteCounter())
    assert rendered.name == "rendered:ByteCounter"
    assert rendered.count("") == 0 and rendered.count("héllo") == len("héllo".encode())

    class Zero(ByteCounter):
        model_id = "zero"

        def count_tokens(self, text: str) -> int:
            return 0

    tokenizer = TextMeter.tokenizer(Zero())
    assert tokenizer.name == "tokenizer:zero"
    assert tokenizer.count("merged away") == 1  # non-empty text is never free
    for n in range(METER_CACHE + 1):
        rendered.count(str(n))
    assert len(rendered._cache) <= METER_CACHE


class _Fixed(ToolExecutor):
    def __call__(self, name: str, arguments: str) -> ToolResult:
        text = "r" * 40
        if not self.fits(arguments, self.meter.count(text)):
            return self.refuse(arguments, "a long explanation " * 4, "no room")
        return self.grant(arguments, text)


def test_the_executor_keeps_a_short_refusal_for_every_later_call() -> None:
    meter = TextMeter(ByteCounter())
    task = Record(id="task", role=Role.USER, protected=True, body="task")
    base = measure(Snapshot(scope=SCOPE, records=(task,)))
    per_call = measure(Snapshot(scope=SCOPE, records=(task, *sample_receipt("t")))) - base
    # a refusal is charged its receipt, its echoed arguments and its text
    refusal = per_call + meter.count("{}") + meter.count("no room")
    limit = per_call + meter.count("{}") + 40 + 3 * refusal  # room for one result
    executor = _Fixed(meter, limit=limit, per_call=per_call, max_calls=4, refusal=refusal)
    results = [executor("t", "{}") for _ in range(4)]
    assert [r.ok for r in results] == [True, False, False, False]
    assert [r.text for r in results[1:]] == ["no room"] * 3  # the long one would not fit
    assert executor.used == executor.limit and executor.calls == 4 and executor.refused == 3
    assert object_text("[1]") == "{}" and executor.call_cost("[1]") == executor.call_cost("{}")


def test_a_sample_receipt_is_what_the_loop_writes() -> None:
    call, result = sample_receipt("open", step=15, index=30)
    assert call.id == "runtime-call-15" and call.protected and result.protected
    (link,) = call.tool_calls
    assert link.id == "runtime-tool-15-30" and link.name == "open" and link.arguments == "{}"
    assert result.tool_call_id == link.id and result.id == f"runtime-result-{link.id}"
