"""A long notebook episode under the navigated policy: 16 steps whose history is several times
the window, answered by a scripted model that only uses what its prompts show it.

The scripted navigator is honest: it reads FACT lines from the records it is shown and from
leaves it opened, and chooses what to open from index lines (record numbers and the leaf
descriptions the offline engine wrote). It never looks at the session or the fixture.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

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
    RunReport,
    Scope,
    Snapshot,
    ToolCall,
)
from picocontext.models import ByteCounter, ScriptedBackend
from picocontext.policies import AppendOnlyPolicy, NavigatedPolicy
from picocontext.policies.navigated import NavigatedConfig, NavigatedTurn


def turn_with_info(
    policy: NavigatedPolicy, session: ContextSession, budget: RunBudget
) -> tuple[RunReport, NavigatedTurn | None]:
    """The report and the turn record this turn added (None when it added none)."""
    before = len(policy.turns(session.scope))
    report = policy.turn(session, budget)
    turns = policy.turns(session.scope)
    return report, (turns[-1] if len(turns) > before else None)


SCOPE = Scope(user_id="u-9", conversation_id="notebook-long", branch_id="main")
KEYS = ("amber", "birch", "cobalt", "dune", "ember", "fjord")
STEPS = 16
WINDOW = 16_384
BUDGET = RunBudget(
    context_window=WINDOW,
    total_tokens=400_000,
    edit_output_tokens=256,
    completion_output_tokens=256,
)
LINE = re.compile(r"^(\S+) \[(leaf|branch:\d+)\] (.*)$", re.MULTILINE)
NUMBER = re.compile(r"#(\d+)")
FACT = re.compile(r"^FACT (\w+)=(\S+)$", re.MULTILINE)


def value(step: int) -> str:
    return f"v{step:02d}-{(step * 2654435761) % 65536:04x}"


def changed_key(step: int) -> str:
    return KEYS[step % len(KEYS)]


def asked_key(step: int) -> str:
    """From step 4 on, the key changed three steps earlier (its page is archived by then)."""
    return changed_key(step - 3) if step > 3 else changed_key(step)


def expected(step: int) -> str:
    source = step - 3 if step > 3 else step
    return f"{asked_key(step)}={value(source)}"


def step_records(step: int) -> list[Record]:
    key = changed_key(step)
    noise = "\n".join(
        f"tick {step}.{i:02d}: gauge nominal, checksum {(step * 131 + i * 17) % 65536:04x}, "
        f"drift 0.0{i % 10}"
        for i in range(52)
    )
    return [
        Record(
            id=f"ask-{step}",
            role=Role.USER,
            body=f"Step {step}: log page {step} of the notebook feed, then tell me the current "
            f"value of {asked_key(step)} as key=value.",
        ),
        Record(
            id=f"feed-{step}",
            role=Role.ASSISTANT,
            body=f"Logging page {step}.",
            tool_calls=(
                ToolCall(
                    id=f"call-{step}", name="notebook_feed", arguments=json.dumps({"page": step})
                ),
            ),
        ),
        Record(
            id=f"page-{step}",
            role=Role.TOOL,
            tool_call_id=f"call-{step}",
            body=f"Page {step} rewrites the {key} entry.\nFACT {key}={value(step)}\n{noise}",
        ),
    ]


def start() -> Snapshot:
    return Snapshot(
        scope=SCOPE,
        records=(
            Record(id="rules", role=Role.SYSTEM, body="FACT lines set a key; later lines win."),
            Record(
                id="task",
                role=Role.USER,
                protected=True,
                body="Track the notebook fed by notebook_feed; answer each step as key=value.",
            ),
        ),
    )


def _asked(prompt: PreparedPrompt) -> str:
    """The key the latest user request asks for (read from the prompt's own records)."""
    users = [r for r in prompt.input.context.records if r.role is Role.USER]
    match = re.search(r"current value of (\w+)", users[-1].body)
    assert match is not None
    return match.group(1)


def _calls(prompt: PreparedPrompt, name: str) -> list[str]:
    out: list[str] = []
    for record in prompt.input.control_records:
        for call in record.tool_calls:
            if call.name == name:
                out.append(json.loads(call.arguments)["id"])
    return out


def navigator(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
    """Answer from the shown records if they hold the key; otherwise open index lines newest
    first, open only leaves whose description names the key, close leaves after reading."""
    key = _asked(prompt)
    # the archive index stands in the history where the archive was; its lines are not records
    index = [r for r in prompt.input.context.records if r.body.startswith("ARCHIVE INDEX")]
    shown = [r for r in prompt.input.context.records if r not in index]
    in_view = [v for r in shown for k, v in FACT.findall(r.body) if k == key]
    if in_view:
        return _answer(f"{key}={in_view[-1]}")
    lines: dict[str, tuple[str, str]] = {}
    hits: list[tuple[int, str]] = []
    read: set[str] = set()
    for record in (*index, *prompt.input.control_records):
        for nid, kind, text in LINE.findall(record.body):
            lines.setdefault(nid, (kind, text))
        header = re.search(r"^--- (\S+) \(full\) ---$", record.body, re.MULTILINE)
        if header is not None:
            leaf = header.group(1)
            read.add(leaf)
            number = max(int(n) for n in NUMBER.findall(lines[leaf][1]))
            hits += [(number, v) for k, v in FACT.findall(record.body) if k == key]
    opened = set(_calls(prompt, "open"))

    def newest(text: str) -> int:
        return max((int(n) for n in NUMBER.findall(text)), default=10**9)

    candidates = []
    for nid, (kind, text) in lines.items():
        if nid == "r" or nid in opened:
            continue
        paged = kind != "leaf" and "result of" in text  # a long record split into parts
        if kind == "leaf" and not ("result of" in text and re.search(rf"\b{key}\b", text)):
            continue  # the description says this record does not touch the key
        if paged and re.search(r"\bentry\b", text) and not re.search(rf"\b{key}\b", text):
            continue
        candidates.append((newest(text), nid))
    best = max(hits, default=None)
    done = best is not None and all(n < best[0] for n, _ in candidates)
    if done or not candidates or prompt.input.phase is Phase.COMPLETION:
        return _answer(f"{key}={best[1] if best else 'unknown'}")
    closing = sorted(read - set(_calls(prompt, "close")))
    calls = [ModelToolCall(name="close", arguments=json.dumps({"id": n})) for n in closing]
    calls.append(ModelToolCall(name="open", arguments=json.dumps({"id": max(candidates)[1]})))
    return ModelResponse(tool_calls=tuple(calls), generated_tokens=24)


def _answer(text: str) -> ModelResponse:
    return ModelResponse(text=text, generated_tokens=len(text))


@dataclass
class Episode:
    """What one run of the episode produced (the test checks it; ``python <this file>``
    prints the numbers quoted in docs/policies.md)."""

    answers: list[str] = field(default_factory=list)
    reports: list[RunReport] = field(default_factory=list)
    infos: list[NavigatedTurn] = field(default_factory=list)
    prompts: list[PreparedPrompt] = field(default_factory=list)
    history_tokens: int = 0
    append_only_failure: str | None = None


def run_episode(policy: NavigatedPolicy | None = None) -> Episode:
    backend = ScriptedBackend(navigator)
    session = ContextSession(start(), ByteCounter(), backend)
    # The scripted explorer navigates by itself (no prefetching navigator spends its budget)
    # and opens branch after branch without closing, so it needs the narrower tree and the
    # smaller pages a build checked at the full view gives (see NavigatedConfig.check_view).
    policy = policy or NavigatedPolicy(
        NavigatedConfig(
            tail_share=0.3, nav_share=0.45, max_steps=12, navigator=None, check_view="full"
        )
    )
    episode = Episode()
    for step in range(1, STEPS + 1):
        session.append_records(step_records(step))
        before, original = session.context, session.original_context
        report, info = turn_with_info(policy, session, BUDGET)
        # the working context and the transcript are never modified by a navigated turn
        assert session.context == before == report.run_start == report.revised
        assert session.original_context == original
        assert info is not None
        episode.answers.append(report.answer)
        episode.reports.append(report)
        episode.infos.append(info)
        session.append_records(
            [Record(id=f"answer-{step}", role=Role.ASSISTANT, body=report.answer or "?")]
        )
    episode.prompts = list(backend.prompts)
    whole = ByteCounter().prepare(ModelInput(context=session.context, phase=Phase.COMPLETION))
    episode.history_tokens = whole.token_count
    episode.append_only_failure = AppendOnlyPolicy().turn(session, BUDGET).failure
    return episode


def test_sixteen_steps_beyond_the_window_are_answered_by_navigation() -> None:
    episode = run_episode()
    for step, report in enumerate(episode.reports, start=1):
        assert report.failure is None, (step, report.failure)
        assert report.answer == expected(step), (step, report.answer, report.tool_steps)
        if step > 3:
            # the asked value is only in the archive: the first prompt does not show it,
            # and the answer came from a leaf the model opened
            assert expected(step).split("=")[1] not in report.calls[0].rendered
            assert any(t.name == "open" and t.ok for t in report.tool_steps), step
            assert expected(step).split("=")[1] in report.final_prompt.rendered  # type: ignore[union-attr]
    # every prompt of the episode stayed within the window, output allowance included
    assert len(episode.prompts) > STEPS * 2
    assert max(p.token_count for p in episode.prompts) <= WINDOW - 256
    assert episode.history_tokens > 3 * WINDOW  # the history exceeds the window 3x over
    # later turns reuse the previous compile instead of starting over
    modes = [i.compiled for i in episode.infos]
    assert modes[0] == "none" and "incremental" in modes[4:]
    # the same history under append-only cannot even be sent
    failure = episode.append_only_failure
    assert failure is not None and "context window" in failure


def test_a_model_that_does_not_navigate_cannot_answer_from_the_view() -> None:
    """Control: answering from the visible records alone fails once the fact is archived."""

    def lazy(prompt: PreparedPrompt, max_tokens: int) -> ModelResponse:
        reply = navigator(prompt, max_tokens)
        return reply if not reply.tool_calls else _answer("unknown")

    session = ContextSession(start(), ByteCounter(), ScriptedBackend(lazy))
    policy = NavigatedPolicy(
        NavigatedConfig(tail_share=0.3, nav_share=0.45, max_steps=12, navigator=None)
    )
    right = 0
    for step in range(1, 9):
        session.append_records(step_records(step))
        right += policy.turn(session, BUDGET).answer == expected(step)
    assert right == 3  # only the first three steps, whose fact is still in view


def _summary(episode: Episode) -> dict[str, object]:
    opens = [sum(t.name == "open" for t in r.tool_steps) for r in episode.reports]
    return {
        "window_bytes": WINDOW,
        "history_bytes_at_end": episode.history_tokens,
        "history_over_window": round(episode.history_tokens / WINDOW, 2),
        "correct": sum(a == expected(i) for i, a in enumerate(episode.answers, start=1)),
        "turns": STEPS,
        "max_prompt_bytes": max(p.token_count for p in episode.prompts),
        "model_calls": len(episode.prompts),
        "opens_per_turn": opens,
        "compile_modes": [i.compiled for i in episode.infos],
        "compile_seconds_total": round(sum(i.compile_seconds for i in episode.infos), 3),
        "total_input_bytes": sum(r.total_input_tokens for r in episode.reports),
        "append_only_failure": episode.append_only_failure,
    }


if __name__ == "__main__":
    print(json.dumps(_summary(run_episode()), indent=1))
