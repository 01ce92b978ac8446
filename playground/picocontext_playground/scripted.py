"""The deterministic stand-in model behind the ``scripted`` choice.

Why it exists: the window, the smoke mode and the tests must run every pane in milliseconds,
without weights, and still exercise the real session loop (decisions, validation, receipts,
budgets, grading). Token counts are UTF-8 bytes (:class:`picocontext.models.ByteCounter`) and
are labelled as such everywhere they are shown.

* Notebook episodes are played by :class:`picocontext_diagnostics.DeterministicNotebookBackend`.
* The order lookup is played here by rule, from the fixture's own metadata: the decision deletes
  the outdated check (its whole tool group) and shortens each current result to its first line;
  the answer is composed only from values that are still present in the prompt, so an edit
  that lost a fact produces a wrong answer and the check fails.

(``diagnostics`` has no order-lookup backend yet; this one belongs there eventually.)
"""

from __future__ import annotations

import json
import time

from picocontext import (
    EDIT_TOOL,
    KEEP_TOOL,
    CancelToken,
    Delete,
    ModelResponse,
    ModelToolCall,
    Operation,
    Phase,
    PreparedPrompt,
    Replace,
    Snapshot,
    edit_payload,
    keep_payload,
)
from picocontext_diagnostics import DeterministicNotebookBackend, OrderLookup

SCRIPTED_MODEL_ID = "scripted-deterministic"


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _clip(text: str, max_bytes: int) -> tuple[str, bool]:
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text, False
    return raw[:max_bytes].decode("utf-8", errors="ignore"), True


class ScriptedPlaygroundBackend:
    """Satisfies :class:`picocontext.ModelBackend`. ``delay`` seconds per call (checked for
    cancellation every 10 ms) lets a person — or a test — watch progress and press Stop."""

    def __init__(self, order: OrderLookup, delay: float = 0.0) -> None:
        self.order = order
        self.delay = delay
        self.notebook = DeterministicNotebookBackend()
        self.calls = 0

    @property
    def model_id(self) -> str:
        return SCRIPTED_MODEL_ID

    # -- order lookup rules --------------------------------------------------------------
    def _is_order_lookup(self, context: Snapshot) -> bool:
        ids = {r.id for r in context.records}
        known = set(self.order.stale_record_ids) | set(self.order.fact_record_ids)
        return bool(ids & known)

    def order_operations(self, context: Snapshot) -> list[Operation]:
        """Delete live outdated results with the assistant turn that called them (only when
        that turn called nothing else), and cut each current result to its first line."""
        live = {r.id: r for r in context.records}
        stale = [live[i] for i in self.order.stale_record_ids if i in live]
        stale_links = {r.tool_call_id for r in stale if r.tool_call_id}
        doomed: list[str] = []
        for record in context.records:
            calls = {c.id for c in record.tool_calls}
            if calls and calls <= stale_links and not record.protected:
                doomed.append(record.id)
        doomed.extend(r.id for r in stale if not r.protected)
        ops: list[Operation] = [Delete(record_id=rid) for rid in dict.fromkeys(doomed)]
        for rid in self.order.fact_record_ids:
            fact = live.get(rid)
            if fact is None or fact.protected or rid in doomed:
                continue
            first = fact.body.split("\n", 1)[0]
            if first != fact.body:
                ops.append(Replace(record_id=rid, body=first))
        return ops

    def order_answer(self, context: Snapshot) -> str:
        """The answer a careful reader of ``context`` would give: unknown values say so."""
        text = "\n".join(r.body for r in context.records)
        facts = self.order.expected

        def seen(value: str) -> str:
            return value if value in text else "unknown"

        return (
            f"SKU {seen(facts.sku)}; price USD {seen(facts.price_usd)}; "
            f"warranty {seen(facts.warranty_months)} months; "
            f"quantity {seen(facts.quantity)}."
        )

    # -- ModelBackend --------------------------------------------------------------------
    def _wait(self, cancel: CancelToken | None) -> None:
        deadline = time.monotonic() + self.delay
        while True:
            if cancel is not None:
                cancel.check()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(0.01, left))

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        self._wait(cancel)
        self.calls += 1
        context = prompt.input.context
        if not self._is_order_lookup(context):
            return self.notebook.generate(prompt, max_tokens, cancel)
        if prompt.input.phase is Phase.EDIT:
            ops = self.order_operations(context)
            if ops:
                name, arguments = EDIT_TOOL, edit_payload(context.revision, ops)
            else:
                name, arguments = KEEP_TOOL, keep_payload(context.revision)
            # Sorted keys keep the shown arguments stable across Python versions.
            arguments = json.dumps(json.loads(arguments), sort_keys=True, ensure_ascii=False)
            text, clipped = _clip(arguments, max_tokens)
            if clipped:
                return ModelResponse(
                    text=text, generated_tokens=_utf8_len(text), reached_token_limit=True
                )
            return ModelResponse(
                tool_calls=(ModelToolCall(name=name, arguments=arguments),),
                generated_tokens=_utf8_len(arguments),
            )
        text, clipped = _clip(self.order_answer(context), max_tokens)
        return ModelResponse(
            text=text, generated_tokens=_utf8_len(text), reached_token_limit=clipped
        )
