"""The deterministic backend, taught to answer conversations by an extractive rule.

Notebook prompts (a request with a ``{"facts": ...}`` answer shape) go to
:class:`~picocontext_diagnostics.episodes.DeterministicNotebookBackend` unchanged. A prompt
whose latest request has no such shape is a conversation question, answered like this:

* **answer** (completion, or a tools step with nothing left to look up): the sentence of the
  prompt — tool results (older history) then visible records, never the instructions or the
  question itself —
  that shares the most content words with the question (lower-cased, stop words dropped, a
  small suffix stemmer); on a tie the later sentence wins, so an update beats the fact it
  overwrote. No overlap at all: ``I don't know.``;
* **decision** (editable): ``keep_context`` — this rule has no idea how to shorten chat;
* **navigation tools**: ``open`` the unopened index line that overlaps the question most
  (with no overlap anywhere, the newest unopened branch, to list it), at most
  :data:`MAX_OPENS` times;
* **digest tools**: one ``recall`` of the question text at entity altitude;
* **compaction summary** (the compaction policy's own guidance): for notebook history the
  sorted ``FACT`` lines of its fold (a perfect keeper); for chat the lines of the earlier
  summary and the first sentence of every other turn, within the output allowance — lossy
  on purpose, as summaries are.

Like the notebook backend it reads only its prompt and counts UTF-8 bytes of its output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from picocontext import (
    KEEP_TOOL,
    CancelToken,
    ModelResponse,
    ModelToolCall,
    Phase,
    PreparedPrompt,
    Role,
)
from picocontext.policies import SUMMARY_GUIDANCE, SUMMARY_MARK
from picocontext_diagnostics.episodes.fixtures import dumps_sorted
from picocontext_diagnostics.episodes.grading import FACT_PREFIX, REMOVE_PREFIX, notebook_state
from picocontext_diagnostics.episodes.notebook_backend import (
    INDEX_LINE,
    DeterministicNotebookBackend,
    clip_utf8,
)

MAX_OPENS = 4
RECALL_WORDS = 400
UNKNOWN = "I don't know."
_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_SUFFIXES = ("ies", "ing", "ed", "es", "s")
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "that",
        "the",
        "their",
        "them",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "you",
        "your",
        "about",
        "after",
        "before",
        "did",
        "does",
        "again",
        "just",
        "now",
        "then",
        "there",
        "here",
        "than",
        "too",
        "very",
        "can",
        "could",
        "would",
        "should",
        "into",
        "over",
        "under",
        "any",
        "all",
    ]
)


def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def content_words(text: str) -> set[str]:
    """Lower-cased, stemmed words of ``text`` of two or more characters, without stop words
    (so the ``s`` of a possessive matches nothing)."""
    return {_stem(w) for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in STOP_WORDS}


def sentences(texts: Iterable[str]) -> list[str]:
    return [s.strip() for text in texts for s in _SENTENCE.split(text) if s.strip()]


def best_sentence(question: str, texts: Iterable[str]) -> str:
    """The sentence overlapping ``question`` most (later wins ties), or :data:`UNKNOWN`."""
    wanted = content_words(question)
    best, best_score = UNKNOWN, 0
    for sentence in sentences(texts):
        score = len(wanted & content_words(sentence))
        if score and score >= best_score:
            best, best_score = sentence, score
    return best


def _is_notebook(prompt: PreparedPrompt) -> bool:
    return DeterministicNotebookBackend.asked_keys(prompt) is not None


def _question(prompt: PreparedPrompt) -> tuple[str, str]:
    """(record id, body) of the latest user record."""
    for record in reversed(prompt.input.context.records):
        if record.role is Role.USER:
            return record.id, record.body
    return "", ""


def readable_texts(prompt: PreparedPrompt) -> list[str]:
    """What the reader may quote: history bodies (not system records, not the question) and
    this turn's tool results."""
    question_id, _ = _question(prompt)
    bodies = [
        r.body
        for r in prompt.input.context.records
        if r.role is not Role.SYSTEM and r.id != question_id and not r.tool_calls
    ]
    results = [r.body for r in prompt.input.control_records if r.role is Role.TOOL]
    # Fetched history is older than what is shown, so it comes first: a later sentence wins.
    return [*results, *bodies]


