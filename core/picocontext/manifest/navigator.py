"""Navigators: who decides what to open next.

A navigator sees what the model would see -- the query, the visible frontier entries and the
budget left -- and returns one :class:`NavAction`: open a node, look at some nodes, follow
see-also links (``related``), narrow by facets (``filter``), close an open node to reclaim its
budget, search the manifest's descriptors (the hits are disclosed and charged), or stop.

* :class:`KeywordNavigator` is a deterministic, model-free baseline that is worth beating:
  stemming, IDF over the manifest, field weights (title > keywords > what > when), filler words
  removed on both sides, and only the fields rendered at each entry's view level (fix B12).
* :class:`LLMNavigator` drives any :class:`picocontext.backend.ChatModel` with a stated
  one-line protocol (``OPEN <id>`` / ``LOOK <id>[, <id>]`` / ``STOP``); options carry title,
  leaf/branch, depth, cost and see-also links, and an invalid reply is re-prompted once with the
  reason (fix B23). With ``decoding="constrained"`` (a model that accepts a grammar per chat
  call, :class:`GrammarChatModel`) the reply is decoded under a grammar that admits exactly
  the verbs offered with the ids valid at this step, so a small model cannot name a node that
  is not on the frontier or that the budget cannot pay for, and no re-prompt is needed.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from picocontext.backend import ChatMessage, ChatModel, ModelResponse, ToolSpec
from picocontext.cancel import CancelToken
from picocontext.errors import ModelError
from picocontext.manifest.model import Manifest
from picocontext.manifest.runtime import FrontierEntry, node_terms
from picocontext.manifest.text import IdfTable, score, terms


class NavAction(BaseModel):
    model_config = ConfigDict(frozen=True)

    verb: Literal["open", "look", "related", "filter", "close", "search", "stop"]
    ids: tuple[str, ...] = ()
    facets: dict[str, str] = {}
    query: str = ""  # search: the words sent to the runtime's search
    k: int = 5  # search: how many hits to disclose
    reason: str = ""

    @classmethod
    def stop(cls, reason: str = "") -> NavAction:
        return cls(verb="stop", reason=reason)


class Navigator(Protocol):
    """``prepare`` is called once per manifest (e.g. to learn IDF); ``decide`` once per step."""

    name: str

    def prepare(self, manifest: Manifest) -> None: ...

    def decide(
        self, query: str, frontier: Sequence[FrontierEntry], budget_remaining: int
    ) -> NavAction: ...


class KeywordNavigator:
    """Best-first over the accumulated frontier by field-weighted IDF overlap."""

    name = "keyword"

    def __init__(self) -> None:
        self._idf: IdfTable | None = None

    def prepare(self, manifest: Manifest) -> None:
        self._idf = IdfTable(node_terms(n).keys() for n in manifest.nodes.values())

    def rank(
        self, query: str, frontier: Sequence[FrontierEntry], budget_remaining: int
    ) -> list[tuple[float, FrontierEntry]]:
        """Affordable, unopened entries with a positive score, best first (ties keep order)."""
        q = terms(query)
        idf = self._idf or IdfTable(node_terms_from_entry(e).keys() for e in frontier)
        scored: list[tuple[float, int, FrontierEntry]] = []
        for i, e in enumerate(frontier):
            if e.expanded or e.expand_cost > budget_remaining:
                continue
            s = score(q, node_terms_from_entry(e), idf)
            if s > 0:
                scored.append((s, i, e))
        scored.sort(key=lambda t: (-t[0], not t[2].is_leaf, t[2].expand_cost, t[1]))
        return [(s, e) for s, _, e in scored]

    def decide(
        self, query: str, frontier: Sequence[FrontierEntry], budget_remaining: int
    ) -> NavAction:
        ranked = self.rank(query, frontier, budget_remaining)
        if not ranked:
            return NavAction.stop("no affordable entry shares a content word with the query")
        best_score, best = ranked[0]
        return NavAction(verb="open", ids=(best.node_id,), reason=f"score {best_score:.2f}")


def node_terms_from_entry(entry: FrontierEntry) -> dict[str, float]:
    """The weighted terms of the fields rendered at the entry's level."""
    from picocontext.manifest.text import field_terms

    fields: dict[str, str | tuple[str, ...]] = {"title": entry.title or entry.what[:40]}
    if entry.level in ("brief", "full"):
        fields["what"] = entry.what
    if entry.level == "full":
        fields["when"] = entry.when
        fields["keywords"] = entry.keywords
    return field_terms(fields)


