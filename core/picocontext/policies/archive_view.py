"""Where the archive index stands in the model's view, and what is read from the archive
for the model before it is asked: the prefetch a navigator takes for the latest request, and
the earlier requests and their replies it may skip.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from picocontext.manifest.errors import ManifestError
from picocontext.manifest.navigator import Navigator
from picocontext.manifest.session import NavSession
from picocontext.policies.archive_nav import ArchiveNavigator
from picocontext.records import Record, Role, Snapshot
from picocontext.report import ToolStep


def with_index(
    view: Snapshot, index: Record, archived: Sequence[str], positions: dict[str, int]
) -> Snapshot:
    """``view`` with the archive index standing where the archive ends: before the first
    shown record newer than the newest archived one, so the prompt stays in time order and
    protected records older than that (earlier requests kept in view) come before it.

    Measured on the 0.5B model, one prompt per placement (docs/results/qwen-four-policies.md):
    on a long-history step (unprotected requests) with the index after the latest request it
    gave ``cell1`` the value of ``cell0``; in its place in time it answered right. On a state
    step whose earlier requests are protected, the index before all of them (where the
    archive *begins*) made it copy the requests' ``<current value>`` placeholder; after them,
    where the archive ends, it answered right."""
    last = max((positions[r] for r in archived), default=0)
    records = list(view.records)
    at = next((i for i, r in enumerate(records) if positions.get(r.id, 0) > last), len(records))
    records.insert(at, index)
    return view.model_copy(update={"records": tuple(records)})


def asked_before(view: Snapshot) -> dict[str, str]:
    """Id -> text of the user records in ``view`` other than the latest one (the question
    a prefetch answers)."""
    users = [r for r in view.records if r.role is Role.USER]
    return {r.id: r.body for r in users[:-1]}


def replies(history: Sequence[Record]) -> dict[str, str]:
    """User record id -> the assistant record that answered it: the first plain assistant
    reply (text, no tool call) after it and before the next user record."""
    out: dict[str, str] = {}
    asking: str | None = None
    for record in history:
        if record.role is Role.USER:
            asking = record.id
        elif (
            asking is not None
            and record.role is Role.ASSISTANT
            and record.body.strip()
            and not record.tool_calls
        ):
            out[asking] = record.id
            asking = None
    return out


def prefetch(
    nav: NavSession, view: Snapshot, navigator: Navigator, steps: int
) -> tuple[ToolStep, ...]:
    """Let ``navigator`` take up to ``steps`` steps for the latest user request before the
    model reads the archive: ``open``, ``search`` and ``related`` are carried out through the
    session (charged like the model's own calls). A document navigator stops after opening a
    leaf (it looks for one page); the archive navigator goes on to its next target. A
    ``close`` ends the prefetch instead of being carried out: what was shown stays in the
    prompt, so its tokens stay charged. Returns each call carried out, with what it showed."""
    query = next((r.body for r in reversed(view.records) if r.role == Role.USER), "")
    navigator.prepare(nav.manifest)
    one_leaf = not isinstance(navigator, ArchiveNavigator)
    done: list[ToolStep] = []
    for step in range(steps if query.strip() else 0):
        action = navigator.decide(query, nav.runtime.peek(), nav.budget_remaining)
        if action.verb == "search":
            arguments: dict[str, object] = {"query": action.query or query, "k": action.k}
        elif action.verb in ("open", "related"):
            arguments = {"id": action.ids[0]}
        else:
            break
        try:
            if action.verb == "search":
                shown = nav.search(action.query or query, action.k)
            elif action.verb == "related":
                shown = nav.related(action.ids[0])
            else:
                shown = nav.open(action.ids[0])
        except ManifestError:
            break
        done.append(
            ToolStep(
                step=step,
                name=action.verb,
                arguments=json.dumps(arguments, ensure_ascii=False),
                ok=True,
                result=shown,
                model_text=f"{navigator.name}: {action.reason}" if action.reason else "",
            )
        )
        if action.verb == "open" and one_leaf and nav.manifest.get(action.ids[0]).is_leaf:
            break
    return tuple(done)
