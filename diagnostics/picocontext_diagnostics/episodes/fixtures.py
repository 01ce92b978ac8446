"""Fixture files under ``resources/fixtures/``: pydantic schemas, loading, and the order lookup.

Fixtures are data, not Python literals, so a reviewer can read and change a task without
touching code; every file is validated on load (schema, ids, the snapshot rules of the core, and
for episodes the notebook oracle) and a broken file fails loudly with its path.

The *order lookup* is a single-turn task: an outdated stock check is followed by a newer one,
and the answer check is mechanical (all current values present, the stale price absent). The
playground and the core's tests use it through :func:`order_lookup`.
"""

from __future__ import annotations

import functools
import json
import os
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from picocontext import (
    PicoContextError,
    Record,
    Role,
    Scope,
    Snapshot,
    ToolCall,
    read_bounded,
    validate_snapshot,
)
from picocontext_diagnostics.episodes.grading import ContextCheck, fold_lines
from picocontext_diagnostics.errors import FixtureError

FIXTURES_ENV = "PICOCONTEXT_FIXTURES"
MAX_NOISE_LINES = 128

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_OPERATION = re.compile(r"^(FACT [^=\n]+=[^\n]*|REMOVE [^\n]+)$")

Model = TypeVar("Model", bound=BaseModel)


def fixtures_dir() -> Path:
    """Where fixture files live: ``$PICOCONTEXT_FIXTURES`` if set, else ``resources/fixtures``
    inside this package or next to it (a source checkout or an editable install)."""
    override = os.environ.get(FIXTURES_ENV)
    if override:
        path = Path(override)
        if not path.is_dir():
            raise FixtureError(f"{FIXTURES_ENV}={override} is not a directory")
        return path
    package = Path(__file__).resolve().parents[1]
    # Package data (a wheel ships resources/ inside the package), else the checkout root
    # (diagnostics/picocontext_diagnostics → the repository).
    for base in (package, package.parents[1]):
        candidate = base / "resources" / "fixtures"
        if candidate.is_dir():
            return candidate
    raise FixtureError(
        "cannot find resources/fixtures next to picocontext_diagnostics; "
        f"set {FIXTURES_ENV} to the fixtures folder"
    )


def load_json_model(model: type[Model], path: Path, max_bytes: int = 1_000_000) -> Model:
    """Read ``path`` (at most ``max_bytes``) and validate it as ``model``; errors name the file."""
    try:
        raw = read_bounded(path, max_bytes)
    except PicoContextError as exc:  # missing, not a regular file, over the limit
        raise FixtureError(f"cannot read {exc.message}") from None
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise FixtureError(f"{path}: {describe_validation_error(exc)}") from None


def describe_validation_error(exc: ValidationError) -> str:
    """pydantic errors as one readable line per problem: ``field.path: message``."""
    lines = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"]) or "(top level)"
        lines.append(f"{where}: {error['msg']}")
    return "; ".join(lines)


@functools.cache
def _load_cached(name: str, model: type[BaseModel], folder: str) -> BaseModel:
    return load_json_model(model, Path(folder) / name)


def load_fixture(name: str, model: type[Model]) -> Model:
    """Load and validate ``name`` from :func:`fixtures_dir` (cached per folder)."""
    loaded = _load_cached(name, model, str(fixtures_dir()))
    assert isinstance(loaded, model)
    return loaded


# -- shared notebook texts --------------------------------------------------------------------


class GeneratedTexts(BaseModel):
    model_config = _FROZEN
    request_template: str
    noise_template: str
    key_template: str
    value_template: str

    @model_validator(mode="after")
    def _placeholders(self) -> GeneratedTexts:
        _need(self.request_template, "{shape}")
        _need(self.noise_template, "{step}", "{tick}", "{hex}")
        _need(self.key_template, "{slot}")
        _need(self.value_template, "{hex}")
        return self


class NotebookTexts(BaseModel):
    """Instructions, task, request and noise texts shared by every notebook episode."""

    model_config = _FROZEN
    schema_version: Literal[1]
    kind: Literal["notebook_texts"]
    instructions: tuple[str, ...] = Field(min_length=1)
    task: str = Field(min_length=1)
    feed_tool: str = Field(min_length=1)
    value_placeholder: str = Field(min_length=1)
    request_template: str
    noise_template: str
    default_noise_lines: int = Field(ge=0, le=MAX_NOISE_LINES)
    generated: GeneratedTexts

    @model_validator(mode="after")
    def _texts_are_inert(self) -> NotebookTexts:
        _need(self.request_template, "{shape}")
        _need(self.noise_template, "{step}", "{tick}")
        # The texts surround the notebook; they must never add entries to it themselves.
        texts = [
            *self.instructions,
            self.task,
            self.request_template,
            self.noise_template,
            self.generated.request_template,
            self.generated.noise_template,
        ]
        for text in texts:
            if fold_lines(text.split("\n")):
                raise ValueError(f"text would change the notebook: {text[:60]!r}")
        return self