NAVIGATOR_SYSTEM = (
    "You choose the next step through a tiered index to find the one entry that answers the "
    "query. Reply with exactly one line and nothing else:\n"
    "OPEN <id>   -- open the option most likely to lead to the answer (a branch shows its "
    "children, a leaf is the answer)\n"
    "LOOK <id>[, <id>]  -- see the full descriptors of options you cannot decide between\n"
    "STOP        -- nothing here can answer the query"
)
_RELATED_LINE = (
    "RELATED <id>  -- follow the see-also links of an option that is close but not exact"
)
_FILTER_LINE = "FILTER <key>=<value>  -- list only entries tagged so; tags here: {vocab}"

_REPLY = re.compile(r"^\s*(OPEN|LOOK|RELATED|FILTER|STOP)\b[\s:=]*(.*)$", re.IGNORECASE)
_FACET = re.compile(r"([A-Za-z0-9_.-]+)\s*=\s*([^\s,;]+)")


def _option_line(e: FrontierEntry) -> str:
    kind = "leaf" if e.is_leaf else "branch"
    line = f"- {e.node_id} | {kind} | depth {e.depth} | cost {e.expand_cost} | " + (
        f"{e.title}: " if e.title else ""
    )
    line += e.what
    if e.level == "full":
        line += f" | when: {e.when}"
    if e.links:
        line += " | see-also: " + ", ".join(e.links)
    return line


GRAMMAR_SYNTAX = "lark"  # llguidance's Lark dialect


@runtime_checkable
class GrammarChatModel(Protocol):
    """A chat model that can decode one reply under a grammar (``grammar_syntax`` names the
    dialect: ``"lark"``, llguidance's). The reply stops at the end of the grammar."""

    grammar_syntax: str

    def chat(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        cancel: CancelToken | None = None,
        *,
        grammar: str | None = None,
    ) -> ModelResponse: ...


class ReplyOptions(BaseModel):
    """What a reply may name at one step: the ids each verb accepts (empty: verb not offered)
    and the FILTER pairs. Built from the frontier and budget, it is both the grammar's source
    and the free parser's check."""

    model_config = ConfigDict(frozen=True)

    openable: tuple[str, ...]
    lookable: tuple[str, ...] = ()
    linked: tuple[str, ...] = ()
    facets: tuple[str, ...] = ()  # "key=value"
    max_look: int = 2


def _literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _alternatives(name: str, values: Sequence[str]) -> str:
    return f"{name}: " + " | ".join(_literal(v) for v in values) + "\n"


def reply_lark(options: ReplyOptions) -> str:
    """The grammar of one navigator reply: exactly ``OPEN <id>`` (or the bare id),
    ``LOOK <id>[, <id>]``, ``RELATED <id>``, ``FILTER key=value`` or ``STOP``, each verb
    only when it has something valid to name, each id one of the listed ones (no free
    text, nothing after the line)."""
    verbs = ['"STOP"']
    rules = []
    if options.openable:
        # A bare id is an OPEN, as in free decoding: small models often answer with just
        # the id, and forbidding that form pushes a greedy reply onto the next verb (STOP).
        verbs.extend(['"OPEN " open_id', "open_id"])
        rules.append(_alternatives("open_id", options.openable))
    if options.lookable:
        more = ' (", " look_id)?' * (options.max_look - 1)
        verbs.append(f'"LOOK " look_id{more}')
        rules.append(_alternatives("look_id", options.lookable))
    if options.linked:
        verbs.append('"RELATED " related_id')
        rules.append(_alternatives("related_id", options.linked))
    if options.facets:
        verbs.append('"FILTER " facet')
        rules.append(_alternatives("facet", options.facets))
    return "start: " + " | ".join(verbs) + "\n" + "".join(rules)


Decoding = Literal["free", "constrained"]


