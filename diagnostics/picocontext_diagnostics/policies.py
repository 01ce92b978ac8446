"""Context policies as data: a column name, a registered policy and its config.

A :class:`Policy` names one entry of the core policy registry
(:func:`picocontext.policies.policy_registry`) by ``kind`` and carries the config its factory
validates, so a run can be described in JSON and repeated. The runners never branch on a
policy: they create the core object with :func:`create_policy_object` (a fresh one per
episode session, so no session shares a cache with another), run every turn through its
``turn`` and close it when the episode ends (:class:`PolicyRun`). Policies registered by other
packages through the ``picocontext.policies`` entry points appear here like the built-ins.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from picocontext import CancelToken, ContextSession, ModelBackend, RunBudget, RunMode, RunReport
from picocontext.policies import ContextPolicy, PolicyError, PolicySpec, policy_registry
from picocontext_diagnostics.errors import InvalidConfiguration

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
TOOL_MODES = (RunMode.NAVIGATED, RunMode.DISTILLED)
# What the reports of the first layout spelled as a mode and two settings fields.
_LEGACY_KINDS = {"appendOnly": "append-only", "navigated": "navigated", "distilled": "distilled"}


class Policy(BaseModel):
    """How one policy runs each turn. ``name`` is the stable identifier used in configs and
    reports (lower-case letters, digits and dashes); ``kind`` the registered policy it runs
    (default: ``name``); ``config`` the settings its factory validates (defaults when
    empty)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(pattern=_NAME.pattern)
    kind: str = ""
    config: dict[str, Any] = Field(default_factory=dict)
    description: str = ""

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        if "mode" in data:  # the first report layout: mode, edit_style, navigated, distilled
            data = _from_legacy(data)
        config = data.get("config")
        if isinstance(config, BaseModel):
            data["config"] = config.model_dump(mode="json", exclude_unset=True)
        data["kind"] = data.get("kind") or data.get("name")
        if not data.get("description") and data["kind"] in policy_registry():
            data["description"] = policy_registry().get(str(data["kind"])).description
        return data

    @model_validator(mode="after")
    def _config_fits_the_kind(self) -> Policy:
        try:
            self.spec.parse_config(self.config)
        except PolicyError as exc:
            raise ValueError(exc.message) from None
        return self

    @property
    def spec(self) -> PolicySpec[Any]:
        return policy_registry().get(self.kind)

    @property
    def mode(self) -> RunMode:
        """The mode the policy's reports carry."""
        return self.spec.mode

    @property
    def uses_tools(self) -> bool:
        """Navigated and distilled turns run the policy's own tool loop."""
        return self.mode in TOOL_MODES


def _from_legacy(data: dict[str, Any]) -> dict[str, Any]:
    mode = data.pop("mode")
    style = data.pop("edit_style", "targeted")
    navigated, distilled = data.pop("navigated", None), data.pop("distilled", None)
    kind = _LEGACY_KINDS.get(str(mode), "summarize" if style == "summarize" else "editable")
    data.setdefault("kind", kind)
    data.setdefault("config", navigated or distilled or {})
    return data


def policy_of(spec: PolicySpec[Any]) -> Policy:
    return Policy(name=spec.name, description=spec.description)


def builtin_policies() -> dict[str, Policy]:
    """One policy per registered spec, under its own name and with its defaults."""
    return {spec.name: policy_of(spec) for spec in policy_registry()}


BUILTIN_POLICIES: dict[str, Policy] = builtin_policies()
APPEND_ONLY = BUILTIN_POLICIES["append-only"]
EDITABLE = BUILTIN_POLICIES["editable"]
SUMMARIZE = BUILTIN_POLICIES["summarize"]
NAVIGATED = BUILTIN_POLICIES["navigated"]
DISTILLED = BUILTIN_POLICIES["distilled"]
DEFAULT_POLICIES: tuple[str, ...] = (APPEND_ONLY.name, EDITABLE.name)
# The four ways of managing the window that issue 9 compares side by side.
FOUR_POLICIES: tuple[str, ...] = (APPEND_ONLY.name, EDITABLE.name, NAVIGATED.name, DISTILLED.name)

TurnRunner = Callable[[ContextPolicy, ContextSession, RunBudget, "CancelToken | None"], RunReport]


def run_turn(
    policy: ContextPolicy, session: ContextSession, budget: RunBudget, cancel: CancelToken | None
) -> RunReport:
    """The default turn runner: the policy's own ``turn``."""
    return policy.turn(session, budget, cancel)


def create_policy_object(policy: Policy, backend: ModelBackend) -> ContextPolicy:
    """A fresh core policy object for one session, labelled ``policy.name``; the caller
    closes it."""
    try:
        return policy.spec.create(backend, policy.config, policy.name)
    except PolicyError as exc:
        raise InvalidConfiguration(exc.message) from None


class PolicyRun:
    """One policy object for one session, from the first turn to :meth:`close` (a context
    manager): the runner that opens it owns the object's lifetime."""

    def __init__(self, policy: Policy, session: ContextSession) -> None:
        self.policy = policy
        self.session = session
        self._object: ContextPolicy | None = None

    @property
    def instance(self) -> ContextPolicy:
        """The core policy object (created on first use, again after a close)."""
        if self._object is None:
            self._object = create_policy_object(self.policy, self.session.backend)
        return self._object

    def turn(
        self, budget: RunBudget, cancel: CancelToken | None = None, runner: TurnRunner = run_turn
    ) -> RunReport:
        report = runner(self.instance, self.session, budget, cancel)
        if report.policy == self.policy.name:
            return report
        return report.model_copy(update={"policy": self.policy.name})

    def close(self) -> None:
        """Close the policy object (a distilled policy removes its temporary corpus); safe to
        call twice, and when no turn ran."""
        found, self._object = self._object, None
        if found is not None:
            found.close()

    def __enter__(self) -> PolicyRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_policy_list(text: str, registry: dict[str, Policy] | None = None) -> tuple[str, ...]:
    """``"append-only,editable"`` → names, validated: non-empty, no blanks or repeats, all
    known. Errors name the problem and the known policies."""
    known = BUILTIN_POLICIES if registry is None else registry
    names = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not n for n in names):
        raise InvalidConfiguration(
            f"--policies needs comma-separated policy names without blanks; known policies: "
            f"{', '.join(sorted(known))}"
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InvalidConfiguration(f"--policies names {', '.join(repeated)} more than once")
    resolve_policies(names, known)
    return tuple(names)


def resolve_policies(
    names: Iterable[str], registry: dict[str, Policy] | None = None
) -> tuple[Policy, ...]:
    """Look names up in ``registry`` (default: the built-ins); unknown names fail clearly."""
    known = BUILTIN_POLICIES if registry is None else registry
    out: list[Policy] = []
    for name in names:
        policy = known.get(name)
        if policy is None:
            raise InvalidConfiguration(
                f"unknown policy {name!r}; known policies: {', '.join(sorted(known))}"
            )
        out.append(policy)
    return tuple(out)
