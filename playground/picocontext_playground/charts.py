"""The painted charts of a comparison: the prompt size per step of every policy
(:class:`TokenChart`) and one step's exact next input by section against the context window
(:class:`SectionBar`).

Both are drawn with QPainter from finished numbers (no QtCharts); :func:`nice_step` is the
axis rule the HTML report's charts share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPointF, QRectF, QSize, Qt
from PySide6.QtGui import (
    QColor,
    QFontMetrics,
    QHelpEvent,
    QPainter,
    QPaintEvent,
    QPen,
    QResizeEvent,
)
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from picocontext_playground.results import PolicyOutcome
from picocontext_playground.sections import Section, SectionSize
from picocontext_playground.widgets import FAIL, MUTED, RED, policy_color


def nice_step(top: float) -> int:
    """A round tick step (1, 2, 2.5 or 5 times a power of ten) giving about five ticks up to
    ``top``; the window's chart and the HTML report's charts share it."""
    raw = max(top / 5, 1)
    magnitude = 10 ** (len(str(int(raw))) - 1)
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * magnitude:
            return int(factor * magnitude)
    return int(10 * magnitude)


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
