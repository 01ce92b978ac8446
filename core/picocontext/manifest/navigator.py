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
  reason (fix B23).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from picocontext.backend import ChatMessage, ChatModel
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


class LLMNavigator:
    """Asks a chat model for the next step with a stated one-line protocol. Deterministic when
    the model is greedy. ``allow_lateral`` adds the RELATED and FILTER verbs (FILTER only when
    the manifest has facets, whose vocabulary is listed in the prompt)."""

    name = "llm"

    def __init__(
        self,
        model: ChatModel,
        *,
        max_tokens: int = 24,
        protocol: str = "",
        allow_look: bool = True,
        allow_lateral: bool = True,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.protocol = protocol
        self.allow_look = allow_look
        self.allow_lateral = allow_lateral
        self.facet_vocab: dict[str, list[str]] = {}
        self.calls = 0
        self.reprompts = 0
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

    def decide(
        self, query: str, frontier: Sequence[FrontierEntry], budget_remaining: int
    ) -> NavAction:
        messages = self.prompt(query, frontier, budget_remaining)
        valid = {
            e.node_id for e in frontier if not e.expanded and e.expand_cost <= budget_remaining
        }
        linked = {e.node_id for e in frontier if e.links}
        if not valid:
            return NavAction.stop("no affordable options")
        for attempt in range(2):
            self.calls += 1
            reply = self.model.chat(messages, max_tokens=self.max_tokens).text
            self.transcript.append((messages[-1].content, reply))
            parsed = self.parse(reply, valid, linked)
            if isinstance(parsed, NavAction):
                return parsed
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
