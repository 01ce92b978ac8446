"""The policy registry: every context policy is a name, a config model and a factory.

Built-in policies register exactly as a third-party package would: through the entry-point
group ``picocontext.policies``. An entry point names a :class:`PolicySpec` or a sequence of
them; this distribution declares one, ``builtin``, which points at
:data:`picocontext.policies.builtin.BUILTIN_POLICIES`. When the distribution's metadata is not
installed (a source checkout on ``sys.path``), the built-in list is loaded directly, so the
same names exist either way. A name registered twice, an entry point that fails to load or
names something else, and an unknown name are errors that say what to fix.

A factory gets the validated config and a :class:`PolicyContext` (the column name the reports
use and the session's backend) and returns a fresh :class:`ContextPolicy`. Whoever creates a
policy owns it: it runs every turn through :meth:`ContextPolicy.turn` and calls
:meth:`ContextPolicy.close` when its episode or comparison ends.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import import_module, metadata
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from picocontext.backend import ModelBackend
from picocontext.errors import PicoContextError
from picocontext.policies.base import ContextPolicy
from picocontext.report import RunMode

ENTRY_POINT_GROUP = "picocontext.policies"
BUILTIN_ENTRY_POINT = "picocontext.policies.builtin:BUILTIN_POLICIES"

C = TypeVar("C", bound=BaseModel)


class PolicyError(PicoContextError):
    """A policy that cannot be found, registered or configured."""


class UnknownPolicy(PolicyError):
    def __init__(self, name: str, known: Iterable[str]) -> None:
        super().__init__(f"Unknown policy {name!r}; known policies: {', '.join(sorted(known))}")
        self.name = name


class NoConfig(BaseModel):
    """The config of a policy without settings: only ``{}`` is valid."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class PolicyContext:
    """What a factory may use: ``name`` labels the policy's reports (a policy may run under
    several names with different configs) and ``backend`` is the session's model."""

    name: str
    backend: ModelBackend


@dataclass(frozen=True)
class PolicySpec(Generic[C]):
    """One registered policy. ``mode`` is the :class:`RunMode` its reports carry."""

    name: str
    config: type[C]
    factory: Callable[[C, PolicyContext], ContextPolicy]
    mode: RunMode
    description: str = ""

    def parse_config(self, value: BaseModel | Mapping[str, Any] | None = None) -> C:
        """Validate ``value`` (a config instance, a mapping or ``None`` for the defaults)."""
        if isinstance(value, self.config):
            return value
        data = value.model_dump(exclude_unset=True) if isinstance(value, BaseModel) else value
        try:
            return self.config.model_validate(data or {})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "config"
            raise PolicyError(
                f"Invalid config for policy {self.name!r} ({where}: {first['msg']}); "
                f"{self.config.__name__} takes {', '.join(self.config.model_fields) or 'nothing'}"
            ) from None

    def create(
        self,
        backend: ModelBackend,
        config: BaseModel | Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> ContextPolicy:
        """A fresh policy object; the caller closes it."""
        context = PolicyContext(name=name or self.name, backend=backend)
        return self.factory(self.parse_config(config), context)


class PolicyRegistry:
    """Policy specs by name, in registration order."""

    def __init__(self, specs: Iterable[PolicySpec[Any]] = ()) -> None:
        self._specs: dict[str, PolicySpec[Any]] = {}
        for spec in specs:
            self.register(spec)

    def register(self, spec: PolicySpec[Any]) -> None:
        if not isinstance(spec, PolicySpec):
            raise PolicyError(f"{spec!r} is not a PolicySpec")
        if spec.name in self._specs:
            raise PolicyError(f"Policy {spec.name!r} is registered twice; rename one of them")
        self._specs[spec.name] = spec

    def get(self, name: str) -> PolicySpec[Any]:
        spec = self._specs.get(name)
        if spec is None:
            raise UnknownPolicy(name, self._specs)
        return spec

    def names(self) -> tuple[str, ...]:
        return tuple(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[PolicySpec[Any]]:
        return iter(tuple(self._specs.values()))

    def create(
        self,
        name: str,
        backend: ModelBackend,
        config: BaseModel | Mapping[str, Any] | None = None,
        label: str | None = None,
    ) -> ContextPolicy:
        """A fresh ``name`` policy (reports labelled ``label``, default ``name``)."""
        return self.get(name).create(backend, config, label)


def _specs_of(value: object, source: str) -> Sequence[PolicySpec[Any]]:
    if isinstance(value, PolicySpec):
        return (value,)
    if isinstance(value, Sequence) and all(isinstance(v, PolicySpec) for v in value):
        return tuple(value)
    raise PolicyError(f"Entry point {source} must name a PolicySpec or a sequence of them")


def _load(value: str) -> object:
    module, _, attribute = value.partition(":")
    return getattr(import_module(module), attribute)


def load_registry(group: str = ENTRY_POINT_GROUP) -> PolicyRegistry:
    """A registry of every policy the installed entry points of ``group`` declare (the
    built-ins first, loaded directly when no installed metadata declares them)."""
    points = sorted(metadata.entry_points(group=group), key=lambda p: (p.value, p.name))
    registry = PolicyRegistry()
    builtin = [p for p in points if p.value == BUILTIN_ENTRY_POINT][:1]
    if not builtin:
        for spec in _specs_of(_load(BUILTIN_ENTRY_POINT), BUILTIN_ENTRY_POINT):
            registry.register(spec)
    for point in builtin + [p for p in points if p.value != BUILTIN_ENTRY_POINT]:
        source = f"{point.name} = {point.value}"
        try:
            loaded = point.load()
        except Exception as exc:
            raise PolicyError(f"Entry point {source} failed to load: {exc}") from exc
        for spec in _specs_of(loaded, source):
            registry.register(spec)
    return registry


@functools.cache
def policy_registry() -> PolicyRegistry:
    """The process-wide registry, loaded on first use."""
    return load_registry()
