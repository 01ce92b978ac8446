"""A long notebook episode under the distilled policy: 16 steps of updates whose history is
several windows long, answered by a scripted reader that must recall older updates."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from picocontext import (
    ContextSession,
    ModelInput,
    ModelResponse,
    ModelToolCall,
    Phase,
    PreparedPrompt,
    Record,
    Role,
    RunBudget,
)
from picocontext.distill.testing import FakeSummarizer
from picocontext.models import ByteCounter, ScriptedBackend
from picocontext.policies import AppendOnlyPolicy, DistilledPolicy
from picocontext.policies.distilled import DistilledConfig
from picocontext_diagnostics.episodes.episode import Episode, generated_episode
from picocontext_diagnostics.episodes.fixtures import Scenario, dumps_sorted
from picocontext_diagnostics.episodes.grading import fold_lines, notebook_state

WINDOW = 24_000
BUDGET = RunBudget(
    context_window=WINDOW,
    total_tokens=400_000,
    edit_output_tokens=600,
    completion_output_tokens=600,
)
SETTINGS = DistilledConfig(tail_share=0.15, map_share=0.08, max_steps=3, leaf_words=60)
RECALL_WORDS = 130
_ITEM = re.compile(r"^--- older group (\d+)(?:, part (\d+)/\d+)? \((\S+)\)$")


def requested_keys(prompt: PreparedPrompt) -> list[str]:
    """Keys named by the latest request's answer shape."""
    request = [r for r in prompt.input.context.records if r.role is Role.USER][-1].body
    start = request.index('{"facts"')
    shape, _ = json.JSONDecoder().raw_decode(request, start)
    return sorted(shape["facts"])


def recalled(prompt: PreparedPrompt) -> list[tuple[int, int, str, str]]:
    """(group, part, node id, text) of every older record recalled so far."""
    out: dict[str, tuple[int, int, str, str]] = {}
    for record in prompt.input.control_records:
        if record.role is not Role.TOOL:
            continue
        current: tuple[int, int, str] | None = None
        lines: list[str] = []
        for line in [*record.body.split("\n"), "--- end"]:
            match = _ITEM.match(line)
            if match or line == "--- end" or line.startswith("--- digest"):
                if current is not None:
                    out[current[2]] = (*current, "\n".join(lines))
                current = None
                lines = []
                if match:
                    current = (int(match.group(1)), int(match.group(2) or 1), match.group(3))
                continue
            if current is not None:
                lines.append(line)
    return sorted(out.values())


