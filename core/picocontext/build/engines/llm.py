"""The LLM engine: descriptors written by a chat model (any
:class:`~picocontext.backend.ChatModel`: the local MLX model, or an OpenAI-compatible endpoint
through :class:`~picocontext.build.engines.openai_compat.OpenAICompatChat`).

Each question is one chat call that must answer with a JSON object. A reply that cannot be
parsed is retried once with the parse error; if it still fails, ``describe`` falls back to the
offline engine (counted in ``fallbacks``), ``contrast`` keeps the originals (counted), and
``grade`` returns a *failed* grade, which the pipeline treats as failing (B17). Fidelity is
predict-then-verify: the model predicts what the content says from the descriptor alone, and
the prediction is checked against the real content without the model.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from picocontext.backend import ChatMessage, ChatModel
from picocontext.build.engines.base import Grade
from picocontext.build.engines.offline import OfflineEngine
from picocontext.build.ir import SourceNode
from picocontext.build.quality import Descriptor, make_descriptor, terms
from picocontext.build.signals import Signals
from picocontext.errors import PicoContextError

PROMPT_VERSION = "llm-prompts/1"

SYSTEM = (
    "You write entries for a tiered index that a small model reads under a token budget to "
    "decide which entry to open. Answer with ONE JSON object and nothing else. "
    '"what": at most 80 characters, a concrete phrase naming what is behind the entry. '
    '"when": at most 80 characters, the user goal that makes this entry the right pick over '
    'its siblings. "keywords": up to 6 distinctive search words a user might type.'
)

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` (code fences and chatter around it tolerated)."""
    s = _CONTROL.sub("", text.strip())
    s = re.sub(r"^```[a-zA-Z]*\s*|\s*```$", "", s)
    try:
        value = json.loads(s)
        return value if isinstance(value, dict) else None
    except ValueError:
        pass
    start = s.find("{")
    while start != -1:
        depth = 0
        in_str = False
        esc = False
        for i in range(start, len(s)):
            ch = s[i]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    try:
                        value = json.loads(s[start : i + 1])
                    except ValueError:
                        break
                    return value if isinstance(value, dict) else None
        start = s.find("{", start + 1)
    return None


