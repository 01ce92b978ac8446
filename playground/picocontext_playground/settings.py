"""What a comparison run is asked to do: task, pressure, policies, model and decoding options.

These are plain data (frozen pydantic models) so the window, the headless smoke mode and the
tests build the same request, and a report can print exactly what was run.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from picocontext_diagnostics import BUILTIN_POLICIES, Scenario
from picocontext_playground.errors import SetupError

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Task(StrEnum):
    """The three tasks of the playground. The values are the command-line spellings."""

    ORDER_LOOKUP = "order-lookup"
    RETENTION = "retention"
    STATE_UPDATES = "state-updates"

    @property
    def label(self) -> str:
        return {
            Task.ORDER_LOOKUP: "Order lookup",
            Task.RETENTION: "Exact retention",
            Task.STATE_UPDATES: "State updates",
        }[self]

    @property
    def scenario(self) -> Scenario | None:
        """The notebook scenario behind a sequential task (``None`` for the order lookup)."""
        if self is Task.RETENTION:
            return Scenario.RETENTION
        if self is Task.STATE_UPDATES:
            return Scenario.STATE_UPDATES
        return None

    @property
    def sequential(self) -> bool:
        return self is not Task.ORDER_LOOKUP

    @classmethod
    def parse(cls, text: str) -> Task:
        """Accept the CLI spelling plus the reference's camel-case ``stateUpdates``."""
        norm = text.strip().lower().replace("_", "-")
        aliases = {"stateupdates": "state-updates", "lamp": "order-lookup", "order": "order-lookup"}
        norm = aliases.get(norm, norm)
        for task in cls:
            if task.value == norm:
                return task
        known = ", ".join(t.value for t in cls)
        raise SetupError(f"unknown task {text!r}; choose one of {known}")


class ModelChoice(StrEnum):
    """Where the model comes from. ``scripted`` is the deterministic rule-based stand-in (byte
    counts, no weights) used by tests and for instant demos."""

    SCRIPTED = "scripted"
    QWEN3 = "qwen3-1.7b-4bit"
    QWEN25_05 = "qwen2.5-coder-0.5b"
    QWEN25_15 = "qwen2.5-coder-1.5b"
    SMOLLM2 = "smollm2-135m"
    DIRECTORY = "directory"

    @property
    def label(self) -> str:
        return {
            ModelChoice.SCRIPTED: "Scripted (deterministic, no model)",
            ModelChoice.QWEN3: "Qwen3-1.7B-4bit (download, ~1 GB)",
            ModelChoice.QWEN25_05: "Qwen2.5-Coder-0.5B (embedded, ~0.4 GB)",
            ModelChoice.QWEN25_15: "Qwen2.5-Coder-1.5B (embedded, ~1.1 GB)",
            ModelChoice.SMOLLM2: "SmolLM2-135M (embedded)",
            ModelChoice.DIRECTORY: "Local MLX directory…",
        }[self]

    @property
    def real(self) -> bool:
        return self is not ModelChoice.SCRIPTED


DEFAULT_POLICIES: tuple[str, ...] = ("append-only", "editable")


class ComparisonSettings(BaseModel):
    """One comparison: every policy runs the same task with the same model and budgets."""

    model_config = _FROZEN
    task: Task = Task.RETENTION
    pressure: bool = False
    policies: tuple[str, ...] = Field(default=DEFAULT_POLICIES, min_length=1)
    model: ModelChoice = ModelChoice.SCRIPTED
    model_dir: Path | None = None
    constrained: bool = False
    prefix_cache: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> ComparisonSettings:
        unknown = [p for p in self.policies if p not in BUILTIN_POLICIES]
        if unknown:
            known = ", ".join(BUILTIN_POLICIES)
            raise ValueError(f"unknown policy {unknown[0]!r}; known policies: {known}")
        if len(set(self.policies)) != len(self.policies):
            raise ValueError("each policy may appear only once")
        if self.model is ModelChoice.DIRECTORY and self.model_dir is None:
            raise ValueError("the local-directory model needs a model directory")
        if self.model is not ModelChoice.DIRECTORY and self.model_dir is not None:
            raise ValueError("a model directory applies only to the local-directory model")
        return self

    @property
    def noise_lines(self) -> int | None:
        """``None`` means the fixture default; pressure uses the pressure profile."""
        if not self.task.sequential or not self.pressure:
            return None
        from picocontext_diagnostics import pressure_profile

        return pressure_profile().noise_lines

    def describe(self) -> str:
        """One line for reports and the window caption."""
        parts = [self.task.label]
        if self.task.sequential:
            parts.append("context pressure on" if self.pressure else "normal context")
        parts.append("policies: " + ", ".join(self.policies))
        if self.model.real:
            parts.append("decoding: " + ("constrained" if self.constrained else "free"))
            parts.append("prefix cache: " + ("on" if self.prefix_cache else "off"))
        return " · ".join(parts)
