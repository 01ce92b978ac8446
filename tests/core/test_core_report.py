"""Diff format and per-phase instructions (checklist 45, 47)."""

from __future__ import annotations

from kettle import SCOPE, kettle_snapshot
from picocontext import (
    Delete,
    Edit,
    EditStyle,
    ModelInput,
    Phase,
    Record,
    Replace,
    Role,
    Snapshot,
    WorkingContext,
    diff_snapshots,
)
from picocontext.prompts import COMPLETION_INSTRUCTIONS, destination_id


def test_diff_marks_deleted_and_replaced_records_against_the_transcript() -> None:
    ctx = WorkingContext.start(kettle_snapshot())
    out = ctx.apply(
        Edit(
            scope=SCOPE,
            base_revision=0,
            operations=(
                Delete(record_id="old-call"),
                Delete(record_id="old-result"),
                Replace(record_id="warranty-result", body="Warranty: 18 months."),
            ),
        )
    )
    diff = diff_snapshots(out.original, out.snapshot)
    entries = diff.split("\n\n")
    assert entries[0] == "Deleted old-call (assistant)\n\u2212 Looking up yesterday's stock."
    assert entries[1].startswith("Deleted old-result (tool)\n\u2212 OUTDATED: price EUR 61.00")
    # only the first line of a multi-line body carries the marker
    assert "\n\u2212 Sweep 0" not in entries[1] and "\nSweep 0:" in entries[1]
    assert entries[2].startswith("Replaced warranty-result (tool)\n\u2212 Corvid kettle warranty")
    assert entries[2].endswith("\n+ Warranty: 18 months.")
    assert len(entries) == 3
    assert diff_snapshots(ctx.original, ctx.snapshot) == ""


def test_instructions_per_phase() -> None:
    snap = kettle_snapshot().model_copy(update={"revision": 7})
    decision_input = ModelInput(context=snap, phase=Phase.EDIT)
    decision = decision_input.instructions
    # The revision trails after the history (cache-aware layout), never in the system text.
    assert "7" not in decision and "Use baseRevision 7." in decision_input.trailing_guidance
    assert "edit_context" in decision and "keep_context" in decision
    summarize = ModelInput(
        context=snap, phase=Phase.EDIT, edit_style=EditStyle.SUMMARIZE
    ).instructions
    assert len(summarize.splitlines()) == len(decision.splitlines()) + 7
    for style in EditStyle:
        for phase in (Phase.COMPLETION, Phase.CHOICE):
            done = ModelInput(context=snap, phase=phase, edit_style=style)
            assert done.instructions == COMPLETION_INSTRUCTIONS


def test_destination_prefers_the_last_unprotected_body_without_calls() -> None:
    assert destination_id(kettle_snapshot()) == "warranty-result"
    only_task = Snapshot(
        scope=SCOPE, records=(Record(id="task", role=Role.USER, protected=True, body="x"),)
    )
    assert destination_id(only_task) == "none"
