"""Fixture files: order lookup, notebook episodes, pressure profile, loading and validation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from picocontext import Role, Scope, validate_snapshot
from picocontext_diagnostics.episodes.episode import fixture_episode
from picocontext_diagnostics.episodes.fixtures import (
    FIXTURES_ENV,
    Scenario,
    fixtures_dir,
    notebook_texts,
    order_lookup,
    pressure_profile,
)
from picocontext_diagnostics.episodes.grading import ContextCheck, notebook_state
from picocontext_diagnostics.errors import FixtureError, InvalidEpisode


@pytest.fixture
def fixture_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the fixtures folder that a test may break."""
    target = tmp_path / "fixtures"
    shutil.copytree(fixtures_dir(), target)
    monkeypatch.setenv(FIXTURES_ENV, str(target))
    return target


def edit_json(path: Path, change: object) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)  # type: ignore[operator]
    path.write_text(json.dumps(data), encoding="utf-8")


# -- order lookup (checklist 61) --------------------------------------------------------------


def test_order_lookup_records_groups_and_noise() -> None:
    task = order_lookup()
    snap = task.snapshot
    validate_snapshot(snap)
    assert snap.revision == 0
    assert [(r.id, r.role) for r in snap.records] == [
        ("instructions", Role.SYSTEM),
        ("task", Role.USER),
        ("earlier-check", Role.ASSISTANT),
        ("earlier-result", Role.TOOL),
        ("latest-check", Role.ASSISTANT),
        ("latest-result", Role.TOOL),
        ("warranty-result", Role.TOOL),
    ]
    assert [r.protected for r in snap.records] == [True, True, False, False, False, False, False]
    latest = snap.record("latest-check")
    assert latest is not None and len(latest.tool_calls) == 2
    assert len(task.noise_lines) == 24
    assert task.noise_lines[0].startswith("Audit 1:") and task.noise_lines[-1].startswith(
        "Audit 24:"
    )
    for rid in ("earlier-result", "latest-result", "warranty-result"):
        record = snap.record(rid)
        assert record is not None
        assert record.body.endswith("\n" + "\n".join(task.noise_lines))
    assert task.stale_record_ids == ("earlier-check", "earlier-result")
    assert task.fact_record_ids == ("latest-result", "warranty-result")
    assert task.scope == Scope(
        user_id="playground-user", conversation_id="order-lookup", branch_id="main"
    )


def test_order_lookup_answer_check_is_mechanical() -> None:
    task = order_lookup()
    e = task.expected
    assert (e.sku, e.price_usd, e.warranty_months, e.quantity) == ("TB-318", "44.90", "36", "18")
    assert task.answer_is_correct(task.correct_answer())
    assert task.answer_is_correct("sku tb-318, usd 44.90, 36 months, 18 in stock")
    assert not task.answer_is_correct(task.correct_answer() + " (was 62.00)")
    for value in e.values():
        assert not task.answer_is_correct(task.correct_answer().replace(value, "?"))


def test_order_lookup_facts_live_and_scope_override() -> None:
    scope = Scope(user_id="me", conversation_id="x", branch_id="y")
    task = order_lookup(scope)
    assert task.scope == scope and task.facts_live(task.snapshot)
    gutted = task.snapshot.model_copy(
        update={
            "records": tuple(
                r.with_body("") if r.id == "warranty-result" else r for r in task.snapshot.records
            )
        }
    )
    assert not task.facts_live(gutted)


def test_order_lookup_file_is_validated(fixture_copy: Path) -> None:
    def leak_stale_price(data: dict[str, object]) -> None:
        data["expected"]["price_usd"] = "62.00"  # type: ignore[index]

    edit_json(fixture_copy / "order_lookup.json", leak_stale_price)
    with pytest.raises(FixtureError, match=r"order_lookup\.json"):
        order_lookup()


