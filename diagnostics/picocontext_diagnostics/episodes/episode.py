"""Notebook episodes: the fixed fixtures and seeded generated streams, both oracle-checked.

An episode is an initial snapshot (protected instructions and task) plus steps. Each step
delivers three caller records as one append — an assistant call to the feed tool, its tool
result (operation lines followed by sensor noise) and a protected user request naming the keys
to report — and says which notebook must be live afterwards.

Generated episodes come from a SplitMix64 stream, so a seed fully determines them on every
platform; facts and noise use separate streams, so changing the amount of noise never changes
the facts. Before an episode is returned, :func:`check_oracle` replays every arrival through
the notebook fold and requires agreement with each step's expected state.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from picocontext import (
    PicoContextError,
    Record,
    Role,
    Scope,
    Snapshot,
    ToolCall,
    validate_snapshot,
)
from picocontext_diagnostics.episodes.fixtures import (
    MAX_NOISE_LINES,
    NotebookTexts,
    Scenario,
    dumps_sorted,
    episode_fixture,
    notebook_texts,
)
from picocontext_diagnostics.episodes.grading import (
    ContextCheck,
    facts_answer_schema,
    fold_lines,
    notebook_state,
)
from picocontext_diagnostics.errors import InvalidEpisode

MAX_STEPS = 32
GENERATED_SLOTS = 8
REMOVAL_PERIOD = 5
NOISE_STREAM_XOR = 0xD1B54A32D192ED03
_MASK64 = (1 << 64) - 1

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Step(BaseModel):
    """One caller turn: records to append, the notebook that must be live, the answer id."""

    model_config = _FROZEN
    id: str
    records: tuple[Record, ...]
    expected_facts: dict[str, str]
    # None: a one-turn task whose answer is not appended (nothing follows it).
    answer_record_id: str | None

    @property
    def answer_schema_json(self) -> str:
        """The schema of the answer shape this step's request shows (its expected keys)."""
        return dumps_sorted(facts_answer_schema(self.expected_facts))


class Episode(BaseModel):
    """A sequence of steps over one initial snapshot, graded by ``check``."""

    model_config = _FROZEN
    title: str
    scenario: Scenario | None = None
    check: ContextCheck
    initial: Snapshot
    steps: tuple[Step, ...] = Field(min_length=1)
    seed: int | None = None
    noise_lines: int = 0
    # Lower-case terms a correct answer must not contain (superseded values).
    forbidden_terms: tuple[str, ...] = ()

    @property
    def incoming_records(self) -> tuple[Record, ...]:
        """Every caller record the steps deliver (answers excluded)."""
        return tuple(r for step in self.steps for r in step.records)

    def environment(self) -> Snapshot:
        """Initial records plus all incoming records: the history an append-only policy would
        finally face, without answers. Used for the pressure proxy, never dispatched."""
        return Snapshot(
            scope=self.initial.scope,
            revision=self.initial.revision,
            records=self.initial.records + self.incoming_records,
        )


class SplitMix64:
    """The SplitMix64 generator (Steele, Lea & Flood 2014): tiny, fast, identical everywhere."""

    __slots__ = ("state",)

    def __init__(self, seed: int) -> None:
        self.state = seed & _MASK64

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)


def _check_noise(noise_lines: int) -> None:
    if not 0 <= noise_lines <= MAX_NOISE_LINES:
        raise InvalidEpisode(f"noise_lines must be 0...{MAX_NOISE_LINES}, got {noise_lines}")


def initial_snapshot(scope: Scope, texts: NotebookTexts | None = None) -> Snapshot:
    """Protected instructions and task: the start of every notebook episode."""
    texts = texts or notebook_texts()
    return Snapshot(
        scope=scope,
        revision=0,
        records=(
            Record(id="instructions", role=Role.SYSTEM, body="\n".join(texts.instructions)),
            Record(id="task", role=Role.USER, body=texts.task, protected=True),
        ),
    )


def request_shape(keys: list[str] | tuple[str, ...], placeholder: str) -> str:
    """Compact sorted-key JSON of the answer shape with a placeholder for every value."""
    return dumps_sorted({"facts": {key: placeholder for key in sorted(keys)}})


def step_records(
    index: int,
    operations: list[str] | tuple[str, ...],
    noise: list[str],
    request: str,
    tool: str,
    protect_request: bool = True,
) -> tuple[Record, ...]:
    """The three records of step ``index`` (1-based): feed call, feed result, request
    (protected unless ``protect_request`` is false)."""
    step_id = f"step-{index}"
    call_id = f"{step_id}-feed"
    body = "\n".join([*operations, *noise])
    return (
        Record(
            id=f"{step_id}-call",
            role=Role.ASSISTANT,
            tool_calls=(ToolCall(id=call_id, name=tool, arguments=dumps_sorted({"step": index})),),
        ),
        Record(id=f"{step_id}-data", role=Role.TOOL, body=body, tool_call_id=call_id),
        Record(id=f"{step_id}-request", role=Role.USER, body=request, protected=protect_request),
    )


