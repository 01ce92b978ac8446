"""``scripts/bench.sh decision-replay``: a changed decision judged on recorded replies equals
the changed decision run on the same model; what the record cannot answer is unevaluable,
never guessed; bad files are one clear line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from picocontext import CancelToken, ModelResponse, PreparedPrompt
from picocontext.models import ByteCounter
from picocontext_diagnostics.bench import decision_replay
from picocontext_diagnostics.decision_probes import (
    decision_config,
    read_probes,
    run_decision_probe,
)

ITEM = re.compile(r"What does the (\w+) cost\?")


class Shopkeeper:
    """A deterministic stand-in for a greedy model: it restates a record as the question of
    what its first word costs, and answers that question with the last "<item> price N EUR"
    it reads (or "not said")."""

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        guidance = prompt.input.guidance or ""
        if "Write the one question" in guidance:
            quoted = guidance.split(":", 1)[1].split()
            return ModelResponse(text=f"What does the {quoted[0].lower()} cost?")
        item = ITEM.search(guidance)
        prices = re.findall(rf"\b{item[1]} price (\d+) EUR", guidance, re.I) if item else []
        return ModelResponse(text=f"{prices[-1]} EUR." if prices else "not said")


def note(i: int, body: str) -> dict[str, Any]:
    return {"id": f"n{i}", "role": "user", "body": body}


TASK = {"id": "t", "role": "user", "body": "Keep the shop's prices.", "protected": True}
PROBES = [
    {
        "id": "lamp",
        "records": [
            TASK,
            note(1, "Lamp price 30 EUR in the shop."),
            note(2, "Shade price 12 EUR, for the lamp."),
            note(3, "Lamp price 35 EUR in the shop now."),
        ],
        "stale": ["n1"],
    },
    {
        "id": "desk",
        "records": [
            TASK,
            note(1, "Desk price 90 EUR."),
            note(2, "Shelf price 20 EUR, fits the desk."),
            note(3, "Chair price 40 EUR, matches the desk."),
            note(4, "Desk price 95 EUR after the sale."),
        ],
        "stale": ["n1"],
    },
    {"id": "keep", "records": [TASK, note(1, "Chair price 40 EUR.")], "stale": []},
]


def record(tmp_path: Path, config: dict[str, Any], probes: list[dict[str, Any]] = PROBES) -> Path:
    """A tool-calls bench report of the probes run on the stand-in."""
    probes_file = tmp_path / "probes.json"
    probes_file.write_text(json.dumps(probes), encoding="utf-8")
    recorded = decision_config({"decision": "incremental", **config})
    budget = decision_replay._budget()
    rows = [
        run_decision_probe(p, ByteCounter(), Shopkeeper(), recorded, budget)
        for p in read_probes(probes_file)
    ]
    report = tmp_path / "rows.json"
    report.write_text(
        json.dumps({"decision_config": recorded, "probe_files": [str(probes_file)], "rows": rows}),
        encoding="utf-8",
    )
    return report


def last_json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    out = capsys.readouterr().out.strip().splitlines()
    loaded: dict[str, Any] = json.loads(out[-1])
    return loaded


def test_replaying_the_recorded_config_reproduces_every_probe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = record(tmp_path, {})
    out = tmp_path / "replay.json"
    assert decision_replay.main([str(rows), "--output", str(out)]) == 0
    got = last_json(capsys)
    written = json.loads(out.read_text(encoding="utf-8"))
    assert {k: written[k] for k in got} == got and len(written["probes"]) == 3
    assert got["replayed"] == 3 and got["unevaluable"] == 0
    assert got["exact_before"] == got["exact_after"] == 3  # the stand-in judges every probe right
    assert got["calls_before"] == got["calls_after"] > 0


def test_a_variant_judged_on_the_record_equals_the_variant_run_on_the_model(
    tmp_path: Path,
) -> None:
    rows_file = record(tmp_path, {})
    rows, recorded, files = decision_replay.load_rows(rows_file)
    probes = {p.id: p for p in read_probes(files[0])}
    results = decision_replay.replay(rows, probes, recorded, {"pairs": 1})
    direct = decision_config({**recorded, "pairs": 1})
    budget = decision_replay._budget()
    for result in results:
        assert result.after is not None, result.unevaluable
        live = run_decision_probe(probes[result.probe], ByteCounter(), Shopkeeper(), direct, budget)
        for key in ("exact", "deleted", "replaced", "decision_calls"):
            assert result.after[key] == live[key]
    # one pair a new note asks fewer calls on the desk probe (every note names the desk)
    desk = next(r for r in results if r.probe == "desk")
    assert desk.after is not None and desk.before is not None
    assert desk.after["decision_calls"] < desk.before["decision_calls"]


def test_a_variant_that_asks_what_the_model_was_never_asked_is_unevaluable(
    tmp_path: Path,
) -> None:
    rows_file = record(tmp_path, {"pairs": 1})
    rows, recorded, files = decision_replay.load_rows(rows_file)
    probes = {p.id: p for p in read_probes(files[0])}
    results = {r.probe: r for r in decision_replay.replay(rows, probes, recorded, {"pairs": 3})}
    assert results["desk"].after is None
    assert results["desk"].unevaluable == "the variant asks a prompt the model was never asked"
    assert results["keep"].after is not None  # nothing to ask there either way


def test_a_row_the_code_no_longer_reproduces_is_unevaluable(tmp_path: Path) -> None:
    rows_file = record(tmp_path, {})
    data = json.loads(rows_file.read_text(encoding="utf-8"))
    data["rows"][0]["replies"] = [*data["rows"][0]["replies"], "an extra reply"]
    data["rows"][1].pop("replies")
    rows_file.write_text(json.dumps(data), encoding="utf-8")
    rows, recorded, files = decision_replay.load_rows(rows_file)
    probes = {p.id: p for p in read_probes(files[0])}
    results = decision_replay.replay(rows, probes, recorded, {})
    assert results[0].unevaluable == "the replay differs from the recorded run"
    assert results[1].unevaluable == "the row has no whole replies"
    assert decision_replay.summary(results, {})["replayed"] == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not JSON"),
        ('{"rows": []}', "no decision probe rows to replay"),
        ("[1, 2]", "not a tool-calls bench report"),
        ('{"rows": [{"judged": "outcome", "id": "x"}]}', "names no decision_config"),
    ],
)
def test_bad_rows_files_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "rows.json"
    path.write_text(content, encoding="utf-8")
    assert decision_replay.main([str(path), "--output", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert decision_replay.main([str(tmp_path / "missing.json")]) == 2
    assert "cannot read it" in capsys.readouterr().err


def test_a_bad_config_change_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = record(tmp_path, {})
    out = ["--output", str(tmp_path / "o.json")]
    assert decision_replay.main([str(rows), "--config", '{"pairs": 0}', *out]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pairs" in err
    # what the record cannot say is refused up front, not judged as "no change"
    for change, word in (
        ('{"none_margin": 0.5}', "none_margin"),
        ('{"decision": "tool-call"}', "incremental"),
    ):
        assert decision_replay.main([str(rows), "--config", change, *out]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and word in err
    assert not (tmp_path / "o.json").exists()


def test_one_prompt_with_two_replies_makes_the_probe_unevaluable(tmp_path: Path) -> None:
    rows_file = record(tmp_path, {})
    data = json.loads(rows_file.read_text(encoding="utf-8"))
    desk = next(r for r in data["rows"] if r["id"] == "desk")
    # the desk probe asks "What does the desk cost?" over (n1, n2) and (n1, n3) once each;
    # make the record claim the restatement of n1 came back two ways
    replies = desk["replies"]
    first = replies.index("What does the desk cost?")
    replies.insert(first + 1, "What does the desk cost now?")
    replies.pop(first)
    rows_file.write_text(json.dumps(data), encoding="utf-8")
    rows, recorded, files = decision_replay.load_rows(rows_file)
    probes = {p.id: p for p in read_probes(files[0])}
    results = {r.probe: r for r in decision_replay.replay(rows, probes, recorded, {})}
    assert results["desk"].unevaluable == "the replay differs from the recorded run"
    assert results["lamp"].after is not None


def test_a_run_recorded_before_the_settled_rule_replays_and_judges_the_rule(
    tmp_path: Path,
) -> None:
    # n2 repeats n1 word for word: no answer can judge n1 out of date, so the settled rule
    # keeps it without the answer call; n3's new price is still asked.
    repeated = {
        "id": "repeat",
        "records": [
            TASK,
            note(1, "Lamp price 30 EUR."),
            note(2, "Lamp price 30 EUR."),
            note(3, "Lamp price 35 EUR."),
        ],
        "stale": ["n1", "n2"],
    }
    rows_file = record(tmp_path, {"ask_settled": True}, [*PROBES, repeated])
    data = json.loads(rows_file.read_text(encoding="utf-8"))
    for key in ("ask_settled", "json_members"):  # as a row written before the settings
        del data["decision_config"][key]
    rows_file.write_text(json.dumps(data), encoding="utf-8")
    rows, recorded, files = decision_replay.load_rows(rows_file)
    assert recorded["ask_settled"] is True  # replayed as it was asked
    assert recorded["json_members"] is False
    probes = {p.id: p for p in read_probes(files[0])}
    results = {
        r.probe: r for r in decision_replay.replay(rows, probes, recorded, {"ask_settled": False})
    }
    assert all(r.after is not None for r in results.values())
    for result in results.values():
        assert result.after is not None and result.before is not None
        assert result.after["exact"] == result.before["exact"]
    after, before = results["repeat"].after, results["repeat"].before
    assert after is not None and before is not None
    assert after["decision_calls"] == before["decision_calls"] - 1