def reader(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
    """A careful reader: recall each requested key the visible records do not settle, then
    fold the recalled older records (oldest first) and the visible ones, and answer."""
    keys = requested_keys(prompt)
    visible = notebook_state(prompt.input.context)
    has_results = any(r.role is Role.TOOL for r in prompt.input.control_records)
    missing = [k for k in keys if k not in visible]
    if prompt.input.phase is Phase.TOOLS and missing and not has_results:
        calls = tuple(
            ModelToolCall(
                name="recall",
                arguments=json.dumps(
                    {"query": f"FACT {k}", "altitude": "entity", "budget": RECALL_WORDS}
                ),
            )
            for k in missing
        )
        return ModelResponse(tool_calls=calls, generated_tokens=40 * len(calls))
    state: dict[str, str] = {}
    for _, _, _, text in recalled(prompt):
        fold_lines(text.split("\n"), state)
    for record in prompt.input.context.records:
        fold_lines(record.body.split("\n"), state)
    answer = dumps_sorted({"facts": {k: state.get(k, "?") for k in keys}})
    return ModelResponse(text=answer, generated_tokens=len(answer.encode()))


def run_episode(
    episode: Episode, policy: DistilledPolicy | AppendOnlyPolicy, backend: ScriptedBackend
) -> tuple[ContextSession, list[str | None], list[bool]]:
    session = ContextSession(episode.initial, ByteCounter(), backend)
    failures: list[str | None] = []
    correct: list[bool] = []
    for step in episode.steps:
        session.append_records(step.records)
        before = session.state
        report = policy.turn(session, BUDGET)
        # the turn never changes the working context or the transcript
        assert session.state == before
        assert report.revised == report.run_start == before.snapshot
        failures.append(report.failure)
        try:
            facts = json.loads(report.answer)["facts"]
        except (ValueError, KeyError, TypeError):
            facts = None
        correct.append(facts == step.expected_facts)
        session.append_records(
            [Record(id=f"{step.id}-answer", role=Role.ASSISTANT, body=report.answer)]
        )
    return session, failures, correct


@pytest.fixture(scope="module", params=[7, 11])
def episode(request: pytest.FixtureRequest) -> Episode:
    seed: int = request.param
    return generated_episode(Scenario.STATE_UPDATES, seed=seed, step_count=16, noise_lines=80)


def test_history_exceeds_the_window_several_times(episode: Episode) -> None:
    counter = ByteCounter()
    full = counter.prepare(ModelInput(context=episode.environment(), phase=Phase.COMPLETION))
    assert full.token_count >= 3 * WINDOW


def test_long_episode_every_answer_right_every_prompt_inside_the_window(
    episode: Episode, tmp_path: Path
) -> None:
    backend = ScriptedBackend(reader)
    summarizer = FakeSummarizer()
    with DistilledPolicy(summarizer, corpus_dir=tmp_path, config=SETTINGS) as policy:
        session, failures, correct = run_episode(episode, policy, backend)
        turns = policy.turns(session.scope)
    assert failures == [None] * 16
    assert correct == [True] * 16
    for prompt, cap in zip(backend.prompts, backend.max_tokens, strict=True):
        assert prompt.token_count <= WINDOW - cap
    # the model really had to recall: most turns fetched older records
    recalled_turns = {
        p.input.context.records[-1].id
        for p in backend.prompts
        if any(r.role is Role.TOOL for r in p.input.control_records)
    }
    assert len(recalled_turns) >= 12
    # incremental: across the episode every leaf was summarised exactly once
    assert sum(t.leaf_summaries for t in turns) == turns[-1].leaves
    assert all(t.leaf_summaries == t.new_leaves > 0 for t in turns)
    # and the digests above them: the last turn's work is a small fraction of the tree
    assert 4 * turns[-1].summarizer_calls < turns[-1].leaves
    # at the end most of the history lives only in the tree
    assert turns[-1].visible_records < len(session.context.records) / 2


def test_append_only_cannot_hold_the_same_episode(episode: Episode) -> None:
    backend = ScriptedBackend(reader)
    _, failures, correct = run_episode(episode, AppendOnlyPolicy(), backend)
    assert any(f is not None and "context window" in f for f in failures)
    assert not all(correct)


def main() -> None:
    """Print the numbers quoted in docs/policies.md (run this file with Python)."""
    import time

    counter = ByteCounter()
    for seed in (7, 11):
        episode = generated_episode(
            Scenario.STATE_UPDATES, seed=seed, step_count=16, noise_lines=80
        )
        full = counter.prepare(ModelInput(context=episode.environment(), phase=Phase.COMPLETION))
        backend = ScriptedBackend(reader)
        started = time.perf_counter()
        with DistilledPolicy(FakeSummarizer(), config=SETTINGS) as policy:
            session, failures, correct = run_episode(episode, policy, backend)
            turns = policy.turns(session.scope)
        seconds = time.perf_counter() - started
        rebuild = FakeSummarizer()
        with DistilledPolicy(rebuild, config=SETTINGS) as fresh:
            fresh.turn(ContextSession(session.context, counter, ScriptedBackend(reader)), BUDGET)
        _, only_failures, only_correct = run_episode(
            episode, AppendOnlyPolicy(), ScriptedBackend(reader)
        )
        calls = [t.summarizer_calls for t in turns]
        print(f"seed {seed}")
        print(f"  history at the end: {full.token_count} bytes = {full.token_count / WINDOW:.2f}x")
        failed = sum(f is not None for f in failures)
        print(f"  correct answers: {sum(correct)}/16, failures: {failed}")
        print(f"  largest prompt: {max(p.token_count for p in backend.prompts)} (window {WINDOW})")
        print(
            f"  leaves at the end: {turns[-1].leaves}; new leaves per turn: "
            f"{min(t.new_leaves for t in turns)}-{max(t.new_leaves for t in turns)}"
        )
        print(
            f"  summarizer calls per turn: {min(calls)}-{max(calls)}, total {sum(calls)}; "
            f"rebuilding the final tree from scratch: {rebuild.calls}"
        )
        print(
            f"  distillation seconds, all turns: {sum(t.distill_seconds for t in turns):.2f}; "
            f"episode wall time {seconds:.2f} s"
        )
        print(
            f"  append-only: {sum(only_correct)}/16 correct, "
            f"{sum(f is not None for f in only_failures)} window failures"
        )


if __name__ == "__main__":
    main()
