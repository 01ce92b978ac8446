"""Query expansion by a local chat model: the user's words rewritten into the documentation's.

A model-free navigator can only match the words a user typed ("folder", "throws") with the
words a page uses ("directory", ``raises``). A small code model often knows the vocabulary of
the field -- that free disk space is ``df``, that a temporary test directory is ``tmp_path``
-- without having read any page of the manifest. :class:`QueryExpander` asks it once per
query for a line of likely names and technical synonyms; the navigator then matches both the
query and those words against the descriptors (see
:class:`picocontext.manifest.subtree.SubtreeNavigator`).

What the model sees: the query and a one-line hint about the collection (the manifest root's
own ``what`` line), never a leaf payload or any other descriptor, so the expansion adds no
information the runtime does not hold. Its tokens are the model's, not the manifest's: the
navigation budget charges only what the session shows, as before.

Answers are cached by a key over the model id, the prompt version, the hint and the query, so
a rerun of a bench reuses them (:meth:`QueryExpander.save` / :meth:`QueryExpander.load`).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping
from pathlib import Path

from picocontext.backend import ChatMessage, ChatModel

PROMPT_VERSION = "expand-1"
EXPAND_SYSTEM = (
    "You rewrite a user's request into the words its documentation uses. Reply with one line "
    "of comma-separated terms: the likely command, function, option or API names first, then "
    "technical synonyms of the request's words. No explanation."
)
# Two worked examples from outside every bench corpus, so the model sees the reply's shape.
SHOTS = (
    (
        "turn a list of words into one comma separated string in python",
        "str.join, join, string, separator, concatenate, sequence",
    ),
    (
        "see which version of a library is installed",
        "pip show, version, package, metadata, installed distribution",
    ),
)
MAX_TERMS = 12
_SPLIT = re.compile(r"[,;\n|]+")
_TRIM = " \t\r`'\"."


def clean_expansion(reply: str) -> str:
    """The reply's distinct comma-separated terms, in order, at most :data:`MAX_TERMS`
    (small models repeat one term until the token limit)."""
    seen: dict[str, None] = {}
    for raw in _SPLIT.split(reply):
        term = raw.strip(_TRIM)
        if term and len(term) <= 60 and term.lower() not in {t.lower() for t in seen}:
            seen[term] = None
    return ", ".join(list(seen)[:MAX_TERMS])


class QueryExpander:
    """``expand(query)`` -> a line of terms from ``model`` (cached). ``hint`` names the
    collection, e.g. the manifest root's ``what``; ``seconds`` sums the model's wall time over
    the calls actually made and ``calls`` counts them."""

    def __init__(
        self,
        model: ChatModel,
        *,
        hint: str = "",
        max_tokens: int = 24,
        cache: Mapping[str, str] | None = None,
    ) -> None:
        self.model = model
        self.hint = hint
        self.max_tokens = max_tokens
        self.cache: dict[str, str] = dict(cache or {})
        self.calls = 0
        self.seconds = 0.0

    def key(self, query: str) -> str:
        text = "\x1f".join([self.model.model_id, PROMPT_VERSION, self.hint, query])
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]

    def messages(self, query: str) -> list[ChatMessage]:
        system = EXPAND_SYSTEM + (f"\nThe documentation: {self.hint}" if self.hint else "")
        out = [ChatMessage(role="system", content=system)]
        for ask, answer in SHOTS:
            out += [
                ChatMessage(role="user", content=ask),
                ChatMessage(role="assistant", content=answer),
            ]
        return [*out, ChatMessage(role="user", content=query)]

    def expand(self, query: str) -> str:
        key = self.key(query)
        if key not in self.cache:
            started = time.perf_counter()
            reply = self.model.chat(self.messages(query), max_tokens=self.max_tokens).text
            self.seconds += time.perf_counter() - started
            self.calls += 1
            self.cache[key] = clean_expansion(reply)
        return self.cache[key]

    def __call__(self, query: str) -> str:
        return self.expand(query)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.cache, indent=1, sort_keys=True) + "\n", "utf-8")

    @staticmethod
    def load(path: Path) -> dict[str, str]:
        """A saved cache, or an empty one when the file is missing or unreadable."""
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): str(v) for k, v in data.items()}
