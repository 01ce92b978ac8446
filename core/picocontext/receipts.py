"""The runtime's own records of model exchanges: receipts of decisions and tool steps.

A receipt is protected history the runtime writes after a model call (the call as an
assistant record, each result as a tool record), with ids that never collide with the
caller's, including deleted history. Sessions write them; policies render samples of them to
price what every further call adds to a prompt.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from picocontext.backend import ModelToolCall
from picocontext.records import Record, Role, ToolCall


def reserved_ids(*groups: Iterable[Record]) -> set[str]:
    """Every record id, tool-call id and result link in the given record groups."""
    used: set[str] = set()
    for records in groups:
        for record in records:
            used.add(record.id)
            if record.tool_call_id is not None:
                used.add(record.tool_call_id)
            for call in record.tool_calls:
                used.add(call.id)
    return used


class FreshIds:
    """Runtime ids that never collide with caller ids, including deleted history."""

    def __init__(self, used: set[str]) -> None:
        self._used = used

    def __call__(self, preferred: str) -> str:
        candidate = preferred
        n = 0
        while candidate in self._used:
            n += 1
            candidate = f"{preferred}-{n}"
        self._used.add(candidate)
        return candidate


class Receipts:
    """Builds the protected runtime records of model exchanges: the only place their ids are
    spelled. A decision attempt ``n`` and a tool step ``n`` each become one assistant record
    (``runtime-call-n``) whose calls link (``runtime-edit-n-i`` / ``runtime-tool-n-i``) to
    one result record each (``runtime-result-<link>``); a rejected decision is followed by
    ``runtime-feedback-n``. Every id comes from ``fresh``, so none collides with history."""

    def __init__(self, fresh: FreshIds) -> None:
        self._fresh = fresh

    def decision(
        self, attempt: int, calls: Sequence[ModelToolCall], detail: str
    ) -> tuple[Record, ...]:
        """The receipt of a decision: every call answered with the runtime's ``detail``."""
        return self._exchange("edit", attempt, calls, [detail] * len(calls))

    def tools(
        self, step: int, calls: Sequence[ModelToolCall], results: Sequence[str]
    ) -> tuple[Record, ...]:
        """The receipt of one tool step: each call followed by its result text."""
        return self._exchange("tool", step, calls, results)

    def feedback(self, attempt: int, body: str) -> Record:
        return Record(
            id=self._fresh(f"runtime-feedback-{attempt}"),
            role=Role.USER,
            body=body,
            protected=True,
        )

    def _exchange(
        self,
        kind: str,
        step: int,
        calls: Sequence[ModelToolCall],
        results: Sequence[str],
        first: int = 0,
    ) -> tuple[Record, ...]:
        links = [self._fresh(f"runtime-{kind}-{step}-{first + i}") for i in range(len(calls))]
        assistant = Record(
            id=self._fresh(f"runtime-call-{step}"),
            role=Role.ASSISTANT,
            body="",
            protected=True,
            tool_calls=tuple(
                ToolCall(id=link, name=call.name, arguments=call.arguments)
                for link, call in zip(links, calls, strict=True)
            ),
        )
        answers = tuple(
            Record(
                id=self._fresh(f"runtime-result-{link}"),
                role=Role.TOOL,
                body=text,
                protected=True,
                tool_call_id=link,
            )
            for link, text in zip(links, results, strict=True)
        )
        return (assistant, *answers)


def sample_receipt(
    tool: str, step: int = 0, index: int = 0, fresh: FreshIds | None = None
) -> tuple[Record, ...]:
    """The receipt of one call to ``tool`` with empty arguments and an empty result, as the
    tool loop would write it at ``step`` (call ``index``): what a policy renders to price the
    overhead every further call adds to its prompt."""
    call = ModelToolCall(name=tool, arguments="{}")
    return Receipts(fresh or FreshIds(set()))._exchange("tool", step, [call], [""], index)