def test_order_lookup_records_must_form_a_valid_snapshot(fixture_copy: Path) -> None:
    def orphan(data: dict[str, Any]) -> None:
        data["records"] = [r for r in data["records"] if r["id"] != "earlier-check"]
        data["stale_record_ids"] = ["earlier-result"]

    edit_json(fixture_copy / "order_lookup.json", orphan)
    with pytest.raises(FixtureError, match="valid snapshot"):
        order_lookup()


# -- notebook texts and episodes (checklist 62-67) --------------------------------------------


@pytest.mark.parametrize("scenario", list(Scenario))
def test_instructions_and_task_add_no_notebook_entries(scenario: Scenario) -> None:
    episode = fixture_episode(scenario)
    initial = episode.initial
    assert [r.id for r in initial.records] == ["instructions", "task"]
    assert initial.records[0].role is Role.SYSTEM and initial.records[1].protected
    assert "FACT key=value" in initial.records[0].body and "REMOVE key" in initial.records[0].body
    assert notebook_state(initial) == {}
    assert initial.records[1].body == notebook_texts().task


def test_scenario_scopes_titles_and_checks() -> None:
    retention = fixture_episode(Scenario.RETENTION)
    updates = fixture_episode(Scenario.STATE_UPDATES)
    assert retention.title == "Exact retention" and retention.check is ContextCheck.EXACT_VALUES
    assert updates.title == "State updates" and updates.check is ContextCheck.NOTEBOOK_STATE
    assert retention.initial.scope.conversation_id == "exact-retention"
    assert updates.initial.scope.conversation_id == "state-updates"
    scope = Scope(user_id="a", conversation_id="b", branch_id="c")
    assert fixture_episode(Scenario.RETENTION, scope).initial.scope == scope


def test_retention_steps_and_cumulative_expectations() -> None:
    episode = fixture_episode(Scenario.RETENTION)
    ops = [
        [line for line in s.records[1].body.split("\n") if line.startswith("FACT")]
        for s in episode.steps
    ]
    assert ops == [
        ["FACT heron=KX-7302-B"],
        ["FACT dunlin=R5:green/17"],
        [],
        ["FACT plover=receipt-4410"],
    ]
    assert [s.expected_facts for s in episode.steps] == [
        {"heron": "KX-7302-B"},
        {"heron": "KX-7302-B", "dunlin": "R5:green/17"},
        {"heron": "KX-7302-B", "dunlin": "R5:green/17"},
        {"heron": "KX-7302-B", "dunlin": "R5:green/17", "plover": "receipt-4410"},
    ]


def test_state_update_steps_overwrite_and_remove() -> None:
    episode = fixture_episode(Scenario.STATE_UPDATES)
    assert [s.expected_facts for s in episode.steps] == [
        {"shelf": "B2", "crates": "9"},
        {"shelf": "B2", "crates": "14", "keeper": "Ines"},
        {"crates": "14", "keeper": "Tomas"},
        {"crates": "5", "keeper": "Tomas"},
    ]
    assert episode.steps[2].records[1].body.split("\n")[:2] == ["REMOVE shelf", "FACT keeper=Tomas"]


def test_revisions_supersede_whole_updates_and_bring_their_own_telemetry() -> None:
    """The main job's episode: from step 3 on each update replaces the value set two steps
    earlier, so that earlier update (its only fact superseded) is entirely out of date; the
    fixture's own noise amount applies unless the caller asks for another."""
    episode = fixture_episode(Scenario.REVISIONS)
    assert episode.title == "Revised values" and episode.check is ContextCheck.NOTEBOOK_STATE
    assert episode.noise_lines == 24 and len(episode.steps) == 6
    facts = [
        [line for line in s.records[1].body.split("\n") if line.startswith("FACT")]
        for s in episode.steps
    ]
    assert all(len(f) == 1 for f in facts)
    keys = [f[0].removeprefix("FACT ").split("=")[0] for f in facts]
    assert keys == ["heron", "dunlin"] * 3
    for index in range(2, 6):
        assert facts[index] != facts[index - 2]
    assert fixture_episode(Scenario.REVISIONS, noise_lines=3).noise_lines == 3
    assert (
        fixture_episode(Scenario.STATE_UPDATES).noise_lines == notebook_texts().default_noise_lines
    )


