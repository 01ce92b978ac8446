"""Context policies as data: a name plus how the session runs a turn.

The runners never branch on a policy's name; they hand the policy to a *turn runner* (a
function from session, policy and budget to a :class:`picocontext.RunReport`). The default turn
runner calls :meth:`picocontext.ContextSession.run` with the policy's mode and edit style, so a
new policy that the session already supports is one more :class:`Policy` value, and a policy
that needs a different loop brings its own turn runner.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from pydantic import BaseModel, ConfigDict, Field

from picocontext import CancelToken, ContextSession, EditStyle, RunBudget, RunMode, RunReport
from picocontext_diagnostics.errors import InvalidConfiguration

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")


class Policy(BaseModel):
    """How one policy runs each turn. ``name`` is the stable identifier used in configs and
    reports (lower-case letters, digits and dashes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(pattern=_NAME.pattern)
    mode: RunMode
    edit_style: EditStyle = EditStyle.TARGETED
    description: str = ""


APPEND_ONLY = Policy(
    name="append-only",
    mode=RunMode.APPEND_ONLY,
    description="The model answers from the full history; nothing is edited.",
)
EDITABLE = Policy(
    name="editable",
    mode=RunMode.EDITABLE,
    edit_style=EditStyle.TARGETED,
    description="One decision call per turn may shorten or delete unprotected records.",
)
SUMMARIZE = Policy(
    name="summarize",
    mode=RunMode.EDITABLE,
    edit_style=EditStyle.SUMMARIZE,
    description="One decision call per turn may fold all unprotected history into a summary.",
)

BUILTIN_POLICIES: dict[str, Policy] = {p.name: p for p in (APPEND_ONLY, EDITABLE, SUMMARIZE)}
DEFAULT_POLICIES: tuple[str, ...] = (APPEND_ONLY.name, EDITABLE.name)

TurnRunner = Callable[[ContextSession, Policy, RunBudget, "CancelToken | None"], RunReport]


def session_turn(
    session: ContextSession, policy: Policy, budget: RunBudget, cancel: CancelToken | None
) -> RunReport:
    """The default turn: the core session loop in the policy's mode and edit style."""
    return session.run(policy.mode, budget, policy.edit_style, cancel)


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
