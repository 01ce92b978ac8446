"""Context policies as data: a name, a mode and the settings its core policy object needs.

The runners never branch on a policy's name; they hand the policy to a *turn runner* (a
function from session, policy and budget to a :class:`picocontext.RunReport`). The default turn
runner, :func:`session_turn`, runs append-only and editable policies through
:meth:`picocontext.ContextSession.run` and delegates navigated and distilled policies to the
core policy objects (:class:`picocontext.policies.NavigatedPolicy`,
:class:`picocontext.policies.DistilledPolicy`). Those objects keep per-conversation state
(a compiled manifest, a digest corpus on disk), so exactly one object is created per session,
on its first turn, and :func:`close_session_policies` closes it when the episode ends; an
isolated session never shares a cache with another policy's or another episode's session.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable, Iterable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from picocontext import CancelToken, ContextSession, EditStyle, RunBudget, RunMode, RunReport
from picocontext.backend import ChatModel, ModelBackend
from picocontext.policies import ContextPolicy, DistilledPolicy, NavigatedPolicy
from picocontext.policies.distilled import DistilledConfig
from picocontext.policies.navigated import NavigatedConfig
from picocontext_diagnostics.errors import InvalidConfiguration

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
TOOL_MODES = (RunMode.NAVIGATED, RunMode.DISTILLED)


class Policy(BaseModel):
    """How one policy runs each turn. ``name`` is the stable identifier used in configs and
    reports (lower-case letters, digits and dashes). ``navigated``/``distilled`` are the core
    settings of a tool-using policy (defaults when absent); they must match ``mode``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(pattern=_NAME.pattern)
    mode: RunMode
    edit_style: EditStyle = EditStyle.TARGETED
    description: str = ""
    navigated: NavigatedConfig | None = None
    distilled: DistilledConfig | None = None

    @model_validator(mode="after")
    def _settings_match_mode(self) -> Policy:
        if self.navigated is not None and self.mode is not RunMode.NAVIGATED:
            raise ValueError("navigated settings belong to a navigated policy")
        if self.distilled is not None and self.mode is not RunMode.DISTILLED:
            raise ValueError("distilled settings belong to a distilled policy")
        return self

    @property
    def uses_tools(self) -> bool:
        """Navigated and distilled turns run the policy's own tool loop."""
        return self.mode in TOOL_MODES


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
NAVIGATED = Policy(
    name="navigated",
    mode=RunMode.NAVIGATED,
    description=(
        "Older history is compiled into a pcx manifest; the model reads its index and may "
        "open records with index/look/open/close before answering."
    ),
)
DISTILLED = Policy(
    name="distilled",
    mode=RunMode.DISTILLED,
    description=(
        "Older history is distilled into a digest tree; the model reads its map and may call "
        "digest/resolve/recall (recall returns older records verbatim)."
    ),
)

BUILTIN_POLICIES: dict[str, Policy] = {
    p.name: p for p in (APPEND_ONLY, EDITABLE, SUMMARIZE, NAVIGATED, DISTILLED)
}
DEFAULT_POLICIES: tuple[str, ...] = (APPEND_ONLY.name, EDITABLE.name)
# The four ways of managing the window that issue 9 compares side by side.
FOUR_POLICIES: tuple[str, ...] = (APPEND_ONLY.name, EDITABLE.name, NAVIGATED.name, DISTILLED.name)

TurnRunner = Callable[[ContextSession, Policy, RunBudget, "CancelToken | None"], RunReport]


def distilled_settings_for(backend: ModelBackend, policy: Policy) -> DistilledConfig:
    """The policy's settings; a chat model (a real local model) extracts leaf summaries by
    default, so the slow model writes only the digests above the leaves."""
    if policy.distilled is not None:
        return policy.distilled
    if isinstance(backend, ChatModel):
        return DistilledConfig(extract_leaves=True)
    return DistilledConfig()


def create_policy_object(policy: Policy, backend: ModelBackend) -> ContextPolicy:
    """A fresh core policy object for one session. A distilled policy summarises with the
    session's own model when it is a :class:`picocontext.backend.ChatModel` (the MLX models
    are) and with the deterministic ``FakeSummarizer`` otherwise (the deterministic and
    scripted backends), so no run ever needs a second model."""
    from picocontext.policies import AppendOnlyPolicy, EditablePolicy

    if policy.mode is RunMode.APPEND_ONLY:
        return AppendOnlyPolicy()
    if policy.mode is RunMode.EDITABLE:
        return EditablePolicy(policy.edit_style, name=policy.name)
    if policy.mode is RunMode.NAVIGATED:
        return NavigatedPolicy(policy.navigated, name=policy.name)
    settings = distilled_settings_for(backend, policy)
    if isinstance(backend, ChatModel):
        made = DistilledPolicy.over_chat_model(backend, settings=settings)
        made.name = policy.name
        return made
    from picocontext.distill.testing import FakeSummarizer

    return DistilledPolicy(FakeSummarizer(), settings=settings, name=policy.name)


_objects_lock = threading.Lock()
_objects: weakref.WeakKeyDictionary[ContextSession, tuple[Policy, ContextPolicy]] = (
    weakref.WeakKeyDictionary()
)


def session_policy(session: ContextSession, policy: Policy) -> ContextPolicy:
    """The core policy object of ``session`` (created on first use). One session runs one
    policy: asking for another policy on the same session is a configuration error."""
    with _objects_lock:
        found = _objects.get(session)
        if found is None:
            made = create_policy_object(policy, session.backend)
            _objects[session] = (policy, made)
            return made
    owner, obj = found
    if owner != policy:
        raise InvalidConfiguration(
            f"this session already runs policy {owner.name!r}; use a fresh session for "
            f"{policy.name!r}"
        )
    return obj


def close_session_policies(session: ContextSession) -> None:
    """Close and forget the policy object of ``session`` (a distilled policy removes its
    temporary corpus). Safe to call when the session never ran a tool-using policy."""
    with _objects_lock:
        found = _objects.pop(session, None)
    if found is not None:
        close = getattr(found[1], "close", None)
        if callable(close):
            close()


def session_turn(
    session: ContextSession, policy: Policy, budget: RunBudget, cancel: CancelToken | None
) -> RunReport:
    """The default turn: the core session loop in the policy's mode and edit style for
    append-only and editable policies; the session's navigated or distilled policy object
    otherwise. The report's ``policy`` is the policy's name either way."""
    if not policy.uses_tools:
        return session.run(policy.mode, budget, policy.edit_style, cancel)
    report = session_policy(session, policy).turn(session, budget, cancel)
    return (
        report
        if report.policy == policy.name
        else report.model_copy(update={"policy": policy.name})
    )


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
