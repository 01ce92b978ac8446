"""Bring-your-own decision probes for ``scripts/bench.sh tool-calls --probes FILE``: the shipped
set and schema, every bad input as one clear line, the loader under generated files, and
judging by outcome with scripted decisions (whatever protocol the editable policy runs)."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picocontext import (
    EDIT_TOOL,
    KEEP_TOOL,
    Delete,
    ModelResponse,
    Operation,
    Phase,
    PreparedPrompt,
    Replace,
    edit_payload,
    keep_payload,
)
from picocontext.models import ByteCounter, ScriptedBackend, scripted_call
from picocontext_diagnostics.bench import tool_calls
from picocontext_diagnostics.decision_probes import (
    SCHEMA_FILENAME,
    DecisionProbe,
    ProbeFileError,
    change_between,
    default_probes_path,
    generate_schema,
    parse_probes,
    read_probes,
    run_decision_probe,
    summarize_decisions,
)

jsonschema: Any = importlib.import_module("jsonschema")
RESOURCES = Path(__file__).resolve().parents[2] / "resources"
SHIPPED_KEYS = (
    "benchmark",
    "model",
    "decoding",
    "n",
    "valid_rate",
    "right_tool_rate",
    "right_args_rate",
    "seconds_per_call",
    "generated_tokens_per_call",
    "right_args_by_kind",
)


def task() -> dict[str, Any]:
    return {"id": "t", "role": "user", "body": "Track the shop's prices.", "protected": True}


def note(record_id: str, body: str) -> dict[str, Any]:
    return {"id": record_id, "role": "user", "body": body}


def probe(probe_id: str = "p1", stale: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    records = [
        task(),
        note("n1", "Tea costs 4 EUR."),
        note("n2", "Coffee costs 6 EUR."),
        note("n3", "Tea now costs 5 EUR."),
    ]
    return {
        "id": probe_id,
        "records": records,
        "stale": ["n1"] if stale is None else stale,
        **extra,
    }


def tool_probe(stale: list[str]) -> dict[str, Any]:
    call = {"id": "c1", "name": "price", "arguments": '{"item": "tea"}'}
    return {
        "id": "tools",
        "records": [
            task(),
            {"id": "a1", "role": "assistant", "body": "", "tool_calls": [call]},
            {"id": "r1", "role": "tool", "body": "tea: 4 EUR", "tool_call_id": "c1"},
            note("n1", "Tea went up to 5 EUR."),
        ],
        "stale": stale,
    }


def error_of(text: str) -> str:
    with pytest.raises(ProbeFileError) as caught:
        parse_probes(text, "f.json")
    message = caught.value.message
    assert "\n" not in message and message.startswith("f.json: ")
    return message


# -- the shipped set and schema --------------------------------------------------------------
def test_shipped_schema_is_generated_and_accepts_the_shipped_probes() -> None:
    shipped = json.loads((RESOURCES / "schemas" / SCHEMA_FILENAME).read_text(encoding="utf-8"))
    assert shipped == generate_schema()
    jsonschema.Draft202012Validator.check_schema(shipped)
    jsonschema.validate(json.loads(default_probes_path().read_text(encoding="utf-8")), shipped)


@pytest.mark.parametrize(
    "path",
    sorted((RESOURCES / "probes").glob("*.json")),
    ids=lambda p: p.name,
)
def test_every_shipped_probe_file_loads_and_fits_the_schema(path: Path) -> None:
    # the opt-in files (held out, feeds, JSON results) are run by name: a typo in one would
    # only show when someone runs it
    shipped = json.loads((RESOURCES / "schemas" / SCHEMA_FILENAME).read_text(encoding="utf-8"))
    jsonschema.validate(json.loads(path.read_text(encoding="utf-8")), shipped)
    probes = read_probes(path)
    assert probes and len({p.id for p in probes}) == len(probes)


def test_shipped_probe_set_is_large_and_varied() -> None:
    probes = read_probes(default_probes_path())
    assert len(probes) >= 40
    kinds = {p.kind for p in probes}
    assert {"stale", "several-stale", "correction", "distractor", "equal-values"} <= kinds
    assert {"addition", "tool-group"} <= kinds
    assert sum(1 for p in probes if p.stale) >= 15 and sum(1 for p in probes if not p.stale) >= 15
    assert any(len(p.stale) >= 2 for p in probes)
    # corrections say so without the word
    assert all("correction" not in r.body.lower() for p in probes for r in p.records)


# -- bad inputs: one line naming the probe -------------------------------------------------
def test_not_json() -> None:
    assert "not JSON (line 1" in error_of("[{")
    assert "not JSON" in error_of('[{"id": "a", "id": "b"}]')  # duplicate keys
    assert "not JSON" in error_of("[NaN]")


def test_not_an_array_and_empty_array() -> None:
    assert "JSON array of probes, not a JSON object" in error_of(json.dumps(probe()))
    assert "no probes" in error_of("[]")
    assert "probe #2: a probe is a JSON object, not a JSON string" in error_of(
        json.dumps([probe(), "p2"])
    )


def test_duplicate_probe_ids() -> None:
    message = error_of(json.dumps([probe("same"), probe("other"), probe("same")]))
    assert "probe 'same' (#3): duplicate probe id (probe #1 has it too)" in message


def test_duplicate_record_ids() -> None:
    doc = probe("dup")
    doc["records"].append(note("n2", "Milk costs 1 EUR."))
    assert "probe 'dup' (#1): duplicate record id 'n2'" in error_of(json.dumps([doc]))


def test_stale_id_that_is_not_a_record() -> None:
    message = error_of(json.dumps([probe("ghost", stale=["n9"])]))
    assert "probe 'ghost' (#1): stale id 'n9' is not a record of this probe" in message
    assert "'t', 'n1', 'n2', 'n3'" in message


def test_stale_protected_record() -> None:
    assert "stale record 't' is protected" in error_of(json.dumps([probe("pin", stale=["t"])]))
    doc = probe("sys", stale=["s"])
    doc["records"].insert(0, {"id": "s", "role": "system", "body": "Be brief."})
    assert "probe 'sys' (#1): stale record 's' is protected" in error_of(json.dumps([doc]))


def test_no_records() -> None:
    assert "probe 'empty' (#1): no records" in error_of(
        json.dumps([{"id": "empty", "records": [], "stale": []}])
    )
    assert "probe 'bare' (#1): no records" in error_of(json.dumps([{"id": "bare", "stale": []}]))


def test_other_mistakes_are_named_too() -> None:
    doc = probe("nostale")
    del doc["stale"]
    assert "probe 'nostale' (#1): no 'stale' list" in error_of(json.dumps([doc]))
    assert "stale lists 'n1' twice" in error_of(json.dumps([probe("twice", stale=["n1", "n1"])]))
    assert "probe 'typo' (#1): record 't'.protectd: Extra inputs are not permitted" in error_of(
        json.dumps([{**probe("typo"), "records": [{**task(), "protectd": True}]}])
    )
    assert "probe 'role' (#1): record 't'.role: Input should be" in error_of(
        json.dumps([{**probe("role"), "records": [{**task(), "role": "narrator"}]}])
    )
    partial = {**tool_probe(["r1"]), "id": "half"}
    assert "stale names 'r1' but not 'a1' of the same tool group" in error_of(json.dumps([partial]))
    orphan = probe("orphan", stale=[])
    orphan["records"].append({"id": "r9", "role": "tool", "body": "x", "tool_call_id": "c9"})
    assert "probe 'orphan' (#1): the records are not a valid history" in error_of(
        json.dumps([orphan])
    )


def test_a_bad_file_exits_non_zero_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([probe("ghost", stale=["n9"])]), encoding="utf-8")
    assert tool_calls.main(["--probes", str(bad)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "probe 'ghost'" in lines[0] and "Traceback" not in captured.err
    assert tool_calls.main(["--probes", str(tmp_path / "missing.json")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    good = tmp_path / "good.json"
    good.write_text(json.dumps([probe()]), encoding="utf-8")
    assert tool_calls.main(["--probes", str(good), "--check"]) == 0
    assert tool_calls.main(["--probes", str(good), "--check", "--decision", "nonsense"]) == 2
    assert "Invalid config for policy 'editable'" in capsys.readouterr().err


# -- the loader under generated files -------------------------------------------------------
IDS = st.from_regex(r"[a-z][a-z0-9-]{0,11}", fullmatch=True)
SCHEMA = generate_schema()
TEXT = st.characters(exclude_categories=["Cs"])  # records are Unicode text


@st.composite
def probe_docs(draw: st.DrawFn, probe_id: str) -> dict[str, Any]:
    ids = draw(st.lists(IDS, min_size=1, max_size=8, unique=True))
    records = []
    for position, record_id in enumerate(ids):
        # The core's rule: the first user record (the task) is protected.
        protected = position == 0 or draw(st.booleans())
        body = draw(st.text(TEXT, max_size=40))
        role = "user" if position == 0 else draw(st.sampled_from(["user", "assistant"]))
        records.append({"id": record_id, "role": role, "body": body, "protected": protected})
    editable = [r["id"] for r in records if not r["protected"]]
    stale = draw(st.lists(st.sampled_from(editable), unique=True)) if editable else []
    doc: dict[str, Any] = {"id": probe_id, "records": records, "stale": stale}
    if draw(st.booleans()):
        doc["kind"] = draw(st.sampled_from(["stale", "keep", "tool group"]))
    return doc


@st.composite
def files(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(st.lists(IDS, min_size=1, max_size=5, unique=True))
    return [draw(probe_docs(name)) for name in names]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files())
def test_valid_files_load_as_written(doc: list[dict[str, Any]]) -> None:
    probes = parse_probes(json.dumps(doc), "gen.json")
    assert [p.id for p in probes] == [d["id"] for d in doc]
    for loaded, written in zip(probes, doc, strict=True):
        assert list(loaded.stale) == written["stale"]
        assert [r.id for r in loaded.records] == [r["id"] for r in written["records"]]
        snapshot = loaded.snapshot()
        assert [r.protected for r in snapshot.records] == [
            r["protected"] for r in written["records"]
        ]
    jsonschema.validate(doc, SCHEMA)


BREAKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "duplicate record id": lambda d: d["records"].append(dict(d["records"][0])),
    "is not a record": lambda d: d["stale"].append("zz-not-there"),
    "is protected": lambda d: d["stale"].append(d["records"][0]["id"]),
    "no records": lambda d: d.update(records=[]),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files(), st.data())
def test_one_broken_probe_is_named(doc: list[dict[str, Any]], data: st.DataObject) -> None:
    target = data.draw(st.integers(0, len(doc) - 1))
    problem = data.draw(st.sampled_from(sorted(BREAKS)))
    BREAKS[problem](doc[target])
    message = error_of(json.dumps(doc))
    assert f"probe {doc[target]['id']!r} (#{target + 1})" in message and problem in message


@settings(max_examples=80, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
        max_leaves=12,
    )
)
def test_any_json_loads_or_fails_with_one_line(value: Any) -> None:
    try:
        parse_probes(json.dumps(value), "any.json")
    except ProbeFileError as exc:
        assert "\n" not in exc.message and exc.message.startswith("any.json: ")


# -- judging by outcome ---------------------------------------------------------------------
def loaded(doc: dict[str, Any]) -> DecisionProbe:
    return parse_probes(json.dumps([doc]), "one.json")[0]


def tool_call_decision(operations: Callable[[PreparedPrompt], tuple[Operation, ...]]) -> Any:
    """A scripted tool-call decision: ``edit_context`` with the given operations, or
    ``keep_context`` when there are none. The answer call must never reach it."""

    def respond(prompt: PreparedPrompt, cap: int) -> ModelResponse:
        assert prompt.input.phase is not Phase.COMPLETION
        revision = prompt.input.context.revision
        ops = operations(prompt)
        if ops:
            return scripted_call(EDIT_TOOL, edit_payload(revision, ops))
        return scripted_call(KEEP_TOOL, keep_payload(revision))

    return ScriptedBackend(respond)


TOOL_CALL = {"decision": "tool-call"}


def judge(doc: dict[str, Any], ops: tuple[Operation, ...]) -> dict[str, Any]:
    backend = tool_call_decision(lambda prompt: ops)
    return run_decision_probe(loaded(doc), ByteCounter(), backend, TOOL_CALL)


def test_deleting_exactly_the_stale_records_is_right() -> None:
    row = judge(probe(), (Delete(record_id="n1"),))
    assert row["exact"] and row["right_tool"] and row["valid"]
    assert row["deleted"] == ["n1"] and row["extra"] == [] and row["missed"] == []
    assert row["decision_calls"] == 1


def test_one_extra_deletion_is_wrong() -> None:
    row = judge(probe(), (Delete(record_id="n1"), Delete(record_id="n2")))
    assert not row["exact"] and row["right_tool"] and row["extra"] == ["n2"]


def test_keep_is_right_only_when_nothing_is_stale() -> None:
    assert judge(probe(stale=[]), ())["exact"]
    row = judge(probe(), ())
    assert not row["exact"] and not row["right_tool"] and row["missed"] == ["n1"]
    assert not judge(probe(stale=[]), (Delete(record_id="n3"),))["exact"]


def test_a_replacement_counts_as_changed() -> None:
    assert judge(probe(), (Replace(record_id="n1", body="Tea: see n3."),))["exact"]
    assert not judge(probe(stale=[]), (Replace(record_id="n2", body="Coffee: 6."),))["exact"]


def test_tool_groups_are_judged_whole() -> None:
    assert judge(tool_probe(["a1", "r1"]), (Delete(record_id="a1"), Delete(record_id="r1")))[
        "exact"
    ]
    # The core refuses half a group: nothing changes, the attempt is invalid, the probe wrong.
    row = judge(tool_probe(["a1", "r1"]), (Delete(record_id="r1"),))
    assert not row["exact"] and not row["valid"] and row["deleted"] == []


def test_a_protected_record_is_protected_in_the_snapshot() -> None:
    row = judge(probe(stale=[]), (Delete(record_id="t"),))
    assert not row["valid"] and row["deleted"] == [] and row["exact"]


def test_judging_does_not_depend_on_the_protocol() -> None:
    """The incremental protocol asks choices, not one call; the outcome is judged alike."""

    def choose(prompt: PreparedPrompt, cap: int) -> ModelResponse:
        assert prompt.input.phase is Phase.CHOICE
        options = json.loads(str(prompt.input.answer_schema_json))["enum"]
        # The question about n3 offers n1 and n2: n3 replaces n1.
        return ModelResponse(text='"n1"' if "n2" in options else '"none"', generated_tokens=2)

    # The model's choice among the offered records (judge "choice").
    incremental = {
        "decision": "incremental",
        "pick_overlap": None,
        "ask_model": True,
        "judge": "choice",
    }
    row = run_decision_probe(loaded(probe()), ByteCounter(), ScriptedBackend(choose), incremental)
    assert row["exact"] and row["deleted"] == ["n1"] and row["decision_calls"] == 2
    # the row says why each question was answered as it was
    assert row["choices"] and all(isinstance(d, str) and d for d in row["choices"])
    keep = ScriptedBackend(lambda p, c: ModelResponse(text='"none"', generated_tokens=2))
    assert run_decision_probe(loaded(probe(stale=[])), ByteCounter(), keep, incremental)["exact"]


def test_change_between_sees_deletes_replacements_and_additions() -> None:
    before = loaded(probe()).snapshot()
    records = (before.records[0], before.records[2].with_body("Coffee: 7 EUR."))
    extra = before.records[1].model_copy(update={"id": "new"})
    change = change_between(before, before.model_copy(update={"records": (*records, extra)}))
    assert change.deleted == ("n1", "n3") and change.replaced == ("n2",)
    assert change.added == ("new",)


def test_summary_rates_and_breakdowns() -> None:
    rows = [
        judge(probe("a", kind="stale"), (Delete(record_id="n1"),)),
        judge(probe("b", kind="stale"), ()),
        judge(probe("c", stale=[], kind="keep"), ()),
        judge(probe("d", stale=[]), ()),
    ]
    summary = summarize_decisions(rows)
    assert summary["decision_n"] == 4 and summary["decision_exact_rate"] == 0.75
    assert summary["decision_exact_by_expect"] == {"stale": 0.5, "keep": 1.0}
    assert summary["decision_exact_by_kind"] == {"stale": 0.5, "keep": 1.0, "unlabeled": 1.0}
    unlabeled = summarize_decisions([judge(probe(stale=[]), ())])
    assert "decision_exact_by_kind" not in unlabeled
    assert summarize_decisions([])["decision_exact_rate"] is None


class FakeModel:
    """Stands in for a loaded model: a byte counter and a scripted tool-call decision that
    always deletes ``n1`` (right on a probe where ``n1`` is stale, wrong on a keep probe)."""

    model_id = "fake"
    decoding = "constrained"

    def __init__(self) -> None:
        self.counter = ByteCounter()
        self.backend = tool_call_decision(lambda prompt: (Delete(record_id="n1"),))

    def prepare(self, model_input: Any) -> PreparedPrompt:
        return self.counter.prepare(model_input)

    def generate(self, prompt: PreparedPrompt, max_tokens: int, cancel: Any = None) -> Any:
        return self.backend.generate(prompt, max_tokens, cancel)

    def describe(self) -> dict[str, Any]:
        return {"model": self.model_id, "decoding": self.decoding}

    def close(self) -> None:
        return None


def test_bench_line_keeps_its_keys_and_gains_the_decision_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import picocontext.models

    monkeypatch.setattr(picocontext.models, "load_model", lambda *a, **k: FakeModel())
    path = tmp_path / "mine.json"
    docs = [probe("hit", kind="stale"), probe("miss", stale=[], kind="keep")]
    path.write_text(json.dumps(docs), encoding="utf-8")
    output = tmp_path / "out.json"
    argv = ["--probes", str(path), "--decision", "tool-call", "--output", str(output)]
    assert tool_calls.main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert all(key in summary for key in SHIPPED_KEYS)
    assert summary["n"] == 2 and summary["decision_exact_rate"] == 0.5
    assert summary["decision_exact_by_kind"] == {"stale": 1.0, "keep": 0.0}
    assert summary["right_args_by_kind"] == {"decision": 0.5}
    config = summary["decision_config"]
    assert (config["decision"], config["none_margin"], config["apply_at"]) == (
        "tool-call",
        None,
        0.0,
    )
    assert summary["probe_files"] == [str(path)]
    rows = json.loads(output.read_text(encoding="utf-8"))["rows"]
    assert [r["extra"] for r in rows] == [[], ["n1"]]


def test_config_passes_more_of_the_policy_config_and_refuses_bad_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps([probe("hit", kind="stale")]), encoding="utf-8")
    args = tool_calls.parse_args(["--probes", str(good), "--config", '{"pick_overlap": 0.4}'])
    config = tool_calls.plan_run(args).config
    assert config["pick_overlap"] == 0.4 and config["apply_at"] == 0.0
    # --decision wins over the config's "decision".
    both = ["--config", '{"decision": "tool-call"}', "--decision", "incremental"]
    assert tool_calls.plan_run(tool_calls.parse_args(["--probes", str(good), *both])).config[
        "decision"
    ] == ("incremental")
    assert tool_calls.main(["--probes", str(good), "--check", "--config", '{"bogus": 1}']) == 2
    assert "bogus" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tool_calls.parse_args(["--config", "[1]"])
