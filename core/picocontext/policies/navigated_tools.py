"""The navigated policy's tools: the four NavSession verbs as tool specs, their strict
argument models, and the executor that runs them inside one turn's window.

The executor checks every call's arguments strictly, lets the runtime judge node ids (unknown
ids, the root and ids not on the frontier are refused before anything changes), predicts the
cost of each disclosure before it happens, and answers every refusal with a message the model
can act on. Its ledger (what the turn's prompt may still grow by) is the shared
:class:`~picocontext.policies.history.ToolExecutor`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from picocontext.backend import ToolSpec, restrict_ids
from picocontext.manifest.errors import ManifestError
from picocontext.manifest.model import Manifest
from picocontext.manifest.runtime import render_line
from picocontext.manifest.session import NavSession
from picocontext.manifest.tokens import TextCounter
from picocontext.policies.history import ToolExecutor
from picocontext.session import ToolResult

NO_ROOM = "No room left in this turn's window: answer now with what you have read."

_ID_SCHEMA: dict[str, Any] = {"type": "string", "minLength": 1}

INDEX_TOOL = ToolSpec(
    name="index",
    description="List the archive lines that can be opened now.",
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
)
LOOK_TOOL = ToolSpec(
    name="look",
    description="Fuller descriptions of listed ids.",
    parameters={
        "type": "object",
        "properties": {
            "ids": {"type": "array", "items": _ID_SCHEMA, "minItems": 1, "maxItems": 16}
        },
        "required": ["ids"],
        "additionalProperties": False,
    },
)


def _one_id_tool(name: str, description: str) -> ToolSpec:
    """A verb whose only argument is one node id."""
    return ToolSpec(
        name=name,
        description=description,
        parameters={
            "type": "object",
            "properties": {"id": _ID_SCHEMA},
            "required": ["id"],
            "additionalProperties": False,
        },
    )


OPEN_TOOL = _one_id_tool(
    "open", "Open a listed id: a branch lists its records, a leaf shows one record verbatim."
)
CLOSE_TOOL = _one_id_tool("close", "Close an open id to free reading budget.")
NAV_TOOLS: tuple[ToolSpec, ...] = (INDEX_TOOL, LOOK_TOOL, OPEN_TOOL, CLOSE_TOOL)


def nav_tools(manifest: Manifest) -> tuple[ToolSpec, ...]:
    """The verbs as offered for one manifest: ``open`` (the verb that discloses) limited to
    its openable node ids (the root is not) when they are few; the runtime judges the rest."""
    ids = [i for i in manifest.nodes if i != manifest.root.id]
    return (INDEX_TOOL, LOOK_TOOL, restrict_ids(OPEN_TOOL, ids, "id"), CLOSE_TOOL)


_STRICT = ConfigDict(frozen=True, extra="forbid", strict=True)


class _NoArgs(BaseModel):
    model_config = _STRICT


class _LookArgs(BaseModel):
    model_config = _STRICT
    # each id non-empty, as the offered schema's items say (``_ID_SCHEMA``)
    ids: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1, max_length=16)


class _NodeArgs(BaseModel):
    model_config = _STRICT
    id: str = Field(min_length=1, max_length=512)


_USAGE = {
    "index": "index takes no arguments: {}",
    "look": 'look needs {"ids": ["<id>", ...]} with 1 to 16 ids from the index',
    "open": 'open needs {"id": "<id>"} with an id from the index',
    "close": 'close needs {"id": "<id>"} with an id that is open',
}
_ARG_MODELS: dict[str, type[BaseModel]] = {
    "index": _NoArgs,
    "look": _LookArgs,
    "open": _NodeArgs,
    "close": _NodeArgs,
}


def parse_arguments(name: str, arguments: str) -> BaseModel:
    """Strict parse of one verb's JSON arguments; raises ``ValueError`` with the usage line."""
    usage = _USAGE[name]
    text = arguments.strip() or "{}"
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError(f"Arguments are not valid JSON; {usage}.") from None
    if not isinstance(value, dict):
        raise ValueError(f"Arguments must be a JSON object; {usage}.")
    try:
        return _ARG_MODELS[name].model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "arguments"
        raise ValueError(f"Invalid arguments ({where}: {first['msg']}); {usage}.") from None


