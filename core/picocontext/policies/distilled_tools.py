"""Running the distilled policy's tools (``digest``, ``resolve``, ``recall``) inside one turn's
window: every result is fitted to what is left (a smaller recall budget, shortened digest
children, fewer near matches) or refused with a note saying how much it needed. The ledger is
the shared :class:`~picocontext.policies.history.ToolExecutor`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from picocontext.cancel import CancelToken, check
from picocontext.distill.agent import (
    DIGEST_TOOL,
    RECALL_TOOL,
    RESOLVE_TOOL,
    DigestTools,
)
from picocontext.distill.errors import DistillError, NodeNotFound, ToolCallError
from picocontext.distill.ids import ROOT_ID
from picocontext.errors import Cancelled
from picocontext.manifest.tokens import TextCounter
from picocontext.policies.distilled_history import GroupLeaf, first_words
from picocontext.policies.history import ToolExecutor
from picocontext.session import ToolResult

SHORT_NO_ROOM = "No room is left in the context window. Answer now."
NO_ROOM = (
    "No room is left in the context window for this result (about {need} tokens needed, "
    "{left} left). Answer now with what you have, or ask for less (a smaller recall budget)."
)


class DigestToolExecutor(ToolExecutor):
    """Runs one tool call through :meth:`DigestTools.call` and fits the result to the window.

    The ledger starts at the tokens left after the first prompt (minus reserved output and a
    margin). A result too big for what is left is rendered smaller (a reduced recall budget,
    shortened digest children, fewer near matches) until one fits, or refused with a note
    saying how much was needed (a model that sends many calls at once may still hit the
    runtime's check)."""

    def __init__(
        self,
        tools: DigestTools,
        leaves: Mapping[str, GroupLeaf],
        meter: TextCounter,
        allowance: int,
        overhead: int,
        max_steps: int,
        cancel: CancelToken | None,
    ) -> None:
        refusal = overhead + meter.count(SHORT_NO_ROOM) + meter.count(_TYPICAL_ARGS)
        super().__init__(meter, allowance, overhead, max_steps, refusal)
        self.tools = tools
        self.leaves = leaves
        self.cancel = cancel

    def __call__(self, name: str, arguments: str) -> ToolResult:
        check(self.cancel)
        fixed = self.call_cost(arguments)
        grantable = self.remaining - self.reserve
        try:
            wire = self.tools.call(name, arguments)
            payload = json.loads(arguments) if arguments.strip() else {}
            args = payload if isinstance(payload, dict) else {}
            candidates = self._renderings(name, args, wire, grantable - fixed)
            for text in candidates:
                if self.fits(arguments, self.meter.count(text)):
                    return self.grant(arguments, text)
            need = fixed + self.meter.count(candidates[-1]) if candidates else fixed
            message = NO_ROOM.format(need=need, left=max(0, grantable))
            return self.refuse(arguments, message, SHORT_NO_ROOM)
        except Cancelled:
            raise
        except ToolCallError as exc:
            return self.refuse(arguments, exc.message + _HINTS.get(name, ""), SHORT_NO_ROOM)
        except NodeNotFound as exc:
            return self.refuse(
                arguments,
                f'No digest node "{exc.node_id}". Use a node id from the digest map or from a '
                "digest result.",
                SHORT_NO_ROOM,
            )
        except DistillError as exc:
            return self.refuse(arguments, f"{name} failed: {exc.message}", SHORT_NO_ROOM)

    def _renderings(
        self, name: str, payload: dict[str, Any], wire: dict[str, Any], left: int
    ) -> list[str]:
        """Candidate texts, most complete first; the first that fits ``left`` is returned."""
        if name == RECALL_TOOL:
            return self._recalls(payload, wire, left)
        if name == DIGEST_TOOL:
            return self._digests(wire)
        if name == RESOLVE_TOOL:
            return self._resolves(wire)
        raise ToolCallError(f"Unknown tool {name!r}; expected digest, resolve or recall.")

    # recall: shrink the budget until the pack fits (the pack itself stays whole items)
    def _recalls(self, payload: dict[str, Any], wire: dict[str, Any], left: int) -> list[str]:
        requested = int(wire.get("budget", 0))
        out = [self._render_recall(wire, requested, requested)]
        budget = requested
        for _ in range(12):
            cost = self.meter.count(out[-1])
            if cost <= left or budget <= 1:
                break
            shrink = max(1, int(budget * max(left, 0) / max(cost, 1) * 0.9))
            budget = min(budget - 1, shrink)
            smaller = self.tools.call(RECALL_TOOL, {**payload, "budget": budget})
            out.append(self._render_recall(smaller, requested, budget))
        return out

    def _render_recall(self, wire: dict[str, Any], requested: int, budget: int) -> str:
        items: list[dict[str, Any]] = list(wire.get("items", []))
        leaves = [i for i in items if not i.get("digest")]
        digests = [i for i in items if i.get("digest")]
        leaves.sort(key=lambda i: self._order(str(i["nodeId"])))
        head = (
            f"recall at {wire['altitude']} altitude: {len(items)} items, {wire['tokens']} of "
            f"{budget} words"
        )
        if wire.get("omitted"):
            head += f"; {wire['omitted']} more did not fit"
        if budget != requested:
            head += f" (budget reduced from {requested} to {budget} words to fit the window)"
        lines = [head + ". Older records oldest first:" if leaves else head + "."]
        for item in leaves:
            leaf = self.leaves.get(str(item["nodeId"]))
            label = leaf.label if leaf else "older record"
            lines.append(f"--- {label} ({item['nodeId']})")
            lines.append(str(item["text"]))
        for item in digests:
            lines.append(f"--- digest {item['kind']} ({item['nodeId']}), a summary:")
            lines.append(str(item["text"]))
        return "\n".join(lines)

    def _order(self, node_id: str) -> tuple[int, int]:
        leaf = self.leaves.get(node_id)
        return (leaf.ordinal, leaf.part) if leaf else (1 << 30, 0)

    # digest: full children summaries, then excerpts, then ids, then fewer children
    def _digests(self, wire: dict[str, Any]) -> list[str]:
        children: list[dict[str, Any]] = list(wire.get("children", []))
        children.sort(key=lambda c: self._order(str(c["id"])))  # leaves in history order
        out = [self._render_digest(wire, children, None), self._render_digest(wire, children, 12)]
        out.append(self._render_digest(wire, children, 0))
        count = len(children)
        while count > 0:
            count //= 2
            out.append(self._render_digest(wire, children[:count], 0, len(children) - count))
        return out

    def _render_digest(
        self,
        wire: dict[str, Any],
        children: Sequence[dict[str, Any]],
        words: int | None,
        hidden: int = 0,
    ) -> str:
        node = wire["node"]
        lines = [
            f"{node['id']} ({node['kind']}, level {node['level']}, sem {node.get('semHash', '')}):",
            str(wire.get("summary", "")),
        ]
        leaf = self.leaves.get(str(node["id"]))
        if leaf is not None:
            lines.append(
                f"This is {leaf.label} (records {', '.join(leaf.record_ids)}). For its verbatim "
                f'text call recall with "altitude": "entity" and "scope": "{node["id"]}".'
            )
        if children:
            lines.append(f"Children ({len(children) + hidden}):")
        for child in children:
            label = self.leaves.get(str(child["id"]))
            where = f" {label.label}" if label else ""
            summary = str(child.get("summary", ""))
            if words is None:
                text = f": {summary}"
            elif words:
                text = f": {first_words(summary, words)}"
            else:
                text = ""
            lines.append(f"- {child['id']} ({child['kind']}{where}){text}")
        if hidden:
            lines.append(f"({hidden} more children not shown: the window is nearly full.)")
        return "\n".join(lines)

    def _resolves(self, wire: dict[str, Any]) -> list[str]:
        near: list[dict[str, Any]] = list(wire.get("near", []))
        out = [self._render_resolve(wire, near, 0)]
        count = len(near)
        while count > 0:
            count //= 2
            out.append(self._render_resolve(wire, near[:count], len(near) - count))
        return out

    def _render_resolve(
        self, wire: dict[str, Any], near: Sequence[dict[str, Any]], hidden: int
    ) -> str:
        lines: list[str] = []
        exact = wire.get("exact")
        if exact:
            lines.append(f"exact: {exact['id']} ({exact['kind']}, level {exact['level']})")
        if wire.get("alsoExact"):
            lines.append("also exact: " + ", ".join(wire["alsoExact"]))
        for match in near:
            n = match["node"]
            lines.append(
                f"near: {n['id']} ({n['kind']}, level {n['level']}, {match['hammingBits']} bits)"
            )
        if hidden:
            lines.append(f"({hidden} more near matches not shown: the window is nearly full.)")
        return "\n".join(lines) or "No node has that hash (and none is within 8 bits)."


_TYPICAL_ARGS = '{"query": "a few words", "altitude": "entity"}'
_HINTS = {
    RECALL_TOOL: ' Example: {"query": "price of the kettle", "altitude": "entity", "budget": 200}.',
    DIGEST_TOOL: f' Example: {{"nodeId": "{ROOT_ID}"}}.',
    RESOLVE_TOOL: ' Example: {"hash": "<a 16-hex semHash from the map>"}.',
}
