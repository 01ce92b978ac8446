"""The order lookup as an episode, and a deterministic model that plays it by rule.

The task (``order_lookup.json``, loaded by :func:`picocontext_diagnostics.order_lookup`) is
one turn over a history that holds an outdated check and the current tool results. As an
:class:`~picocontext_diagnostics.episodes.Episode` it has a single step with no incoming
records and no appended answer, graded by :attr:`ContextCheck.ORDER_FACTS`, so every runner
treats it like the notebook episodes.

:class:`DeterministicOrderBackend` plays it from the fixture's own metadata: the decision
deletes the outdated check (its whole tool group) and shortens each current result to its
first line; the answer is composed only from values still present in the prompt, so an edit
that lost a fact produces a wrong answer and the check fails. Token counts are UTF-8 bytes.
"""

from __future__ import annotations

import json

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
from picocontext_diagnostics.episodes.episode import Episode, Step
from picocontext_diagnostics.episodes.fixtures import OrderLookup, order_lookup
from picocontext_diagnostics.episodes.grading import ContextCheck

ORDER_STEP_ID = "order-lookup"


def order_lookup_episode(order: OrderLookup | None = None) -> Episode:
    """The order lookup as a one-step episode over its own snapshot."""
    task = order or order_lookup()
    step = Step(
        id=ORDER_STEP_ID,
        records=(),
        expected_facts=task.expected.model_dump(),
        answer_record_id=None,
    )
    return Episode(
        title=task.title,
        check=ContextCheck.ORDER_FACTS,
        initial=task.snapshot,
        steps=(step,),
        noise_lines=len(task.noise_lines),
        forbidden_terms=task.forbidden_terms,
    )


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _clip(text: str, max_bytes: int) -> tuple[str, bool]:
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text, False
    return raw[:max_bytes].decode("utf-8", errors="ignore"), True


class DeterministicOrderBackend:
    """Satisfies :class:`picocontext.ModelBackend` for prompts over the order lookup."""

    # Its rules delete the stale order notes through edit_context (an ``auto`` editable
    # policy asks it for tool calls, as DeterministicNotebookBackend).
    decision_protocol = "tool-call"

    def __init__(self, order: OrderLookup) -> None:
        self.order = order
        self.calls = 0

    @property
    def model_id(self) -> str:
        return "deterministic-order-lookup"

    def is_order_lookup(self, context: Snapshot) -> bool:
        """Whether ``context`` holds records of the order lookup."""
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

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        self.calls += 1
        context = prompt.input.context
        if prompt.input.phase is Phase.EDIT:
            return self._decision(context, max_tokens)
        text, clipped = _clip(self.order_answer(context), max_tokens)
        return ModelResponse(
            text=text, generated_tokens=_utf8_len(text), reached_token_limit=clipped
        )

    def _decision(self, context: Snapshot, max_tokens: int) -> ModelResponse:
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