class NavToolExecutor(ToolExecutor):
    """Runs one verb: strict arguments, node ids checked by the runtime, the transcript
    guard, and a clear message for every refusal (the model may retry)."""

    def __init__(
        self, nav: NavSession, meter: TextCounter, limit: int, per_call: int, max_calls: int
    ) -> None:
        super().__init__(meter, limit, per_call, max_calls, per_call + meter.count(NO_ROOM))
        self.nav = nav

    def __call__(self, name: str, arguments: str) -> ToolResult:
        try:
            args = parse_arguments(name, arguments)
        except ValueError as exc:
            return self.refuse(arguments, str(exc), NO_ROOM)
        try:
            if name == "index":
                cost = self.meter.count(self.nav.runtime.frontier_view())
                return self._checked(arguments, cost, "the index", self.nav.index)
            if name == "look":
                assert isinstance(args, _LookArgs)
                return self._look(arguments, args.ids)
            assert isinstance(args, _NodeArgs)
            if name == "open":
                return self._open(arguments, args.id)
            freed = self.nav.close(args.id)
            text = (
                f"Closed {args.id}: {freed} tokens freed, {self.nav.budget_remaining} left."
                if freed
                else f"{args.id} was not open; nothing to close."
            )
            return self._note(arguments, text)
        except ManifestError as exc:
            return self.refuse(arguments, _explain(exc.message), NO_ROOM)

    def _note(self, arguments: str, text: str) -> ToolResult:
        """A short confirmation (the short refusal's room is always kept for it)."""
        if not self.fits(arguments, self.meter.count(text)):
            text = NO_ROOM
        return self.grant(arguments, text)

    def _checked(self, arguments: str, cost: int, what: str, act: Callable[[], str]) -> ToolResult:
        """Check the predicted cost first, so a refused disclosure changes nothing."""
        if not self.fits(arguments, cost):
            return self.refuse(
                arguments,
                f"Refused: {what} would not fit in the context window for this turn. Answer "
                "now with what you have read, or pick something smaller.",
                NO_ROOM,
            )
        return self.grant(arguments, act())

    def _visible_or_raise(self, node_id: str) -> None:
        """Unknown ids, the root and ids not on the frontier are refused by the runtime's own
        checks, which raise before anything changes."""
        if not self.nav.runtime.is_visible(node_id):
            self.nav.runtime.look([node_id])
            raise ManifestError(f"{node_id!r} cannot be read now.")

    def _look(self, arguments: str, ids: Sequence[str]) -> ToolResult:
        unique = list(dict.fromkeys(ids))
        for nid in unique:
            self._visible_or_raise(nid)
        runtime = self.nav.runtime
        preview = "\n".join(render_line(n, runtime.manifest.get(n), "full") for n in unique)
        cost = self.meter.count(preview)
        return self._checked(arguments, cost, "these descriptions", lambda: self.nav.look(unique))

    def _open(self, arguments: str, node_id: str) -> ToolResult:
        self._visible_or_raise(node_id)
        runtime = self.nav.runtime
        if runtime.is_spliced(node_id) or runtime.is_revealed(node_id):
            return self._note(arguments, f"{node_id} is already open; see above.")
        node = runtime.manifest.get(node_id)
        if node.is_leaf:
            # In resolver mode the splice cost is the count of exactly the text returned.
            cost = runtime.expand_cost(node_id)
        else:
            children = [c for c in node.children or () if runtime.manifest.has(c)]
            cost = self.meter.count("\n".join(runtime.entry(c).text for c in children))
        what = "this record" if node.is_leaf else "this branch"
        return self._checked(arguments, cost, what, lambda: self.nav.open(node_id))


def _explain(message: str) -> str:
    """Runtime refusals, plus where valid ids come from."""
    message = message.rstrip()
    if not message.endswith((".", "!", "?")):
        message += "."
    return f"{message} Ids are the first word of an index line (call index to list them)."