class LLMNavigator:
    """Asks a chat model for the next step with a stated one-line protocol. Deterministic when
    the model is greedy. ``allow_lateral`` adds the RELATED and FILTER verbs (FILTER only when
    the manifest has facets, whose vocabulary is listed in the prompt).

    ``decoding="constrained"`` decodes every reply under :func:`reply_lark` (the model must be
    a :class:`GrammarChatModel`); its name in an eval is ``llm-constrained``. In that mode LOOK
    names only entries not yet shown in full and RELATED only entries whose links lead
    somewhere not yet visible: the grammar offers only steps that disclose something."""

    def __init__(
        self,
        model: ChatModel,
        *,
        max_tokens: int | None = None,
        protocol: str = "",
        allow_look: bool = True,
        allow_lateral: bool = True,
        decoding: Decoding = "free",
    ) -> None:
        if decoding == "constrained" and not (
            isinstance(model, GrammarChatModel) and model.grammar_syntax == GRAMMAR_SYNTAX
        ):
            raise ModelError(
                f"{model.model_id} cannot decode under a grammar, so the constrained LLM "
                "navigator cannot use it; load a local MLX model or use decoding='free'."
            )
        self.model = model
        self._grammar_model = model if isinstance(model, GrammarChatModel) else None
        self.decoding: Decoding = decoding
        self.name = "llm-constrained" if decoding == "constrained" else "llm"
        # A constrained reply ends with its structure, so a roomier cap costs nothing and
        # keeps long ids from being cut off.
        self.max_tokens = max_tokens or (96 if decoding == "constrained" else 24)
        self.protocol = protocol
        self.allow_look = allow_look
        self.allow_lateral = allow_lateral
        self.facet_vocab: dict[str, list[str]] = {}
        self.calls = 0
        self.reprompts = 0
        self.invalid = 0  # replies that did not parse (free: each one; constrained: none expected)
        self.seconds = 0.0  # wall time inside model.chat
        self.transcript: list[tuple[str, str]] = []

    def prepare(self, manifest: Manifest) -> None:
        """Learn the facet vocabulary (at most 8 keys x 12 values) for the FILTER verb."""
        vocab: dict[str, list[str]] = {}
        for node in manifest.nodes.values():
            for key, value in (node.facets or {}).items():
                values = vocab.setdefault(key, []) if (key in vocab or len(vocab) < 8) else None
                if values is not None and value not in values and len(values) < 12:
                    values.append(value)
        self.facet_vocab = vocab

    def system_prompt(self) -> str:
        lines = [NAVIGATOR_SYSTEM]
        if self.allow_lateral:
            lines.append(_RELATED_LINE)
            if self.facet_vocab:
                vocab = "; ".join(f"{k}={'|'.join(v)}" for k, v in self.facet_vocab.items())
                lines.append(_FILTER_LINE.format(vocab=vocab))
        text = "\n".join(lines)
        return text if not self.protocol else f"{self.protocol}\n\n{text}"

    def prompt(
        self, query: str, frontier: Sequence[FrontierEntry], budget_remaining: int
    ) -> list[ChatMessage]:
        options = [e for e in frontier if not e.expanded and e.expand_cost <= budget_remaining]
        body = "\n".join(_option_line(e) for e in options) or "(no affordable options)"
        user = f"Query: {query}\nBudget remaining: {budget_remaining} tokens\nOptions:\n{body}"
        return [
            ChatMessage(role="system", content=self.system_prompt()),
            ChatMessage(role="user", content=user),
        ]

    def parse(self, reply: str, valid: set[str], linked: set[str] | None = None) -> NavAction | str:
        """A NavAction, or the reason the reply is unusable (for the re-prompt). ``valid`` are
        the openable option ids, ``linked`` the visible ids that have see-also links."""
        line = next((ln for ln in reply.strip().splitlines() if ln.strip()), "")
        line = line.strip().strip("`*").strip()
        m = _REPLY.match(line)
        if m is None:
            # A bare id is accepted as OPEN: small models often answer with just the id.
            bare = line.strip("'\"` ").removeprefix("id=")
            if bare in valid:
                return NavAction(verb="open", ids=(bare,), reason="bare id")
            return (
                f"the reply {line[:80]!r} does not start with OPEN, LOOK, RELATED, FILTER or STOP"
            )
        verb = m.group(1).lower()
        if verb == "stop":
            return NavAction.stop("model stopped")
        if verb == "filter":
            if not (self.allow_lateral and self.facet_vocab):
                return "FILTER is not available here"
            facets = dict(_FACET.findall(m.group(2)))
            if not facets:
                return "FILTER needs key=value"
            unknown = [k for k in facets if k not in self.facet_vocab]
            if unknown:
                return f"{unknown[0]!r} is not a facet key; keys: {', '.join(self.facet_vocab)}"
            return NavAction(verb="filter", facets=facets)
        raw = [p.strip().strip("'\"`").removeprefix("id=") for p in re.split(r"[,\s]+", m.group(2))]
        ids = tuple(p for p in raw if p)
        if not ids:
            return f"{verb.upper()} needs an id"
        if verb == "related":
            if not self.allow_lateral:
                return "RELATED is not available here"
            if ids[0] not in (linked or set()):
                return f"{ids[0]!r} is not a listed id with see-also links"
            return NavAction(verb="related", ids=ids[:1])
        bad = [i for i in ids if i not in valid]
        if bad:
            return f"{bad[0]!r} is not one of the listed option ids"
        if verb == "look":
            if not self.allow_look:
                return "LOOK is not available here; reply OPEN <id> or STOP"
            return NavAction(verb="look", ids=ids)
        return NavAction(verb="open", ids=ids[:1])

    def options(self, frontier: Sequence[FrontierEntry], budget_remaining: int) -> ReplyOptions:
        """The ids each verb may name now (the constrained grammar's vocabulary)."""
        openable = [e for e in frontier if not e.expanded and e.expand_cost <= budget_remaining]
        visible = {e.node_id for e in frontier}
        look = [e.node_id for e in openable if e.level != "full"] if self.allow_look else []
        lateral = self.allow_lateral
        linked = [e.node_id for e in frontier if lateral and set(e.links) - visible]
        pairs = [f"{k}={v}" for k, vs in self.facet_vocab.items() for v in vs] if lateral else []
        return ReplyOptions(
            openable=tuple(e.node_id for e in openable),
            lookable=tuple(look),
            linked=tuple(linked),
            facets=tuple(pairs),
        )

    def decide(
        self, query: str, frontier: Sequence[FrontierEntry], budget_remaining: int
    ) -> NavAction:
        options = self.options(frontier, budget_remaining)
        if not options.openable:
            return NavAction.stop("no affordable options")
        messages = self.prompt(query, frontier, budget_remaining)
        if self.decoding == "constrained":
            reply = self._ask(messages, reply_lark(options))
            parsed = parse_constrained(reply, options)
            if isinstance(parsed, NavAction):
                return parsed
            self.invalid += 1
            return NavAction.stop(f"constrained reply unusable: {parsed}")
        return self._decide_free(messages, frontier, set(options.openable))

    def _ask(self, messages: list[ChatMessage], grammar: str | None = None) -> str:
        self.calls += 1
        started = time.perf_counter()
        if grammar is not None and self._grammar_model is not None:
            response = self._grammar_model.chat(messages, self.max_tokens, grammar=grammar)
        else:
            response = self.model.chat(messages, max_tokens=self.max_tokens)
        self.seconds += time.perf_counter() - started
        self.transcript.append((messages[-1].content, response.text))
        return response.text

    def _decide_free(
        self, messages: list[ChatMessage], frontier: Sequence[FrontierEntry], valid: set[str]
    ) -> NavAction:
        linked = {e.node_id for e in frontier if e.links}
        for attempt in range(2):
            reply = self._ask(messages)
            parsed = self.parse(reply, valid, linked)
            if isinstance(parsed, NavAction):
                return parsed
            self.invalid += 1
            if attempt == 0:
                self.reprompts += 1
                ids = ", ".join(sorted(valid)[:30])
                messages = [
                    *messages,
                    ChatMessage(role="assistant", content=reply),
                    ChatMessage(
                        role="user",
                        content=f"Invalid: {parsed}. Valid ids: {ids}. Reply with one line.",
                    ),
                ]
        return NavAction.stop("invalid reply twice")


