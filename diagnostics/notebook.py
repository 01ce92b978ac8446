"""A deterministic "ideal model" for notebook episodes.

It plays both phases by rule, so the whole pipeline — decisions, edits, receipts, budgets,
answers and grading — runs without weights, in any policy:

* decision phase, targeted style: every unprotected tool result is replaced by its own
  ``FACT``/``REMOVE`` lines (unchanged records are skipped, at most 32 operations);
* decision phase, summarize style: the last unprotected record receives the sorted
  ``FACT key=value`` lines of the folded notebook and every other unprotected record is
  emptied; if that needs more than 32 operations it proposes nothing;
* no operations → ``keep_context``; otherwise ``edit_context`` (sorted-key JSON arguments);
* completion: sorted-key ``{"facts": ...}`` JSON of the fold of the live context.

Usage is counted in UTF-8 bytes of the output. Output longer than the allowance is clipped on
a character boundary and flagged ``reached_token_limit`` (a clipped decision carries no call).
``drop_keys`` is deliberate fault injection: those keys' lines are lost when editing, which
lets tests and demos show that the graders catch lost live context.
"""

from __future__ import annotations

from collections.abc import Iterable

from picocontext import (
    EDIT_TOOL,
    KEEP_TOOL,
    CancelToken,
    EditStyle,
    ModelResponse,
    ModelToolCall,
    Phase,
    PreparedPrompt,
    Record,
    Role,
    Snapshot,
)
from picocontext_diagnostics.fixtures import dumps_sorted
from picocontext_diagnostics.grading import FACT_PREFIX, REMOVE_PREFIX, notebook_state

MAX_OPERATIONS = 32
MODEL_ID = "deterministic-notebook"
MODEL_REVISION = "1"


def _clip(text: str, max_bytes: int) -> tuple[str, int, bool]:
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text, len(raw), False
    clipped = raw[:max_bytes].decode("utf-8", errors="ignore")
    return clipped, len(clipped.encode("utf-8")), True


class DeterministicNotebookBackend:
    """Satisfies :class:`picocontext.ModelBackend`; pair it with any token counter."""

    def __init__(self, drop_keys: Iterable[str] = ()) -> None:
        self.drop_keys = frozenset(drop_keys)
        self.calls = 0

    @property
    def model_id(self) -> str:
        return MODEL_ID

    def _keeps(self, line: str) -> bool:
        if line.startswith(FACT_PREFIX):
            key = line[len(FACT_PREFIX) :].partition("=")[0]
        elif line.startswith(REMOVE_PREFIX):
            key = line[len(REMOVE_PREFIX) :]
        else:
            return False
        return key not in self.drop_keys

    def targeted_operations(self, snapshot: Snapshot) -> list[dict[str, str]]:
        ops: list[dict[str, str]] = []
        for record in snapshot.records:
            if record.protected or record.role is not Role.TOOL:
                continue
            body = "\n".join(line for line in record.body.split("\n") if self._keeps(line))
            if body != record.body:
                ops.append({"action": "replace", "recordID": record.id, "body": body})
        return ops[:MAX_OPERATIONS]

    def summary_operations(self, snapshot: Snapshot) -> list[dict[str, str]]:
        editable: list[Record] = [r for r in snapshot.records if not r.protected]
        if not editable:
            return []
        state = notebook_state(snapshot)
        lines = [f"{FACT_PREFIX}{k}={v}" for k, v in sorted(state.items())]
        summary = "\n".join(line for line in lines if self._keeps(line))
        ops: list[dict[str, str]] = []
        for record in editable[:-1]:
            if record.body:
                ops.append({"action": "replace", "recordID": record.id, "body": ""})
        last = editable[-1]
        if last.body != summary:
            ops.append({"action": "replace", "recordID": last.id, "body": summary})
        return ops if len(ops) <= MAX_OPERATIONS else []

    def decide(self, prompt: PreparedPrompt) -> tuple[str, str]:
        """The (tool name, arguments) this backend would send for ``prompt``."""
        snapshot = prompt.input.context
        if prompt.input.edit_style is EditStyle.SUMMARIZE:
            ops = self.summary_operations(snapshot)
        else:
            ops = self.targeted_operations(snapshot)
        if not ops:
            return KEEP_TOOL, dumps_sorted({"baseRevision": snapshot.revision})
        return EDIT_TOOL, dumps_sorted({"baseRevision": snapshot.revision, "operations": ops})

    def answer(self, prompt: PreparedPrompt) -> str:
        return dumps_sorted({"facts": notebook_state(prompt.input.context)})

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        if cancel is not None:
            cancel.check()
        self.calls += 1
        if prompt.input.phase is Phase.EDIT:
            name, arguments = self.decide(prompt)
            text, used, clipped = _clip(arguments, max_tokens)
            if clipped:
                return ModelResponse(text=text, generated_tokens=used, reached_token_limit=True)
            return ModelResponse(
                tool_calls=(ModelToolCall(name=name, arguments=arguments),),
                generated_tokens=used,
            )
        text, used, clipped = _clip(self.answer(prompt), max_tokens)
        return ModelResponse(text=text, generated_tokens=used, reached_token_limit=clipped)