def test_step_record_triple_ids_links_and_protection() -> None:
    episode = fixture_episode(Scenario.RETENTION)
    for k, step in enumerate(episode.steps, start=1):
        call, data, request = step.records
        assert step.id == f"step-{k}" and step.answer_record_id == f"step-{k}-answer"
        assert (call.id, call.role, call.body, call.protected) == (
            f"step-{k}-call",
            Role.ASSISTANT,
            "",
            False,
        )
        assert [(c.id, c.name, c.arguments) for c in call.tool_calls] == [
            (f"step-{k}-feed", "notebook_feed", json.dumps({"step": k}, separators=(",", ":")))
        ]
        assert (data.id, data.role, data.tool_call_id, data.protected) == (
            f"step-{k}-data",
            Role.TOOL,
            f"step-{k}-feed",
            False,
        )
        assert (request.id, request.role, request.protected) == (
            f"step-{k}-request",
            Role.USER,
            True,
        )


def test_noise_lines_format_counts_and_bounds() -> None:
    episode = fixture_episode(Scenario.RETENTION)
    assert episode.noise_lines == 12
    body = episode.steps[1].records[1].body.split("\n")
    noise = body[1:]
    assert len(noise) == 12
    assert noise[0] == "Sensor sweep 2, frame 0: relay idle; sample dropped; notebook unchanged."
    assert noise[-1].startswith("Sensor sweep 2, frame 11:")
    assert pressure_profile().noise_lines == 48
    pressured = fixture_episode(Scenario.RETENTION, noise_lines=pressure_profile().noise_lines)
    assert len(pressured.steps[0].records[1].body.split("\n")) == 1 + 48
    quiet = fixture_episode(Scenario.RETENTION, noise_lines=0)
    assert quiet.steps[2].records[1].body == ""
    for bad in (-1, 129):
        with pytest.raises(InvalidEpisode, match="noise_lines"):
            fixture_episode(Scenario.RETENTION, noise_lines=bad)


def test_request_names_sorted_keys_with_placeholders() -> None:
    episode = fixture_episode(Scenario.RETENTION)
    request = episode.steps[1].records[2].body
    shape = '{"facts":{"dunlin":"<current value>","heron":"<current value>"}}'
    assert shape in request
    assert "Quote every value" in request
    assert notebook_state([episode.steps[1].records[2]]) == {}


def test_episode_fixture_oracle_rejects_a_wrong_expectation(fixture_copy: Path) -> None:
    def wrong(data: dict[str, object]) -> None:
        data["steps"][2]["expected"]["shelf"] = "B2"  # type: ignore[index]

    edit_json(fixture_copy / "state_updates.json", wrong)
    with pytest.raises(FixtureError, match="step 3: expected facts disagree"):
        fixture_episode(Scenario.STATE_UPDATES)


def test_fixture_schema_rejects_unknown_fields_and_bad_operations(fixture_copy: Path) -> None:
    edit_json(fixture_copy / "exact_retention.json", lambda d: d.update(colour="teal"))
    with pytest.raises(FixtureError, match="colour"):
        fixture_episode(Scenario.RETENTION)
    edit_json(
        fixture_copy / "state_updates.json",
        lambda d: d["steps"][0].update(operations=["SET shelf=B2"]),
    )
    with pytest.raises(FixtureError, match="operations"):
        fixture_episode(Scenario.STATE_UPDATES)


def test_texts_that_would_change_the_notebook_are_rejected(fixture_copy: Path) -> None:
    edit_json(fixture_copy / "notebook.json", lambda d: d.update(task="FACT sneaky=1"))
    with pytest.raises(FixtureError, match="would change the notebook"):
        notebook_texts()


def test_missing_fixture_folder_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FIXTURES_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(FixtureError, match="not a directory"):
        order_lookup()
    monkeypatch.setenv(FIXTURES_ENV, str(tmp_path))
    with pytest.raises(FixtureError, match="cannot read"):
        order_lookup()