def parse_constrained(reply: str, options: ReplyOptions) -> NavAction | str:
    """Read a reply decoded under :func:`reply_lark` (exact forms only); the ids are checked
    again, so a model that ignored the grammar is caught, not trusted."""
    verb, _, rest = reply.strip().partition(" ")
    named = tuple(rest.split(", ")) if rest else ()
    allowed = {
        "OPEN": options.openable,
        "LOOK": options.lookable,
        "RELATED": options.linked,
        "FILTER": options.facets,
    }
    if verb == "STOP" and not rest:
        return NavAction.stop("model stopped")
    if not rest and verb in options.openable:
        return NavAction(verb="open", ids=(verb,), reason="bare id")
    if verb not in allowed or not named:
        return f"the reply {reply[:80]!r} is not one of the offered forms"
    bad = [i for i in named if i not in allowed[verb]]
    if bad or (verb != "LOOK" and len(named) > 1) or len(named) > options.max_look:
        return f"{verb} cannot name {', '.join(bad or named)!r} here"
    if verb == "FILTER":
        key, _, value = named[0].partition("=")
        return NavAction(verb="filter", facets={key: value})
    if verb == "LOOK":
        return NavAction(verb="look", ids=named)
    return NavAction(verb="open" if verb == "OPEN" else "related", ids=named)