def fixture_episode(
    scenario: Scenario, scope: Scope | None = None, noise_lines: int | None = None
) -> Episode:
    """The fixed four-step episode of ``scenario`` (``noise_lines`` default from the texts;
    use :func:`~picocontext_diagnostics.episodes.fixtures.pressure_profile` for the pressure
    amount)."""
    texts = notebook_texts()
    spec = episode_fixture(scenario)
    if noise_lines is None:
        noise_lines = texts.default_noise_lines if spec.noise_lines is None else spec.noise_lines
    lines = noise_lines
    _check_noise(lines)
    steps: list[Step] = []
    for index, step in enumerate(spec.steps, start=1):
        noise = [
            texts.noise_template.replace("{step}", str(index)).replace("{tick}", str(t))
            for t in range(lines)
        ]
        shape = request_shape(list(step.expected), texts.value_placeholder)
        request = texts.request_template.replace("{shape}", shape)
        steps.append(
            Step(
                id=f"step-{index}",
                records=step_records(index, step.operations, noise, request, texts.feed_tool),
                expected_facts=dict(step.expected),
                answer_record_id=f"step-{index}-answer",
            )
        )
    episode = Episode(
        title=spec.title,
        scenario=scenario,
        check=spec.check,
        initial=initial_snapshot(scope or spec.scope, texts),
        steps=tuple(steps),
        noise_lines=lines,
    )
    return check_oracle(episode)


def generated_operations(scenario: Scenario, seed: int, step_count: int) -> list[list[str]]:
    """The operation lines of each generated step (facts stream only, noise-independent)."""
    texts = notebook_texts().generated
    rng = SplitMix64(seed)
    out: list[list[str]] = []
    for i in range(step_count):
        key = texts.key_template.replace("{slot}", str(i % GENERATED_SLOTS))
        if scenario is Scenario.STATE_UPDATES and i % REMOVAL_PERIOD == REMOVAL_PERIOD - 1:
            previous = texts.key_template.replace("{slot}", str((i - 1) % GENERATED_SLOTS))
            out.append([f"REMOVE {key}", f"REMOVE {previous}"])
        elif scenario is Scenario.STATE_UPDATES or i < GENERATED_SLOTS:
            value = texts.value_template.replace("{hex}", format(rng.next() >> 32, "08x"))
            out.append([f"FACT {key}={value}"])
        else:
            out.append([])
    return out


def generated_episode(
    scenario: Scenario,
    seed: int,
    step_count: int = 4,
    noise_lines: int = 12,
    scope: Scope | None = None,
    protect_requests: bool = True,
) -> Episode:
    """A seeded episode of 1...32 steps.

    ``protect_requests=False`` leaves each step's request unprotected, as in a long chat where
    only the newest request matters: a policy may then drop or archive answered requests,
    which the long-history task needs (protected requests alone would outgrow a small window).

    Slots ``cell0``…``cell7`` are assigned in turn; state updates overwrite them forever and
    every fifth step removes the current and the previous slot, while retention stops assigning
    after eight steps (later steps are noise only, so the test is pure retention).
    """
    if not (1 <= step_count <= MAX_STEPS) or not (0 <= noise_lines <= MAX_NOISE_LINES):
        raise InvalidEpisode(
            f"a generated episode needs 1...{MAX_STEPS} steps and 0...{MAX_NOISE_LINES} "
            f"noise lines (got {step_count} steps, {noise_lines} noise lines)"
        )
    if not 0 <= seed <= _MASK64:
        raise InvalidEpisode(f"seed must be 0...2^64-1, got {seed}")
    texts = notebook_texts()
    gen = texts.generated
    noise_rng = SplitMix64(seed ^ NOISE_STREAM_XOR)
    state: dict[str, str] = {}
    steps: list[Step] = []
    for i, operations in enumerate(generated_operations(scenario, seed, step_count)):
        index = i + 1
        fold_lines(operations, state)
        noise = [
            gen.noise_template.replace("{step}", str(index))
            .replace("{tick}", str(t))
            .replace("{hex}", format(noise_rng.next() & 0xFFFFFF, "06x"))
            for t in range(noise_lines)
        ]
        shape = request_shape(list(state), texts.value_placeholder)
        request = gen.request_template.replace("{shape}", shape)
        steps.append(
            Step(
                id=f"step-{index}",
                records=step_records(
                    index, operations, noise, request, texts.feed_tool, protect_requests
                ),
                expected_facts=dict(state),
                answer_record_id=f"step-{index}-answer",
            )
        )
    scope = scope or Scope(
        user_id="diagnostics-user", conversation_id=f"{scenario.value}-{seed}", branch_id="main"
    )
    episode = Episode(
        title=f"{scenario.label}, seed {seed}",
        scenario=scenario,
        check=scenario.check,
        initial=initial_snapshot(scope, texts),
        steps=tuple(steps),
        seed=seed,
        noise_lines=noise_lines,
    )
    return check_oracle(episode)


def check_oracle(episode: Episode) -> Episode:
    """Replay every arrival through the fold; each step's expected state must agree and every
    prefix must be a valid snapshot. Returns the episode unchanged, or raises."""
    records = list(episode.initial.records)
    if notebook_state(records):
        raise InvalidEpisode("the initial records already change the notebook")
    for step in episode.steps:
        records.extend(step.records)
        if notebook_state(records) != step.expected_facts:
            raise InvalidEpisode(
                f"notebook oracle disagrees with the operation stream at {step.id}"
            )
    try:
        validate_snapshot(episode.environment())
    except PicoContextError as exc:
        raise InvalidEpisode(f"episode records do not form a valid history: {exc}") from None
    return episode