def _need(text: str, *placeholders: str) -> None:
    for placeholder in placeholders:
        if placeholder not in text:
            raise ValueError(f"template {text[:50]!r} lacks {placeholder}")


def notebook_texts() -> NotebookTexts:
    return load_fixture("notebook.json", NotebookTexts)


# -- episode fixtures -------------------------------------------------------------------------


class Scenario(StrEnum):
    """The notebook scenarios."""

    RETENTION = "retention"
    STATE_UPDATES = "state_updates"
    # Values that keep changing under enough telemetry that the whole history outgrows the
    # window before the last step: keeping everything must fail, and what is out of date
    # (each earlier value of a key) is what a managing policy can let go. The main job.
    REVISIONS = "revisions"

    @property
    def check(self) -> ContextCheck:
        """Retention asks whether exact values survive; the others ask for the exact fold."""
        if self is Scenario.RETENTION:
            return ContextCheck.EXACT_VALUES
        return ContextCheck.NOTEBOOK_STATE

    @property
    def fixture_file(self) -> str:
        return {
            Scenario.RETENTION: "exact_retention.json",
            Scenario.STATE_UPDATES: "state_updates.json",
            Scenario.REVISIONS: "revisions.json",
        }[self]

    @property
    def label(self) -> str:
        return {
            Scenario.RETENTION: "Exact retention",
            Scenario.STATE_UPDATES: "State updates",
            Scenario.REVISIONS: "Revised values",
        }[self]


Operation = Annotated[str, Field(pattern=_OPERATION.pattern)]


class EpisodeStepSpec(BaseModel):
    model_config = _FROZEN
    operations: tuple[Operation, ...] = ()
    expected: dict[str, str]


class EpisodeFixture(BaseModel):
    """A fixed sequence of notebook operations with the expected notebook after each step."""

    model_config = _FROZEN
    schema_version: Literal[1]
    kind: Literal["notebook_episode"]
    scenario: Scenario
    title: str = Field(min_length=1)
    check: ContextCheck
    scope: Scope
    steps: tuple[EpisodeStepSpec, ...] = Field(min_length=1, max_length=32)
    # Telemetry lines per update when the episode needs its own amount (the window must be
    # outgrown); ``None`` means the notebook texts' default.
    noise_lines: int | None = Field(default=None, ge=0, le=MAX_NOISE_LINES)

    @model_validator(mode="after")
    def _expected_follows_operations(self) -> EpisodeFixture:
        if self.check is not self.scenario.check:
            raise ValueError(f"scenario {self.scenario.value} is graded by {self.scenario.check}")
        state: dict[str, str] = {}
        for index, step in enumerate(self.steps, start=1):
            fold_lines(step.operations, state)
            if state != step.expected:
                raise ValueError(f"step {index}: expected facts disagree with the operations")
        return self


def episode_fixture(scenario: Scenario) -> EpisodeFixture:
    return load_fixture(scenario.fixture_file, EpisodeFixture)


class NoiseProfile(BaseModel):
    model_config = _FROZEN
    schema_version: Literal[1]
    kind: Literal["noise_profile"]
    name: str = Field(min_length=1)
    noise_lines: int = Field(ge=0, le=MAX_NOISE_LINES)
    purpose: str = ""


def pressure_profile() -> NoiseProfile:
    return load_fixture("pressure.json", NoiseProfile)


# -- the order lookup -------------------------------------------------------------------------


class OrderFacts(BaseModel):
    """The four facts the order lookup asks for, as the exact strings in the tool results."""

    model_config = _FROZEN
    sku: str = Field(min_length=1)
    price_usd: str = Field(min_length=1)
    warranty_months: str = Field(min_length=1)
    quantity: str = Field(min_length=1)

    def values(self) -> tuple[str, ...]:
        return (self.sku, self.price_usd, self.warranty_months, self.quantity)


class StaleFacts(BaseModel):
    model_config = _FROZEN
    price_usd: str = Field(min_length=1)
    quantity: str = Field(min_length=1)


class NoiseSpec(BaseModel):
    model_config = _FROZEN
    template: str
    count: int = Field(ge=0, le=MAX_NOISE_LINES)

    @field_validator("template")
    @classmethod
    def _has_counter(cls, value: str) -> str:
        _need(value, "{n}")
        return value

    def lines(self) -> tuple[str, ...]:
        return tuple(self.template.replace("{n}", str(n)) for n in range(1, self.count + 1))


