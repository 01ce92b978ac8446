"""The exact next input split by what it is made of, for the window-by-section bar.

A prompt is one token sequence; people want to know what fills it: the system text, the task
and its requests, the history the policy kept, tool results, the index or digest views a
policy shows instead of history, the runtime's own control exchange, and the output the
budget keeps free. Each part is located in the prompt's rendered text (in message order, the
way the chat format verified it) and measured by counting the tokens of the rendered text up
to that point with the model's own counter, so the parts add up to the prompt's exact size.
A part's message header and delimiters count with that part.

Qt-free: the comparison computes these on the worker thread and the widgets only draw them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from picocontext import ModelInput, PreparedPrompt, Record, Role
from picocontext.policies import NAVIGATED_INDEX_HEADER, SUMMARY_MARK

TextCounter = Callable[[str], int]


class Section(StrEnum):
    SYSTEM = "system"
    TASK = "task"
    HISTORY = "history"
    TOOLS = "tool results"
    VIEWS = "views"
    CONTROL = "control"
    RESERVED = "reserved output"

    @property
    def label(self) -> str:
        return _LABELS[self]

    @property
    def explanation(self) -> str:
        return _EXPLAINED[self]


_LABELS = {
    Section.SYSTEM: "System",
    Section.TASK: "Task and requests",
    Section.HISTORY: "Kept history",
    Section.TOOLS: "Tool results",
    Section.VIEWS: "Archive and index views",
    Section.CONTROL: "Control exchange",
    Section.RESERVED: "Reserved output",
}
_EXPLAINED = {
    Section.SYSTEM: "system instructions and system records (with any tool specifications)",
    Section.TASK: "the protected task and the requests of each update",
    Section.HISTORY: "answers and notes the policy kept",
    Section.TOOLS: "incoming data delivered as tool results",
    Section.VIEWS: "summaries, history indexes and digest maps shown instead of history",
    Section.CONTROL: "the runtime's calls, results and closing guidance during this turn",
    Section.RESERVED: "kept free for the answer; never filled by input",
}


class SectionSize(BaseModel):
    """One section's share of a prompt, in the counter's unit."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    section: Section
    """What this part of the prompt is."""
    amount: int
    """Its size in the counter's unit (model tokens, or UTF-8 bytes for the stand-in)."""


def classify(record: Record, control: bool) -> Section:
    """Which section a record of the next input belongs to."""
    if record.role in (Role.SYSTEM, Role.DEVELOPER):
        return Section.SYSTEM
    if control:
        return Section.VIEWS if record.role is Role.USER else Section.CONTROL
    if record.role is Role.TOOL:
        return Section.TOOLS
    if record.body.startswith((SUMMARY_MARK, NAVIGATED_INDEX_HEADER)):
        return Section.VIEWS
    if record.role is Role.USER and record.protected:
        return Section.TASK
    return Section.HISTORY


def _pieces(model_input: ModelInput) -> list[tuple[Section, str]]:
    pieces = [(Section.SYSTEM, model_input.instructions)]
    pieces += [(classify(r, False), r.body) for r in model_input.context.records]
    pieces += [(classify(r, True), r.body) for r in model_input.control_records]
    pieces.append((Section.CONTROL, model_input.trailing_guidance))
    return pieces


def _boundaries(rendered: str, pieces: Sequence[tuple[Section, str]]) -> list[tuple[Section, int]]:
    """Each piece's section and where its text ends in ``rendered``; a piece that cannot be
    found (an empty body, a body the format escaped) is left to the next one found."""
    out: list[tuple[Section, int]] = []
    position = 0
    for section, text in pieces:
        if not text:
            continue
        found = rendered.find(text, position)
        if found < 0:
            continue
        position = found + len(text)
        if out and out[-1][0] is section:
            out[-1] = (section, position)  # one count per run of the same section
        else:
            out.append((section, position))
    return out


def prompt_sections(
    prompt: PreparedPrompt, count: TextCounter, reserved_output: int
) -> tuple[SectionSize, ...]:
    """The sections of ``prompt`` in order of first appearance, plus the reserved output.
    Their input amounts add up to ``prompt.token_count`` exactly (whatever follows the last
    located piece, such as the generation prompt, counts with the control exchange)."""
    rendered = prompt.rendered
    total = prompt.token_count
    sizes: dict[Section, int] = {}
    done = 0
    marks = _boundaries(rendered, _pieces(prompt.input))
    for section, end in marks:
        upto = min(total, max(done, count(rendered[:end])))
        sizes[section] = sizes.get(section, 0) + upto - done
        done = upto
    if done < total:
        sizes[Section.CONTROL] = sizes.get(Section.CONTROL, 0) + total - done
    ordered = [SectionSize(section=s, amount=a) for s, a in sizes.items() if a > 0]
    ordered.append(SectionSize(section=Section.RESERVED, amount=reserved_output))
    return tuple(ordered)


def utf8_bytes(text: str) -> int:
    """The scripted model's counter: UTF-8 bytes."""
    return len(text.encode("utf-8"))


__all__ = [
    "Section",
    "SectionSize",
    "TextCounter",
    "classify",
    "prompt_sections",
    "utf8_bytes",
]
