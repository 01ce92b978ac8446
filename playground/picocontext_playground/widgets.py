"""Result widgets. Each one is handed a finished object (an outcome, a snapshot, a run) and
renders it; none of them computes a grade or a count.

Long texts live in scrollable, selectable views and are never shortened.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPointF, QRectF, QSize, Qt, QUrl
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetrics,
    QHelpEvent,
    QPainter,
    QPaintEvent,
    QPen,
    QResizeEvent,
    QTextOption,
)
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QTextBrowser,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from picocontext import Record, RunReport, Snapshot
from picocontext_playground.comparison import (
    PolicyOutcome,
    StepView,
    clip_result,
    no_decision_text,
    plain_failure,
    prefetch_text,
    tool_calls_text,
)
from picocontext_playground.qtenv import monospace_font
from picocontext_playground.runverdict import seconds_text
from picocontext_playground.sections import Section, SectionSize
from picocontext_playground.textreport import record_header

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


def nice_step(top: float) -> int:
    """A round tick step (1, 2, 2.5 or 5 times a power of ten) giving about five ticks up to
    ``top``; the window's chart and the HTML report's charts share it."""
    raw = max(top / 5, 1)
    magnitude = 10 ** (len(str(int(raw))) - 1)
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * magnitude:
            return int(factor * magnitude)
    return int(10 * magnitude)


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


@dataclass(frozen=True, slots=True)
class ChartSeries:
    """One policy's bars: ``(before, after)`` prompt sizes per step, ``None`` where no turn
    or no completion prompt exists."""

    label: str
    color: QColor
    points: tuple[tuple[int | None, int | None] | None, ...]


PALE_BAR_NOTE = (
    "Pale bar: the working context when the turn started, before the policy trimmed or "
    "replaced anything; it may pass the window line because that text is never sent."
)


class TokenChart(QWidget):
    """Grouped bars per step: a pale bar for the prompt at the start of the turn and a solid
    bar for the exact next input, one pair per policy; painted with QPainter (no QtCharts)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.series: list[ChartSeries] = []
        self.steps: list[str] = []
        self.unit = "tokens"
        self.limit: int | None = None
        self.setMinimumHeight(170)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)

    def sizeHint(self) -> QSize:
        return QSize(800, 240)

    def set_data(
        self,
        steps: Sequence[str],
        series: Sequence[ChartSeries],
        unit: str,
        limit: int | None = None,
    ) -> None:
        self.steps = list(steps)
        self.series = list(series)
        self.unit = unit
        self.limit = limit
        self.update()

    def clear(self) -> None:
        self.set_data([], [], self.unit)

    def maximum(self) -> int:
        values = [
            v for s in self.series for p in s.points if p is not None for v in p if v is not None
        ]
        if self.limit is not None:
            values.append(self.limit)
        return max(values, default=0)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.fillRect(self.rect(), QColor("#ffffff"))
        metrics = QFontMetrics(self.font())
        line = metrics.height()
        painter.setPen(QColor("#202124"))
        painter.drawText(
            QPointF(8, line),
            f"Prompt size per step in {self.unit}: solid bar = the exact input sent",
        )
        painter.setPen(QColor(MUTED))
        painter.drawText(QPointF(8, line * 2), PALE_BAR_NOTE)
        if not self.steps or not self.series:
            painter.setPen(QColor(MUTED))
            painter.drawText(
                self.rect(), Qt.AlignmentFlag.AlignCenter, "Run a comparison to see prompt sizes."
            )
            painter.end()
            return
        top_value = self.maximum()
        tick = nice_step(top_value)
        axis_top = ((top_value // tick) + 1) * tick
        left = metrics.horizontalAdvance(f"{axis_top:,}") + 16
        legend_h = line + 8
        plot = QRectF(left, line * 3, self.width() - left - 12, 0)
        plot.setBottom(self.height() - line - 8 - legend_h)
        # grid and axis labels
        for value in range(0, axis_top + 1, tick):
            y = plot.bottom() - plot.height() * value / axis_top
            painter.setPen(QPen(QColor("#e0e3e7"), 1))
            painter.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y))
            painter.setPen(QColor(MUTED))
            text = f"{value:,}"
            painter.drawText(
                QPointF(plot.left() - 6 - metrics.horizontalAdvance(text), y + line / 3), text
            )
        if self.limit is not None:
            y = plot.bottom() - plot.height() * self.limit / axis_top
            painter.setPen(QPen(QColor(RED), 1, Qt.PenStyle.DashLine))
            painter.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y))
            painter.drawText(QPointF(plot.left() + 4, y - 4), f"window {self.limit:,}")
        group_w = plot.width() / len(self.steps)
        bar_w = min(group_w * 0.8 / len(self.series), 60.0)
        for g, step in enumerate(self.steps):
            x0 = plot.left() + g * group_w + (group_w - bar_w * len(self.series)) / 2
            for s_index, series in enumerate(self.series):
                point = series.points[g] if g < len(series.points) else None
                x = x0 + s_index * bar_w
                if point is None:
                    painter.setPen(QColor(MUTED))
                    painter.drawText(
                        QRectF(x, plot.bottom() - line * 1.5, bar_w, line),
                        Qt.AlignmentFlag.AlignCenter,
                        "—",
                    )
                    continue
                before, after = point
                for amount, alpha in ((before, 70), (after, 255)):
                    if amount is None:
                        continue
                    h = plot.height() * amount / axis_top
                    color = QColor(series.color)
                    color.setAlpha(alpha)
                    inset = 0.0 if alpha == 70 else bar_w * 0.18
                    painter.fillRect(
                        QRectF(x + inset + 1, plot.bottom() - h, bar_w - 2 * inset - 2, h), color
                    )
                if after is None:
                    painter.setPen(QColor(RED))
                    painter.drawText(
                        QRectF(x, plot.bottom() - line * 1.2, bar_w, line),
                        Qt.AlignmentFlag.AlignCenter,
                        FAIL,
                    )
            painter.setPen(QColor("#202124"))
            painter.drawText(
                QRectF(plot.left() + g * group_w, plot.bottom() + 4, group_w, line),
                Qt.AlignmentFlag.AlignHCenter,
                step,
            )
        painter.setPen(QPen(QColor("#9aa0a6"), 1))
        painter.drawLine(QPointF(plot.left(), plot.bottom()), QPointF(plot.right(), plot.bottom()))
        # legend
        x = plot.left()
        y = self.height() - legend_h + 4
        for series in self.series:
            painter.fillRect(QRectF(x, y, 14, line - 4), series.color)
            painter.setPen(QColor("#202124"))
            painter.drawText(QPointF(x + 20, y + line - 6), series.label)
            x += 40 + metrics.horizontalAdvance(series.label)
        painter.end()


