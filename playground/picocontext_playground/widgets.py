"""The result card and step table of a policy column, and the look every result widget shares:
pass/fail marks, colours (one per policy column), selectable labels and excerpts.

Each widget is handed a finished object (an outcome, a step) and renders it; none of them
computes a grade or a count. The charts live in :mod:`~picocontext_playground.charts`, the
scrolling text views in :mod:`~picocontext_playground.text_views`.
"""

from __future__ import annotations

import html
from collections.abc import Callable

from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QColor, QFont, QHelpEvent, QResizeEvent, QTextOption
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QTextBrowser,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from picocontext_playground.comparison import plain_failure
from picocontext_playground.results import PolicyOutcome, StepView
from picocontext_playground.runverdict import seconds_text

PASS = "\u2713"
FAIL = "\u2717"
ARROW = "\u2192"
GREEN = "#1b7a3a"
RED = "#b3261e"
MUTED = "#5f6368"
# One colour per policy column, in order (colour-blind friendly, Okabe–Ito).
POLICY_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")


def policy_color(index: int) -> QColor:
    return QColor(POLICY_COLORS[index % len(POLICY_COLORS)])


def _num(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def selectable_label(text: str = "", *, wrap: bool = True) -> QLabel:
    label = QLabel(text)
    label.setWordWrap(wrap)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


CARD_ANSWER_CHARS = 240
ZERO_WIDTH_SPACE = "\u200b"


def breakable(text: str) -> str:
    """JSON without spaces gets a line-break opportunity after each comma, so a label wraps
    between entries instead of cutting a value such as receipt-4410 in two."""
    return text.replace(",", "," + ZERO_WIDTH_SPACE)


def elide(text: str, limit: int) -> str:
    """``text`` cut at the last word boundary before ``limit`` characters, with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > limit // 2 else limit].rstrip(" ;,") + "\u2026"


def card_excerpt(text: str, limit: int = CARD_ANSWER_CHARS) -> str:
    """A card shows the start of a long answer and says, in words, that it did so."""
    if len(text) <= limit:
        return text
    rest = len(text) - limit
    return f"{text[:limit]}… (+{rest:,} more characters; full answer in the Decisions tab)"


def prompt_line(outcome: PolicyOutcome, unit: str) -> str:
    """The working context when the first turn started → the last input sent, and the first
    step whose prompt did not fit (so the card agrees with the chart and Next input)."""
    last = next((s for s in reversed(outcome.steps) if s.prompt_after is not None), None)
    where = f", {last.step_id}" if last is not None else ""
    short = "bytes" if "bytes" in unit else "tokens"
    text = (
        f"Prompt {_num(outcome.prompt_before)} {ARROW} {_num(outcome.prompt_after)} {short} "
        f"(first turn's start {ARROW} last sent{where})"
    )
    rejected = next((s for s in outcome.steps if s.rejected_prompt is not None), None)
    if rejected is not None and rejected.rejected_prompt is not None:
        text += (
            f" · {rejected.step_id} started at {rejected.rejected_prompt.token_count:,}: "
            f"did not fit (over the window by {rejected.over_window_by or 0:,})"
        )
    return text


def empty_tab_hint(text: str, on_example: Callable[[], object]) -> tuple[QWidget, QPushButton]:
    """The line an empty Manifest or Digest tab shows: what to open, and an Open example
    button (hidden by the tab once something is loaded)."""
    hint = QWidget()
    row = QHBoxLayout(hint)
    row.setContentsMargins(0, 0, 0, 0)
    label = QLabel(text)
    label.setWordWrap(True)
    button = QPushButton("Open example")
    button.clicked.connect(on_example)
    row.addWidget(label, 1)
    row.addWidget(button)
    return hint, button


class ResultCard(QFrame):
    """Checks, prompt size before → after, totals, calls, time, answer and failure."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ResultCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setStyleSheet(
            "#ResultCard { background: #ffffff; border: 1px solid #c8ccd0; border-radius: 6px; }"
        )
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 10, 12, 10)
        layout.setSpacing(4)
        self.title = selectable_label()
        title_font = QFont(self.font())
        title_font.setPointSize(title_font.pointSize() + 2)
        title_font.setBold(True)
        self.title.setFont(title_font)
        self.headline = selectable_label()
        self.checks = selectable_label()
        self.prompt = selectable_label()
        self.usage = selectable_label()
        self.calls = selectable_label()
        self.answer = selectable_label()
        self.failure = selectable_label()
        self.failure.setStyleSheet(f"color: {RED};")
        for widget in (
            self.title,
            self.headline,
            self.checks,
            self.prompt,
            self.usage,
            self.calls,
            self.answer,
            self.failure,
        ):
            layout.addWidget(widget)
        self.clear()

    def clear(self) -> None:
        for label in (self.headline, self.checks, self.prompt, self.usage, self.calls):
            label.setText("")
        self.answer.setText("")
        self.failure.setText("")
        self.failure.hide()

    def set_title(self, title: str, color: QColor) -> None:
        self.title.setText(title)
        self.title.setStyleSheet(f"color: {color.name()};")

    def show_outcome(self, outcome: PolicyOutcome, unit: str) -> None:
        n = outcome.planned_steps
        if outcome.passed:
            self.headline.setText(f"{PASS} Every context and answer check passed")
            self.headline.setStyleSheet(f"color: {GREEN}; font-weight: bold;")
        else:
            self.headline.setText(f"{FAIL} Some checks failed — see the steps below")
            self.headline.setStyleSheet(f"color: {RED}; font-weight: bold;")
        self.checks.setText(
            f"Context {outcome.context_passed}/{n} · answers {outcome.answers_passed}/{n}"
        )
        self.prompt.setText(prompt_line(outcome, unit))
        self.usage.setText(
            f"Total input {outcome.total_input:,} · generated {outcome.total_generated:,} · "
            f"prefill computed {outcome.total_prefill:,}"
        )
        calls = outcome.calls_text
        elapsed = seconds_text(outcome.elapsed_seconds)
        self.calls.setText(f"{calls[:1].upper()}{calls[1:]} · {elapsed}")
        last = outcome.last_run
        answer = last.answer if last is not None and last.answer else "(no answer)"
        self.answer.setText(f"Last answer: {breakable(card_excerpt(answer))}")
        self.answer.setToolTip(answer if len(answer) < 4000 else card_excerpt(answer, 4000))
        if outcome.failure:
            self.failure.setText(f"Failure: {plain_failure(outcome.failure)}")
            self.failure.show()
        else:
            self.failure.hide()