class LLMEngine:
    """Descriptors from a chat model; see the module docstring for the failure policy."""

    name = "llm"

    def __init__(
        self,
        model: ChatModel,
        *,
        synthesis: bool = False,
        max_content_chars: int = 4000,
        max_tokens: int = 200,
    ) -> None:
        self.model = model
        self.synthesis = synthesis
        self.max_content_chars = max_content_chars
        self.max_tokens = max_tokens
        self.offline = OfflineEngine()
        self.fallbacks = 0
        self.contrast_failures = 0
        self.grade_failures = 0
        self.calls = 0

    def bind(self, signals: Signals) -> None:
        self.offline.bind(signals)

    @property
    def signature(self) -> str:
        prompts = hashlib.sha256(SYSTEM.encode()).hexdigest()[:12]
        return (
            f"{PROMPT_VERSION}/{prompts};model={self.model.model_id};synthesis={self.synthesis};"
            f"chars={self.max_content_chars};fallback={self.offline.signature}"
        )

    # ------------------------------------------------------------------ plumbing
    def _ask(self, user: str, max_tokens: int | None = None) -> dict[str, Any] | None:
        messages = [
            ChatMessage(role="system", content=SYSTEM),
            ChatMessage(role="user", content=user),
        ]
        for attempt in range(2):
            self.calls += 1
            try:
                reply = self.model.chat(messages, max_tokens=max_tokens or self.max_tokens).text
            except PicoContextError:
                return None
            parsed = parse_json_object(reply)
            if parsed is not None:
                return parsed
            if attempt == 0:
                messages = [
                    *messages,
                    ChatMessage(role="assistant", content=reply),
                    ChatMessage(
                        role="user",
                        content="That was not one JSON object. Reply again with only the JSON.",
                    ),
                ]
        return None

    def _descriptor(self, data: dict[str, Any] | None, node: SourceNode) -> Descriptor | None:
        if data is None:
            return None
        what, when = data.get("what"), data.get("when")
        if not isinstance(what, str) or not isinstance(when, str) or not what.strip():
            return None
        kws = data.get("keywords")
        keywords = [k for k in kws if isinstance(k, str)] if isinstance(kws, list) else []
        return make_descriptor(what, when or f"For {node.title}", keywords, node.title)

    @staticmethod
    def _feedback(feedback: str | None) -> str:
        return f"\nA previous attempt was rejected: {feedback}\nFix that." if feedback else ""

    # ------------------------------------------------------------------ protocol
    def describe_leaf(self, node: SourceNode, feedback: str | None = None) -> Descriptor:
        parts = [f"Entry title: {node.title}"]
        if node.hint:
            parts.append(f"Author's description: {node.hint}")
        if node.meta.get("when"):
            parts.append(f"Author's note on when to use it: {node.meta['when']}")
        parts.append(f"Content:\n<<<\n{node.content[: self.max_content_chars]}\n>>>")
        parts.append('Reply as {"what": "...", "when": "...", "keywords": ["..."]}.')
        user = "\n".join(parts) + self._feedback(feedback)
        desc = self._descriptor(self._ask(user), node)
        if desc is None:
            self.fallbacks += 1
            return self.offline.describe_leaf(node, feedback)
        return desc

    def describe_branch(
        self,
        node: SourceNode,
        children: Sequence[tuple[SourceNode, Descriptor]],
        feedback: str | None = None,
    ) -> Descriptor:
        parts = [f"Group title: {node.title}"]
        if node.hint:
            parts.append(f"Author's description: {node.hint}")
        if self.synthesis:
            parts.append(
                "Samples of the content inside (what unifies it, any tensions, where to start):"
            )
            parts.append(self._samples(node))
        else:
            parts.append("Entries inside:")
            parts.extend(f"- {c.title}: {d.what}" for c, d in children)
        parts.append(
            'Summarize the group. Reply as {"what": "...", "when": "...", "keywords": []}.'
        )
        desc = self._descriptor(self._ask("\n".join(parts) + self._feedback(feedback)), node)
        if desc is None:
            self.fallbacks += 1
            return self.offline.describe_branch(node, children, feedback)
        return desc

    def _samples(self, node: SourceNode) -> str:
        """Round-robin over the children's leaves so every child is represented."""
        pools = [[leaf for leaf in child.leaves()] for child in node.children]
        share = max(200, self.max_content_chars // max(len(pools), 1))
        out: list[str] = []
        used = 0
        depth = 0
        while used < self.max_content_chars and any(depth < len(p) for p in pools):
            for pool in pools:
                if depth < len(pool) and used < self.max_content_chars:
                    leaf = pool[depth]
                    snippet = " ".join(leaf.content.split())[:share]
                    out.append(f"[{leaf.title}] {snippet}")
                    used += len(snippet)
            depth += 1
        return "\n".join(out)

    def contrast(
        self, parent: SourceNode, members: Sequence[tuple[SourceNode, Descriptor]]
    ) -> list[Descriptor]:
        rows = "\n".join(
            f"{i + 1}. {n.title} | what: {d.what} | when: {d.when}"
            for i, (n, d) in enumerate(members)
        )
        user = (
            f"These entries sit side by side under '{parent.title}' and read too much alike:\n"
            f"{rows}\nRewrite each 'when' so a reader can tell them apart; keep 'what' unless it "
            "is wrong; keep the order and the count. Reply as "
            '{"items": [{"what": "...", "when": "...", "keywords": []}, ...]}.'
        )
        data = self._ask(user, max_tokens=self.max_tokens * max(len(members), 1))
        items = data.get("items") if data else None
        if not isinstance(items, list) or len(items) != len(members):
            self.contrast_failures += 1
            return [d for _, d in members]
        out = []
        for (node, old), item in zip(members, items, strict=True):
            new = self._descriptor(item if isinstance(item, dict) else None, node)
            out.append(new or old)
        return out

    def grade(
        self, node: SourceNode, desc: Descriptor, siblings: Sequence[Descriptor]
    ) -> Grade | None:
        others = "\n".join(f"- when: {s.when}" for s in siblings) or "(none)"
        user = (
            f"Index entry for '{node.title}':\nwhat: {desc.what}\nwhen: {desc.when}\n"
            f"Its siblings:\n{others}\nScore 0 to 1 how well a reader could (a) pick this entry "
            "over its siblings for the right goal and (b) find it by searching its words; report "
            'the lower of the two. Reply as {"score": 0.0, "reason": "..."}.'
        )
        data = self._ask(user, max_tokens=80)
        raw = data.get("score") if data else None
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0 <= raw <= 1:
            self.grade_failures += 1
            return Grade(score=0.0, reason="the grade could not be read", failed=True)
        reason = data.get("reason") if data else ""
        return Grade(score=float(raw), reason=reason if isinstance(reason, str) else "")

    def fidelity(self, node: SourceNode, desc: Descriptor) -> float | None:
        """Predict from the descriptor alone, then verify the prediction against the content."""
        user = (
            f"An index entry says:\nwhat: {desc.what}\nwhen: {desc.when}\nWithout seeing it, "
            "list 5 short phrases you expect the content behind it to contain. Reply as "
            '{"expect": ["...", "..."]}.'
        )
        data = self._ask(user, max_tokens=120)
        expect = data.get("expect") if data else None
        if not isinstance(expect, list) or not expect:
            return None
        truth = set(terms(node.content or node.hint or node.title))
        if not node.is_leaf:
            truth = set(terms(" ".join(c.title + " " + c.hint for c in node.children)))
        hits = 0
        usable = 0
        for phrase in expect[:8]:
            if not isinstance(phrase, str):
                continue
            pt = set(terms(phrase))
            if not pt:
                continue
            usable += 1
            if len(pt & truth) / len(pt) >= 0.5:
                hits += 1
        return 1.0 + 4.0 * hits / usable if usable else None