def chart_series(outcomes: Sequence[PolicyOutcome]) -> tuple[list[str], list[ChartSeries]]:
    """Steps and bars for :class:`TokenChart` from finished outcomes (planned steps that never
    ran show as a dash)."""
    steps: list[str] = []
    for outcome in outcomes:
        for step in outcome.steps:
            if step.step_id not in steps:
                steps.append(step.step_id)
        planned = max((o.planned_steps for o in outcomes), default=0)
        while len(steps) < planned:
            steps.append(f"step-{len(steps) + 1}")
    series: list[ChartSeries] = []
    for index, outcome in enumerate(outcomes):
        by_id = {s.step_id: s for s in outcome.steps}
        points: list[tuple[int | None, int | None] | None] = []
        for step_id in steps:
            found = by_id.get(step_id)
            points.append(None if found is None else (found.prompt_before, found.prompt_after))
        series.append(ChartSeries(outcome.label, policy_color(index), tuple(points)))
    return steps, series


class TextPane(QPlainTextEdit):
    """Read-only monospaced text that scrolls; used for diffs and exact inputs."""

    def __init__(self, placeholder: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setFont(monospace_font())
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.setPlaceholderText(placeholder)


def _pre(text: str) -> str:
    return (
        '<pre style="font-family: monospace; white-space: pre-wrap; margin: 2px 0 8px 0;">'
        + html.escape(text)
        + "</pre>"
    )


class ContextView(QTextBrowser):
    """Records with role, protection, id and body. Against a reference snapshot, records that
    were deleted (shown struck out, red) or replaced (amber) are highlighted."""

    FOLDED_LINES = 1  # lines of a protected body shown while it is folded

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)
        self.document().setDefaultFont(self.font())
        self.mono = monospace_font()
        # Protected prompts are the same in every column; they start folded to one line.
        self.unfolded: set[str] = set()
        self._shown: tuple[str, Snapshot, Snapshot | None, bool] | None = None
        self.anchorClicked.connect(self._toggle)

    def _toggle(self, url: QUrl) -> None:
        if url.scheme() != "fold" or self._shown is None:
            return
        record_id = url.path()
        self.unfolded.symmetric_difference_update({record_id})
        position = self.verticalScrollBar().value()
        self.show_context(*self._shown)
        self.verticalScrollBar().setValue(position)

    def show_context(
        self, title: str, snapshot: Snapshot, reference: Snapshot | None, working: bool
    ) -> None:
        """``working``: show ``snapshot`` with deletions from ``reference`` re-inserted as
        ghosts; otherwise show ``snapshot`` as the transcript, tagging what the working
        context (``reference``) deleted or replaced."""
        self._shown = (title, snapshot, reference, working)
        parts = [
            f"<p><b>{html.escape(title)}</b> · revision {snapshot.revision} · "
            f"{len(snapshot.records)} records</p>"
        ]
        if working and reference is not None:
            before = {r.id: r for r in reference.records}
            live = {r.id for r in snapshot.records}
            pending = list(snapshot.records)
            for prior in reference.records:
                if prior.id not in live:
                    parts.append(self._record_html(prior, "deleted"))
                    continue
                # records that exist only in the working context keep their live position
                while pending and pending[0].id != prior.id and pending[0].id not in before:
                    parts.append(self._record_html(pending.pop(0), "added"))
                if pending and pending[0].id == prior.id:
                    record = pending.pop(0)
                    state = "replaced" if record.body != prior.body else ""
                    parts.append(self._record_html(record, state))
            for record in pending:
                parts.append(self._record_html(record, "added" if record.id not in before else ""))
        else:
            now = {r.id: r for r in reference.records} if reference is not None else None
            for record in snapshot.records:
                state = ""
                if now is not None:
                    if record.id not in now:
                        state = "deleted"
                    elif now[record.id].body != record.body:
                        state = "replaced"
                parts.append(self._record_html(record, state))
        self.setHtml("".join(parts))

    def _record_html(self, record: Record, state: str) -> str:
        head = record_header(record, role_first=True)
        style = "margin: 0;"
        tag = ""
        if state == "deleted":
            style += f" color: {RED}; text-decoration: line-through;"
            tag = f' <span style="color:{RED}; font-weight:bold;">DELETED</span>'
        elif state == "added":
            tag = ' <span style="color:#1b5e9a; font-weight:bold;">NOT IN TRANSCRIPT</span>'
        elif state == "replaced":
            style += " background-color: #fff4cc;"
            tag = ' <span style="color:#8a5a00; font-weight:bold;">REPLACED</span>'
        body = record.body if record.body else "(empty body)"
        lines = body.split("\n")
        fold = ""
        if record.protected and len(lines) > self.FOLDED_LINES:
            link = f"fold:{html.escape(record.id)}"
            if record.id in self.unfolded:
                fold = f' <a href="{link}">fold</a>'
            else:
                body = "\n".join(lines[: self.FOLDED_LINES]) + " \u2026"
                fold = f' <a href="{link}">show all {len(lines):,} lines</a>'
        return (
            f'<div style="{style}"><p style="margin: 6px 0 0 0; color: {MUTED};">'
            f"<b>{html.escape(head)}</b>{tag}{fold}</p>"
            f'<pre style="font-family: {html.escape(self.mono.family())}, monospace; '
            f'white-space: pre-wrap; margin: 2px 0 6px 0; {style}">'
            f"{html.escape(body)}</pre></div>"
        )


