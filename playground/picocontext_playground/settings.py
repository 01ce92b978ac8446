"""What a comparison run is asked to do: task, pressure, policies, model, engine and decoding
options.

These are plain data (frozen pydantic models) so the window, the headless smoke mode and the
tests build the same request, and a report can print exactly what was run. The engine (MLX or
llama.cpp) is part of the request: the same model runs at very different speeds on the two, so
a report that names the model names the engine too.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from picocontext_diagnostics import BUILTIN_POLICIES, Scenario
from picocontext_playground.errors import SetupError

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Task(StrEnum):
    """The three tasks of the playground. The values are the command-line spellings."""

    ORDER_LOOKUP = "order-lookup"
    RETENTION = "retention"
    STATE_UPDATES = "state-updates"
    REVISIONS = "revisions"

    @property
    def label(self) -> str:
        return {
            Task.ORDER_LOOKUP: "Order lookup",
            Task.RETENTION: "Exact retention",
            Task.STATE_UPDATES: "State updates",
            Task.REVISIONS: "Revised values",
        }[self]

    @property
    def scenario(self) -> Scenario | None:
        """The notebook scenario behind a sequential task (``None`` for the order lookup)."""
        if self is Task.RETENTION:
            return Scenario.RETENTION
        if self is Task.STATE_UPDATES:
            return Scenario.STATE_UPDATES
        if self is Task.REVISIONS:
            return Scenario.REVISIONS
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
            ModelChoice.DIRECTORY: "Local model directory…",
        }[self]

    @property
    def real(self) -> bool:
        return self is not ModelChoice.SCRIPTED

    @property
    def engines(self) -> tuple[Engine, ...]:
        """The engines this choice can run on: the embedded models ship a GGUF both read (MLX
        after conversion), Qwen3-1.7B-4bit is an MLX conversion only, a directory is whatever
        its layout holds, and the scripted stand-in runs on none."""
        if self is ModelChoice.SCRIPTED:
            return ()
        if self is ModelChoice.QWEN3:
            return ("mlx",)
        return ENGINES


Engine = Literal["mlx", "llamacpp"]
ENGINES: tuple[Engine, ...] = ("mlx", "llamacpp")
# How windows and reports name an engine (a handle's ``kind``, which also covers stand-ins).
ENGINE_LABELS: dict[str, str] = {
    "mlx": "MLX",
    "llamacpp": "llama.cpp",
    "scripted": "scripted rules (no model)",
    "openai": "OpenAI-compatible server",
}


def engine_label(kind: str) -> str:
    """``llama.cpp`` for ``llamacpp`` and so on; an unknown kind as it is."""
    return ENGINE_LABELS.get(kind, kind)


def default_engine() -> Engine:
    """The core registry's default engine (llama.cpp off Apple silicon when its extra is
    installed, else MLX; ``PICOCONTEXT_ENGINE`` overrides)."""
    from picocontext.models import default_engine as registry_default

    return registry_default()


def default_model(engine: Engine | None = None) -> ModelChoice:
    """The registry's default model for ``engine`` (default: the default engine): Qwen3 on
    Apple silicon (Metal), Qwen2.5-Coder-1.5B on llama.cpp, the embedded Qwen2.5-Coder-0.5B
    on MLX on a CPU — each chosen by measurement (docs/models.md)."""
    from picocontext.models import default_model_name

    return ModelChoice(default_model_name(engine or default_engine()))


def kv_shift_applies(model: ModelChoice, engine: Engine, prefix_cache: bool) -> bool:
    """KV shift is a llama.cpp setting that moves cached tokens: a real model on llama.cpp
    with the prefix cache on (the settings refuse it otherwise; the window greys it out)."""
    return model.real and engine == "llamacpp" and prefix_cache


def engine_for(model: object = ModelChoice.SCRIPTED, model_dir: object = None) -> Engine:
    """The engine a choice runs on when none is named: what a directory's layout needs, MLX
    for an MLX-only model, else :func:`default_engine`."""
    from picocontext.models import directory_engine

    if model_dir is not None:
        found = directory_engine(Path(str(model_dir)))
        if found is not None:
            return found
    chosen = default_engine()
    try:
        engines = ModelChoice(str(model)).engines
    except ValueError:  # an unknown model: validation reports it
        return chosen
    return chosen if chosen in engines or not engines else engines[0]


DEFAULT_POLICIES: tuple[str, ...] = ("append-only", "editable")


class ComparisonSettings(BaseModel):
    """One comparison: every policy runs the same task with the same model and budgets."""

    model_config = _FROZEN
    task: Task = Task.RETENTION
    """The task every policy runs."""
    pressure: bool = False
    """More noise lines per update (sequential tasks only), so the history outgrows the window."""
    policies: tuple[str, ...] = Field(default=DEFAULT_POLICIES, min_length=1)
    """Registry names of the policies, in the order they run (the baseline first by default)."""
    model: ModelChoice = ModelChoice.SCRIPTED
    """The scripted stand-in, an embedded or hub model, or a local directory."""
    model_dir: Path | None = None
    """The local model directory (MLX or GGUF); only with the local-directory choice."""
    engine: Engine = Field(default_factory=default_engine)
    """What runs the model: ``mlx`` or ``llamacpp``."""
    constrained: bool = False
    """Decode protocol actions under a grammar (real models only)."""
    prefix_cache: bool = True
    """Reuse the KV cache of the previous prompt's common prefix (real models only)."""
    kv_shift: bool = False
    """llama.cpp only: after an edit, move the cached records that follow the deleted ones
    instead of computing them again (approximate; see ``LlamaCppModel``)."""

    @model_validator(mode="before")
    @classmethod
    def _engine_for_model(cls, data: Any) -> Any:
        """No engine named (or settings saved before there was a choice): the one the model
        needs, else the default engine."""
        if isinstance(data, dict) and data.get("engine") is None:
            return {**data, "engine": engine_for(data.get("model"), data.get("model_dir"))}
        return data

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
        if self.model.real and self.engine not in self.model.engines:
            raise ValueError(
                f"{self.model.value} is an MLX model; the llama.cpp engine runs GGUF models "
                "(the embedded Qwen2.5-Coder and SmolLM2, or a directory with model.gguf); "
                "choose the MLX engine for it"
            )
        if self.kv_shift and not kv_shift_applies(self.model, self.engine, self.prefix_cache):
            if not kv_shift_applies(self.model, self.engine, True):
                raise ValueError(
                    "KV shift is a llama.cpp setting: it needs a real model on llamacpp"
                )
            raise ValueError("KV shift moves cached tokens, so it needs the prefix cache on")
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
            parts.append("engine: " + engine_label(self.engine))
            parts.append("decoding: " + ("constrained" if self.constrained else "free"))
            parts.append("prefix cache: " + ("on" if self.prefix_cache else "off"))
            if self.kv_shift:
                parts.append("KV shift: on")
        return " · ".join(parts)