class RecordSpec(BaseModel):
    model_config = _FROZEN
    id: str
    role: Role
    body: str = ""
    protected: bool = False
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    append_noise: bool = False


class OrderLookupFixture(BaseModel):
    model_config = _FROZEN
    schema_version: Literal[1]
    kind: Literal["order_lookup"]
    title: str
    scope: Scope
    noise: NoiseSpec
    records: tuple[RecordSpec, ...] = Field(min_length=2)
    expected: OrderFacts
    stale: StaleFacts
    stale_record_ids: tuple[str, ...] = Field(min_length=1)
    fact_record_ids: tuple[str, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _facts_are_where_they_claim(self) -> OrderLookupFixture:
        bodies = {r.id: r.body for r in self.records}
        for rid in (*self.stale_record_ids, *self.fact_record_ids):
            if rid not in bodies:
                raise ValueError(f"unknown record id {rid}")
        fact_text = "\n".join(bodies[r] for r in self.fact_record_ids)
        for value in self.expected.values():
            if value not in fact_text:
                raise ValueError(f"expected value {value} is not in the fact records")
        stale_text = "\n".join(bodies[r] for r in self.stale_record_ids)
        if self.stale.price_usd not in stale_text:
            raise ValueError("the stale price is not in the stale records")
        if self.stale.price_usd in fact_text or any(
            self.stale.price_usd in v for v in self.expected.values()
        ):
            raise ValueError("the stale price must not appear in current facts")
        return self


class OrderLookup(BaseModel):
    """The order-lookup task ready to run: snapshot, expected facts and the answer check."""

    model_config = _FROZEN
    title: str
    snapshot: Snapshot
    expected: OrderFacts
    stale: StaleFacts
    noise_lines: tuple[str, ...]
    stale_record_ids: tuple[str, ...]
    fact_record_ids: tuple[str, ...]

    @property
    def scope(self) -> Scope:
        return self.snapshot.scope

    @property
    def required_terms(self) -> tuple[str, ...]:
        """Lower-case substrings a correct answer must contain."""
        return tuple(v.lower() for v in self.expected.values())

    @property
    def forbidden_terms(self) -> tuple[str, ...]:
        """Lower-case substrings a correct answer must not contain (the superseded price)."""
        return (self.stale.price_usd.lower(),)

    def answer_is_correct(self, answer: str) -> bool:
        """A mechanical substring check, not a semantic judge: every current value is present
        (case-insensitive) and the superseded price is absent."""
        text = answer.lower()
        return all(t in text for t in self.required_terms) and not any(
            t in text for t in self.forbidden_terms
        )

    def facts_live(self, context: Snapshot) -> bool:
        """Whether every current value still appears in some live record body of ``context``."""
        bodies = "\n".join(r.body for r in context.records)
        return all(v in bodies for v in self.expected.values())

    def correct_answer(self) -> str:
        """One answer that passes the check (for scripted backends and demos)."""
        e = self.expected
        return (
            f"SKU {e.sku}; price USD {e.price_usd}; warranty {e.warranty_months} months; "
            f"quantity {e.quantity}."
        )


def order_lookup(scope: Scope | None = None) -> OrderLookup:
    """The order-lookup task from ``order_lookup.json`` (optionally under another scope)."""
    spec = load_fixture("order_lookup.json", OrderLookupFixture)
    noise = spec.noise.lines()
    records: list[Record] = []
    for r in spec.records:
        body = r.body + ("\n" + "\n".join(noise) if r.append_noise and noise else "")
        records.append(
            Record(
                id=r.id,
                role=r.role,
                body=body,
                protected=r.protected,
                tool_calls=r.tool_calls,
                tool_call_id=r.tool_call_id,
            )
        )
    snapshot = Snapshot(scope=scope or spec.scope, revision=0, records=tuple(records))
    _validated(snapshot, "order_lookup.json")
    return OrderLookup(
        title=spec.title,
        snapshot=snapshot,
        expected=spec.expected,
        stale=spec.stale,
        noise_lines=noise,
        stale_record_ids=spec.stale_record_ids,
        fact_record_ids=spec.fact_record_ids,
    )


def _validated(snapshot: Snapshot, source: str) -> Snapshot:
    try:
        validate_snapshot(snapshot)
    except PicoContextError as exc:
        raise FixtureError(f"{source}: the records do not form a valid snapshot: {exc}") from None
    return snapshot


def dumps_sorted(value: object) -> str:
    """Compact sorted-key JSON, unescaped non-ASCII: the form shapes and answers use."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