class StepTable(QTextBrowser):
    """Per step: both checks and the prompt size on one line, then what it retained and the
    problem, if any, on a line of their own (so a column as narrow as COLUMN_MIN_WIDTH never
    cuts a value off or squeezes a cell to one word per line).

    An HTML table in a text browser rather than a QTableWidget: text wraps only between
    words, long problems are elided (the row's tooltip has everything), and the widget grows
    to show every row."""

    HEADERS = ("Step", "Checks", "Prompt", "Retained", "Problem")
    SHOWN = (("Step", 18), ("Checks", 34), (f"Prompt start {ARROW} sent", 48))
    PROBLEM_CHARS = 90  # a longer problem is cut here; the row's tooltip has all of it

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)
        # Break only between words: a value such as receipt-4410 is never split in two.
        self.setWordWrapMode(QTextOption.WrapMode.WordWrap)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.rows: list[tuple[str, ...]] = []
        self._html_rows: list[str] = []
        self._render()

    def rowCount(self) -> int:
        return len(self.rows)

    def cell(self, row: int, column: int) -> str:
        """Plain text of one cell (what the row shows, without colours)."""
        return self.rows[row][column]

    def show_steps(self, outcome: PolicyOutcome) -> None:
        self.rows, self._html_rows = [], []
        for step in outcome.steps:
            self._append(step)
        for missing in range(len(outcome.steps), outcome.planned_steps):
            cells = (f"step-{missing + 1}", "not run", "", "", "the episode stopped earlier")
            self.rows.append(cells)
            self._html_rows.append(
                f"<tr><td>{cells[0]}</td><td colspan='2'>not run</td></tr>"
                f"<tr><td></td><td colspan='2' style='color:{MUTED};'>{cells[4]}</td></tr>"
            )
        self._render()

    def add_step(self, step: StepView) -> None:
        self._append(step)
        self._render()

    def clear_rows(self) -> None:
        self.rows, self._html_rows = [], []
        self._render()

    def _append(self, step: StepView) -> None:
        # After a run failure the answer is absent or partial; its parse error adds nothing.
        answer_problem = None if step.failure else step.answer_problem
        failure = plain_failure(step.failure) if step.failure else None
        problems = [p for p in (failure, step.context_problem, answer_problem) if p]
        retained = "; ".join(f"{k}={v}" for k, v in sorted(step.retained.items())) or "(none)"
        context = f"{PASS if step.context_passed else FAIL} context"
        answer = f"{PASS if step.answer_passed else FAIL} answer"
        sent = "did not fit" if step.rejected_prompt is not None else _num(step.prompt_after)
        prompt = f"{_num(step.prompt_before)} {ARROW} {sent}"
        cells = (step.step_id, f"{context} {answer}", prompt, retained, "; ".join(problems))
        self.rows.append(cells)

        def mark(text: str, ok: bool) -> str:
            kept_together = html.escape(text).replace(" ", "&nbsp;")
            return f'<span style="color:{GREEN if ok else RED};">{kept_together}</span>'

        detail = f"<span style='color:{MUTED};'>kept</span> {html.escape(retained)}"
        if cells[4]:
            problem = html.escape(elide(cells[4], self.PROBLEM_CHARS))
            detail += f"<br><span style='color:{RED};'>{problem}</span>"
        self._html_rows.append(
            "<tr>"
            f"<td><b>{html.escape(step.step_id)}</b></td>"
            f"<td>{mark(context, step.context_passed)} {mark(answer, step.answer_passed)}</td>"
            f"<td>{html.escape(prompt)}</td>"
            "</tr>"
            f"<tr><td></td><td colspan='2' style='padding-bottom:4px;'>{detail}</td></tr>"
        )

    def _render(self) -> None:
        head = "".join(f'<th align="left" width="{w}%">{h}</th>' for h, w in self.SHOWN)
        self.setHtml(
            '<table width="100%" cellspacing="0" cellpadding="2">'
            f'<tr style="background-color:#eef1f4;">{head}</tr>'
            + "".join(self._html_rows)
            + "</table>"
        )
        self.fit()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.fit()  # wrapped cells need a new height when the width changes

    def row_at(self, point: QPointF) -> int | None:
        """The data row under ``point`` (viewport coordinates), if any."""
        cursor = self.cursorForPosition(point.toPoint())
        table = cursor.currentTable()
        if table is None:
            return None
        row = (table.cellAt(cursor).row() - 1) // 2  # row 0 is the header; two per step
        return row if 0 <= row < len(self.rows) else None

    def row_tooltip(self, row: int) -> str:
        cells = self.rows[row]
        lines = [f"{h}: {c}" for h, c in zip(self.HEADERS, cells, strict=True) if c]
        return "\n".join(lines)

    def viewportEvent(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            row = self.row_at(QPointF(event.pos()))
            if row is None:
                QToolTip.hideText()
            else:
                QToolTip.showText(event.globalPos(), self.row_tooltip(row), self)
            return True
        return super().viewportEvent(event)

    def fit(self) -> None:
        """Grow to show every row (the page scrolls, not the table)."""
        document = self.document()
        document.setTextWidth(self.viewport().width())
        height = int(document.size().height()) + 2 * self.frameWidth() + 2
        if height != self.height():
            self.setFixedHeight(height)