def chat_summary(prompt: PreparedPrompt, max_bytes: int) -> str:
    """The lines of an earlier summary, then the first sentence of every other unprotected
    record, oldest first, within ``max_bytes``."""
    out: list[str] = []
    used = 0
    for record in prompt.input.context.records:
        if record.protected or not record.body.strip():
            continue
        if record.body.startswith(SUMMARY_MARK):
            kept = [line for line in record.body.split("\n")[1:] if line.strip()]
        else:
            kept = sentences([record.body])[:1]
        for line in kept:
            cost = len(line.encode("utf-8")) + 1
            if used + cost > max_bytes:
                return "\n".join(out)
            out.append(line)
            used += cost
    return "\n".join(out)


class DeterministicConversationBackend(DeterministicNotebookBackend):
    """The notebook backend plus the extractive conversation reader described above."""

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        if prompt.input.guidance == SUMMARY_GUIDANCE:
            if cancel is not None:
                cancel.check()
            self.calls += 1
            return self._text(self.summary(prompt, max_tokens), max_tokens)
        if _is_notebook(prompt):
            return super().generate(prompt, max_tokens, cancel)
        if cancel is not None:
            cancel.check()
        self.calls += 1
        if prompt.input.phase is Phase.EDIT:
            arguments = dumps_sorted({"baseRevision": prompt.input.context.revision})
            return self._call(ModelToolCall(name=KEEP_TOOL, arguments=arguments), max_tokens)
        if prompt.input.phase is Phase.TOOLS:
            call = self.conversation_look(prompt)
            if call is not None:
                return self._call(call, max_tokens)
        _, question = _question(prompt)
        return self._text(best_sentence(question, readable_texts(prompt)), max_tokens)

    def summary(self, prompt: PreparedPrompt, max_bytes: int) -> str:
        bodies = [r.body for r in prompt.input.context.records if not r.protected]
        has_notebook = any(
            line.startswith((FACT_PREFIX, REMOVE_PREFIX)) for b in bodies for line in b.split("\n")
        )
        if has_notebook:
            state = notebook_state(prompt.input.context)
            return "\n".join(f"{FACT_PREFIX}{k}={v}" for k, v in sorted(state.items()))
        return chat_summary(prompt, max_bytes)

    def conversation_look(self, prompt: PreparedPrompt) -> ModelToolCall | None:
        """The next look into older history for a conversation question, or None."""
        offered = self._offered(prompt)
        exchanges = self._exchanges(prompt)
        _, question = _question(prompt)
        if "recall" in offered:
            if any(verb == "recall" for verb, _, _ in exchanges):
                return None
            arguments = {"altitude": "entity", "budget": RECALL_WORDS, "query": question}
            return ModelToolCall(name="recall", arguments=dumps_sorted(arguments))
        if "open" in offered:
            opened = [str(a.get("id", "")) for verb, a, _ in exchanges if verb == "open"]
            if len(opened) >= MAX_OPENS:
                return None
            target = self._best_line(prompt, question, set(opened))
            if target is not None:
                return ModelToolCall(name="open", arguments=dumps_sorted({"id": target}))
        return None

    @staticmethod
    def _best_line(prompt: PreparedPrompt, question: str, opened: set[str]) -> str | None:
        """The unopened index line sharing most words with the question (a leaf before a
        branch, then the later line); with no overlap anywhere, the newest unopened branch,
        to list what it holds."""
        wanted = content_words(question)
        lines: dict[str, tuple[int, bool, int]] = {}
        # the navigated policy's index is in the history; a recall's results are control records
        for record in (*prompt.input.context.records, *prompt.input.control_records):
            for node_id, kind, text in INDEX_LINE.findall(record.body):
                if node_id != "r" and node_id not in opened:
                    score = len(wanted & content_words(text))
                    lines[node_id] = (score, kind == "leaf", len(lines))
        if not lines:
            return None
        best = max(lines, key=lambda n: lines[n])
        if lines[best][0] > 0:
            return best
        branches = [n for n, (_, leaf, _) in lines.items() if not leaf]
        return max(branches, key=lambda n: lines[n][2]) if branches else None

    @staticmethod
    def _call(call: ModelToolCall, max_tokens: int) -> ModelResponse:
        text, used, clipped = clip_utf8(call.arguments, max_tokens)
        if clipped:
            return ModelResponse(text=text, generated_tokens=used, reached_token_limit=True)
        return ModelResponse(tool_calls=(call,), generated_tokens=used)

    @staticmethod
    def _text(text: str, max_tokens: int) -> ModelResponse:
        clipped, used, hit = clip_utf8(text, max_tokens)
        return ModelResponse(text=clipped, generated_tokens=used, reached_token_limit=hit)