class AttemptsView(QTextBrowser):
    """Per step: every decision attempt (outcome, detail, model output, arguments), then the
    answer in full and why a check failed."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)

    def show_steps(self, steps: Sequence[StepView], live: tuple[str, str] | None = None) -> None:
        """Every finished step; ``live`` (heading, text so far) is the running step's model
        output, streamed while it generates."""
        parts: list[str] = []
        for step in steps:
            parts.append(f"<h4 style='margin: 8px 0 2px 0;'>{html.escape(step.step_id)}</h4>")
            run = step.run
            if run is None:
                parts.append(f"<p>No turn ran: {html.escape(step.failure or '')}</p>")
                continue
            parts.extend(self._attempts(run))
            parts.append("<p style='margin: 6px 0 0 0;'><b>Answer</b></p>")
            parts.append(_pre(run.answer or "(no answer)"))
            answer_problem = None if step.failure else step.answer_problem
            for problem in (step.failure, step.context_problem, answer_problem):
                if problem:
                    parts.append(f"<p style='color:{RED}; margin: 0;'>{html.escape(problem)}</p>")
        if live is not None:
            heading, text = live
            parts.append(f"<h4 style='margin: 8px 0 2px 0;'>{html.escape(heading)}</h4>")
            parts.append(f"<p style='color:{MUTED}; margin: 0;'>Model output so far:</p>")
            parts.append(_pre(text or "(reading the prompt…)"))
        self.setHtml("".join(parts) or "<p>No decisions.</p>")
        if live is not None:
            bar = self.verticalScrollBar()
            bar.setValue(bar.maximum())

    @staticmethod
    def _attempts(run: RunReport) -> list[str]:
        return [*AttemptsView._prefetched(run), *AttemptsView._own(run)]

    @staticmethod
    def _prefetched(run: RunReport) -> list[str]:
        """What the runtime opened for the model before it read (charged, shown first)."""
        if not run.prefetch_steps:
            return []
        head = f"Before the model read: {prefetch_text(run.prefetch_steps)} (charged)"
        out = [f"<p style='margin: 4px 0 0 0; color:{MUTED};'>{html.escape(head)}</p>"]
        for i, step in enumerate(run.prefetch_steps, start=1):
            out.append(
                f"<p style='margin: 4px 0 0 0;'><b>Prefetch {i}</b> · "
                f"<code>{html.escape(step.name)} {html.escape(step.arguments)}</code></p>"
            )
            out.append(_pre(clip_result(step.result)))
        return out

    @staticmethod
    def _own(run: RunReport) -> list[str]:
        if run.tool_steps:
            return AttemptsView._tool_steps(run)
        if not run.attempts:
            why = no_decision_text(run)
            return [f"<p style='color:{MUTED};'>{html.escape(why[:1].upper() + why[1:])}.</p>"]
        out: list[str] = []
        for i, attempt in enumerate(run.attempts, start=1):
            color = GREEN if attempt.accepted else RED
            out.append(
                f"<p style='margin: 4px 0 0 0;'><b>Attempt {i}</b> · "
                f"<span style='color:{color}; font-weight:bold;'>{attempt.outcome.value}</span>"
                f" · {html.escape(attempt.detail)}</p>"
            )
            out.append("<p style='margin: 2px 0 0 0;'>Model output:</p>")
            out.append(_pre(attempt.model_text or "(no text; tool call only)"))
            out.append("<p style='margin: 2px 0 0 0;'>Arguments:</p>")
            out.append(_pre(attempt.arguments or "(none)"))
        return out

    @staticmethod
    def _tool_steps(run: RunReport) -> list[str]:
        """Each navigation / digest call: verb, arguments, accepted or refused, the result."""
        out = [f"<p style='margin: 4px 0 0 0;'>{html.escape(tool_calls_text(run.tool_steps))}</p>"]
        for i, step in enumerate(run.tool_steps, start=1):
            color = GREEN if step.ok else RED
            verdict = "ok" if step.ok else "refused"
            out.append(
                f"<p style='margin: 4px 0 0 0;'><b>Call {i}</b> · "
                f"<code>{html.escape(step.name)} {html.escape(step.arguments)}</code> · "
                f"<span style='color:{color}; font-weight:bold;'>{verdict}</span></p>"
            )
            out.append(_pre(clip_result(step.result)))
        return out


SECTION_COLORS = {
    Section.SYSTEM: "#5f6368",
    Section.TASK: "#0072B2",
    Section.HISTORY: "#009E73",
    Section.TOOLS: "#E69F00",
    Section.VIEWS: "#CC79A7",
    Section.CONTROL: "#56B4E9",
    Section.RESERVED: "#d7dbe0",
}


class SectionBar(QWidget):
    """One step's next input as a stacked bar by section, then the reserved output, drawn
    against the context window (a red line); the legend under it names every section with
    its amount. A prompt that did not fit runs past the line."""

    BAR_HEIGHT = 18

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.sections: tuple[SectionSize, ...] = ()
        self.limit: int | None = None
        self.unit = "tokens"
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMouseTracking(True)
        self._spans: list[tuple[QRectF, SectionSize]] = []
        self._legend_rows = 1

    def show_sections(self, sections: Sequence[SectionSize], window: int | None, unit: str) -> None:
        self.sections, self.limit, self.unit = tuple(sections), window, unit
        self._layout_legend()
        self.updateGeometry()
        self.update()

    def total(self) -> int:
        return sum(s.amount for s in self.sections)

    def legend_items(self) -> list[str]:
        """``Kept history 1,234`` per section, in bar order."""
        return [f"{s.section.label} {s.amount:,}" for s in self.sections]

    def _layout_legend(self) -> None:
        metrics = QFontMetrics(self.font())
        width, rows = 0, 1
        for item in self.legend_items():
            step = metrics.horizontalAdvance(item) + 28
            if width and width + step > max(self.width(), 200):
                rows, width = rows + 1, 0
            width += step
        self._legend_rows = rows

    def sizeHint(self) -> QSize:
        line = QFontMetrics(self.font()).height()
        return QSize(400, self.BAR_HEIGHT + 10 + (line + 4) * self._legend_rows)

    def minimumSizeHint(self) -> QSize:
        return QSize(200, self.sizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        rows = self._legend_rows
        self._layout_legend()
        if rows != self._legend_rows:
            self.updateGeometry()

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            for rect, size in self._spans:
                if rect.contains(QPointF(event.pos())):
                    QToolTip.showText(
                        event.globalPos(),
                        f"{size.section.label}: {size.amount:,} {self.unit} — "
                        f"{size.section.explanation}",
                        self,
                    )
                    return True
            QToolTip.hideText()
            return True
        return super().event(event)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        metrics = QFontMetrics(self.font())
        line = metrics.height()
        self._spans = []
        if not self.sections:
            painter.setPen(QColor(MUTED))
            painter.drawText(QPointF(2, line), "No input was built for this step.")
            painter.end()
            return
        scale_to = max(self.total(), self.limit or 0, 1)
        width = self.width() - 4
        x = 2.0
        for size in self.sections:
            w = width * size.amount / scale_to
            rect = QRectF(x, 2, w, self.BAR_HEIGHT)
            painter.fillRect(rect, QColor(SECTION_COLORS[size.section]))
            self._spans.append((rect, size))
            x += w
        if self.limit is not None:
            wx = 2 + width * self.limit / scale_to
            painter.setPen(QPen(QColor(RED), 2))
            painter.drawLine(QPointF(wx, 0), QPointF(wx, self.BAR_HEIGHT + 4))
        # legend, wrapped to the width
        lx, ly = 2.0, self.BAR_HEIGHT + 8
        for size, item in zip(self.sections, self.legend_items(), strict=True):
            step = metrics.horizontalAdvance(item) + 28
            if lx > 2 and lx + step > self.width():
                lx, ly = 2.0, ly + line + 4
            painter.fillRect(QRectF(lx, ly + 2, 10, line - 4), QColor(SECTION_COLORS[size.section]))
            painter.setPen(QColor("#202124"))
            painter.drawText(QPointF(lx + 14, ly + line - 3), item)
            lx += step
        painter.end()
