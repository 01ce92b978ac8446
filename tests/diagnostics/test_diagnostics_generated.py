"""Seeded generated episodes (checklist 91) and the deterministic notebook backend (90)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext import (
    EDIT_TOOL,
    KEEP_TOOL,
    EditStyle,
    ModelInput,
    Phase,
    Record,
    Role,
    Scope,
    Snapshot,
    ToolCall,
)
from picocontext.models import ByteCounter
from picocontext_diagnostics.episodes.episode import (
    Episode,
    SplitMix64,
    Step,
    check_oracle,
    generated_episode,
    generated_operations,
)
from picocontext_diagnostics.episodes.fixtures import Scenario
from picocontext_diagnostics.episodes.grading import ContextCheck, notebook_state
from picocontext_diagnostics.episodes.notebook_backend import DeterministicNotebookBackend
from picocontext_diagnostics.errors import InvalidEpisode

SCOPE = Scope(user_id="u", conversation_id="c", branch_id="b")


def test_splitmix64_matches_the_published_sequence() -> None:
    rng = SplitMix64(0)
    assert [rng.next() for _ in range(3)] == [
        0xE220A8397B1DCDAF,
        0x6E789E6AA1B965F4,
        0x06C45D188009454F,
    ]


@pytest.mark.parametrize("scenario", list(Scenario))
def test_seeded_streams_are_stable_and_noise_never_changes_facts(scenario: Scenario) -> None:
    first = generated_episode(scenario, seed=17, step_count=10, noise_lines=12)
    again = generated_episode(scenario, seed=17, step_count=10, noise_lines=12)
    assert first == again
    pressured = generated_episode(scenario, seed=17, step_count=10, noise_lines=48)
    quiet = generated_episode(scenario, seed=17, step_count=10, noise_lines=0)
    facts = [s.expected_facts for s in first.steps]
    assert [s.expected_facts for s in pressured.steps] == facts
    assert [s.expected_facts for s in quiet.steps] == facts
    assert generated_episode(scenario, seed=29, step_count=10).steps[0].expected_facts != facts[0]
    assert first.title.endswith("seed 17") and first.check is scenario.check


def test_state_updates_remove_current_and_previous_slot_every_fifth_step() -> None:
    ops = generated_operations(Scenario.STATE_UPDATES, 17, 12)
    assert ops[4] == ["REMOVE cell4", "REMOVE cell3"]
    assert ops[9] == ["REMOVE cell1", "REMOVE cell0"]
    episode = generated_episode(Scenario.STATE_UPDATES, 17, 12)
    assert "cell3" in episode.steps[3].expected_facts
    assert "cell3" not in episode.steps[4].expected_facts
    # cell0 is overwritten at step 9 (index 8)
    assert episode.steps[8].expected_facts["cell0"] != episode.steps[7].expected_facts["cell0"]


def test_retention_assigns_eight_slots_then_only_noise() -> None:
    ops = generated_operations(Scenario.RETENTION, 5, 12)
    assert all(len(o) == 1 and o[0].startswith(f"FACT cell{i}=q-") for i, o in enumerate(ops[:8]))
    assert ops[8:] == [[], [], [], []]
    episode = generated_episode(Scenario.RETENTION, 5, 12, noise_lines=3)
    assert episode.steps[-1].expected_facts == episode.steps[7].expected_facts
    assert len(episode.steps[-1].records[1].body.split("\n")) == 3


def test_generated_requests_and_noise() -> None:
    episode = generated_episode(Scenario.RETENTION, 17, 2, noise_lines=2)
    request = episode.steps[1].records[2].body
    assert '{"facts":{"cell0":"<current value>","cell1":"<current value>"}}' in request
    noise = episode.steps[1].records[1].body.split("\n")[1:]
    assert [line.split(":")[0] for line in noise] == [
        "Sensor sweep 2, frame 0",
        "Sensor sweep 2, frame 1",
    ]
    assert all("notebook unchanged." in line for line in noise)


@pytest.mark.parametrize(
    ("steps", "noise"), [(0, 12), (-1, 12), (33, 12), (2**63, 12), (4, -1), (4, 129)]
)
def test_generated_bounds(steps: int, noise: int) -> None:
    with pytest.raises(InvalidEpisode, match=r"1\.\.\.32 steps"):
        generated_episode(Scenario.RETENTION, 1, steps, noise)


def test_oracle_rejects_an_episode_whose_expectations_disagree() -> None:
    episode = generated_episode(Scenario.STATE_UPDATES, 3, 5)
    bad_step = episode.steps[4].model_copy(
        update={"expected_facts": episode.steps[3].expected_facts}
    )
    broken = episode.model_copy(update={"steps": (*episode.steps[:4], bad_step)})
    with pytest.raises(InvalidEpisode, match=r"oracle disagrees .* step-5"):
        check_oracle(broken)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(list(Scenario)),
    st.integers(min_value=0, max_value=2**64 - 1),
    st.integers(min_value=1, max_value=32),
)
def test_every_seed_and_length_passes_its_own_oracle(
    scenario: Scenario, seed: int, count: int
) -> None:
    episode = generated_episode(scenario, seed, count, noise_lines=1)
    assert len(episode.steps) == count
    assert len({s.id for s in episode.steps}) == count


# -- the deterministic notebook backend (checklist 90) ----------------------------------------


def snapshot_with(*extra: Record) -> Snapshot:
    base = (
        Record(id="instructions", role=Role.SYSTEM, body="rules"),
        Record(id="task", role=Role.USER, body="task", protected=True),
    )
    return Snapshot(scope=SCOPE, revision=3, records=base + extra)


def feed(k: int, body: str, call_body: str = "") -> tuple[Record, Record]:
    return (
        Record(
            id=f"c{k}",
            role=Role.ASSISTANT,
            body=call_body,
            tool_calls=(ToolCall(id=f"f{k}", name="feed"),),
        ),
        Record(id=f"d{k}", role=Role.TOOL, body=body, tool_call_id=f"f{k}"),
    )


def prompt(snapshot: Snapshot, phase: Phase, style: EditStyle = EditStyle.TARGETED):  # type: ignore[no-untyped-def]
    return ByteCounter().prepare(ModelInput(context=snapshot, phase=phase, edit_style=style))


def test_targeted_keeps_only_operation_lines_of_unprotected_tool_records() -> None:
    snap = snapshot_with(*feed(1, "FACT a=1\nnoise\nREMOVE b"), *feed(2, "FACT c=3"))
    response = DeterministicNotebookBackend().generate(prompt(snap, Phase.EDIT), 1_000)
    (call,) = response.tool_calls
    assert call.name == EDIT_TOOL
    payload = json.loads(call.arguments)
    assert payload == {
        "baseRevision": 3,
        "operations": [{"action": "replace", "body": "FACT a=1\nREMOVE b", "recordID": "d1"}],
    }
    assert call.arguments == json.dumps(payload, sort_keys=True, separators=(",", ":"))
    assert response.generated_tokens == len(call.arguments.encode("utf-8"))


def test_no_operations_means_keep_context() -> None:
    snap = snapshot_with(*feed(1, "FACT a=1"))
    response = DeterministicNotebookBackend().generate(prompt(snap, Phase.EDIT), 1_000)
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        (KEEP_TOOL, '{"baseRevision":3}')
    ]


def test_targeted_caps_at_32_operations() -> None:
    extra = [r for k in range(40) for r in feed(k, f"FACT k{k}=v\nnoise")]
    response = DeterministicNotebookBackend().generate(
        prompt(snapshot_with(*extra), Phase.EDIT), 100_000
    )
    assert len(json.loads(response.tool_calls[0].arguments)["operations"]) == 32


def test_summarize_consolidates_into_the_last_unprotected_record() -> None:
    answer = Record(id="ans", role=Role.ASSISTANT, body='{"facts":{}}')
    note = Record(id="note", role=Role.USER, body="FACT z=9")
    snap = snapshot_with(*feed(1, "FACT b=2\nnoise\nFACT a=1"), note, *feed(2, "REMOVE z"), answer)
    response = DeterministicNotebookBackend().generate(
        prompt(snap, Phase.EDIT, EditStyle.SUMMARIZE), 10_000
    )
    ops = json.loads(response.tool_calls[0].arguments)["operations"]
    bodies = {op["recordID"]: op["body"] for op in ops}
    assert bodies == {"d1": "", "note": "", "d2": "", "ans": "FACT a=1\nFACT b=2"}


def test_summarize_proposes_nothing_beyond_32_operations() -> None:
    for count, expect in ((16, EDIT_TOOL), (17, KEEP_TOOL)):
        # 2 bodies per feed: 16 feeds = 32 operations (31 emptied + 1 summary), 17 feeds = 34.
        extra = [r for k in range(count) for r in feed(k, f"FACT k{k}=v\nnoise", "fetching")]
        response = DeterministicNotebookBackend().generate(
            prompt(snapshot_with(*extra), Phase.EDIT, EditStyle.SUMMARIZE), 100_000
        )
        assert response.tool_calls[0].name == expect


def test_completion_answers_the_fold_and_clips_on_character_boundaries() -> None:
    snap = snapshot_with(*feed(1, "FACT b=\u00e9t\u00e9\nFACT a=1"))
    backend = DeterministicNotebookBackend()
    full = backend.generate(prompt(snap, Phase.COMPLETION), 1_000)
    assert full.text == '{"facts":{"a":"1","b":"\u00e9t\u00e9"}}' and not full.reached_token_limit
    assert full.generated_tokens == len(full.text.encode("utf-8"))
    clipped = backend.generate(prompt(snap, Phase.COMPLETION), 24)  # byte 24 is inside 'é'
    assert clipped.reached_token_limit and clipped.generated_tokens == 23
    assert full.text.startswith(clipped.text) and clipped.text.endswith('"')


def test_clipped_decision_carries_no_call() -> None:
    snap = snapshot_with(*feed(1, "FACT a=1\nnoise"))
    response = DeterministicNotebookBackend().generate(prompt(snap, Phase.EDIT), 10)
    assert response.tool_calls == () and response.reached_token_limit
    assert response.generated_tokens == 10 and response.text == '{"baseRevi'


def test_drop_keys_loses_those_lines_when_editing() -> None:
    snap = snapshot_with(*feed(1, "FACT a=1\nFACT b=2\nnoise"))
    response = DeterministicNotebookBackend(drop_keys={"a"}).generate(
        prompt(snap, Phase.EDIT), 1_000
    )
    ops = json.loads(response.tool_calls[0].arguments)["operations"]
    assert ops == [{"action": "replace", "body": "FACT b=2", "recordID": "d1"}]


def test_episode_model_exposes_environment() -> None:
    episode: Episode = generated_episode(Scenario.RETENTION, 1, 2, 0)
    env = episode.environment()
    assert len(env.records) == 2 + 6
    step: Step = episode.steps[0]
    assert env.records[2:5] == step.records
    assert notebook_state(env) == episode.steps[-1].expected_facts
    assert episode.check is ContextCheck.EXACT_VALUES
