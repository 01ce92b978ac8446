"""The verdict above the result columns: who won, and one sortable table that shows why.

A comparison's columns show everything; this view says who won. Its title names the winner
(the full sentence is its tooltip; the window's status line carries it in full), and it renders a
:class:`~picocontext_diagnostics.verdict.Verdict` with the columns of
:mod:`picocontext_playground.runverdict` (the same ones the reports print), sorts numerically
on any header, and highlights the winner's row wherever sorting moves it. It stays hidden until
a run has finished, so it takes no space before there is something to conclude.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from picocontext_diagnostics.verdict import Verdict
from picocontext_playground.runverdict import Cell, columns
from picocontext_playground.widgets import MUTED

SORT_ROLE = Qt.ItemDataRole.UserRole + 1
NAME_ROLE = Qt.ItemDataRole.UserRole + 2  # the policy a row belongs to
WINNER_BACKGROUND = "#e3f4e8"
FAILED_TEXT = "#b3261e"
MAX_VISIBLE_ROWS = 6
ROW_PADDING = 6  # pixels above the text height: compact rows keep the columns in view


SORT_HINT = "Click a header to sort."


def hint_text(verdict: Verdict | None) -> str:
    """What the highlighted row means for this verdict: "the least model work" only when
    another policy passed too (a sole passer may have cost more than those that failed)."""
    passing = [] if verdict is None else [r for r in verdict.rows if r.passed]
    if verdict is None or verdict.winner is None:
        return f"No row passed every check. {SORT_HINT}"
    if len(passing) == 1 and len(verdict.rows) > 1:
        return f"The highlighted row is the only one that passed every check. {SORT_HINT}"
    return f"The highlighted row passed every check with the least model work. {SORT_HINT}"


def title_text(verdict: Verdict) -> str:
    """``Verdict: Editable won`` (or that no policy passed every check)."""
    if verdict.winner is None:
        return "Verdict: no policy passed every check"
    label = next(r.totals.label for r in verdict.rows if r.totals.name == verdict.winner)
    return f"Verdict: {label} won"


class SortItem(QTableWidgetItem):
    """A cell that sorts by its key (numbers as numbers), not by its text."""

    def __init__(self, cell: Cell) -> None:
        super().__init__(cell.text)
        self.setData(SORT_ROLE, cell.key)
        self.setToolTip(cell.text)

    def __lt__(self, other: QTableWidgetItem) -> bool:
        mine, theirs = self.data(SORT_ROLE), other.data(SORT_ROLE)
        if isinstance(mine, int | float) and isinstance(theirs, int | float):
            return bool(mine < theirs)
        return str(mine) < str(theirs)


class VerdictView(QWidget):
    """Title and table; :meth:`show_verdict` fills them, :meth:`clear` hides the view."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.verdict: Verdict | None = None
        self.sentence = ""
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 4)
        self.title = QLabel()
        self.title.setObjectName("verdictTitle")
        self.title.setWordWrap(False)
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        font = QFont(self.title.font())
        font.setPointSize(font.pointSize() + 1)
        font.setBold(True)
        self.title.setFont(font)
        self.hint = QLabel(hint_text(None))
        self.hint.setStyleSheet(f"color: {MUTED};")
        self.hint.setWordWrap(True)
        self.table = QTableWidget()
        self.table.setObjectName("verdictTable")
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setWordWrap(False)
        rows = self.table.verticalHeader()
        rows.setVisible(False)
        rows.setMinimumSectionSize(1)
        rows.setDefaultSectionSize(self.table.fontMetrics().height() + ROW_PADDING)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        top = QHBoxLayout()
        top.addWidget(self.title)
        top.addWidget(self.hint, 1)
        layout.addLayout(top)
        layout.addWidget(self.table)
        self.setVisible(False)

    def clear(self) -> None:
        self.verdict = None
        self.table.setSortingEnabled(False)
        self.table.clear()
        self.table.setRowCount(0)
        self.title.setText("")
        self.title.setToolTip("")
        self.sentence = ""
        self.setVisible(False)

    def show_verdict(self, verdict: Verdict, sentence: str | None = None) -> None:
        """Fill the table in rank order; ``sentence`` overrides the verdict's own (for a
        stopped run)."""
        self.verdict = verdict
        self.sentence = sentence or verdict.sentence
        cols = columns(verdict)
        self.table.setSortingEnabled(False)
        self.table.clear()
        self.table.setColumnCount(len(cols))
        self.table.setRowCount(len(verdict.rows))
        for c, column in enumerate(cols):
            header = QTableWidgetItem(column.header)
            header.setToolTip(column.tip)
            self.table.setHorizontalHeaderItem(c, header)
        for r, row in enumerate(verdict.rows):
            for c, column in enumerate(cols):
                item = SortItem(column.cell(row))
                item.setToolTip(item.text())  # a cell cut by a narrow window reads whole
                if column.numeric:
                    item.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                self._style(item, row.totals.name, row.passed)
                self.table.setItem(r, c, item)
        self.title.setText(title_text(verdict))
        self.title.setToolTip(self.sentence)
        self.hint.setText(hint_text(verdict))
        self._fit(len(cols))
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.setVisible(True)

    def _style(self, item: QTableWidgetItem, name: str, passed: bool) -> None:
        assert self.verdict is not None
        item.setData(NAME_ROLE, name)
        if name == self.verdict.winner:
            item.setBackground(QBrush(QColor(WINNER_BACKGROUND)))
            font = item.font()
            font.setBold(True)
            item.setFont(font)
        elif not passed:
            item.setForeground(QBrush(QColor(FAILED_TEXT)))

    def _fit(self, count: int) -> None:
        header = self.table.horizontalHeader()
        for c in range(count - 1):
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(count - 1, QHeaderView.ResizeMode.Stretch)
        rows = min(self.table.rowCount(), MAX_VISIBLE_ROWS)
        height = header.sizeHint().height() + 2 * self.table.frameWidth() + 4
        height += sum(self.table.rowHeight(r) for r in range(rows))
        if self.table.horizontalScrollBar().isVisible():
            height += self.table.horizontalScrollBar().sizeHint().height()
        self.table.setFixedHeight(height)

    # -- what tests and the window ask -----------------------------------------------------
    def _item(self, row: int, column: int) -> QTableWidgetItem:
        item = self.table.item(row, column)
        assert item is not None  # every cell is filled by show_verdict
        return item

    def row_names(self) -> list[str]:
        """Policy names in the order the table currently shows them."""
        return [str(self._item(r, 0).data(NAME_ROLE)) for r in range(self.table.rowCount())]

    def highlighted(self) -> list[str]:
        """Names of the rows drawn with the winner's background."""
        winner = QColor(WINNER_BACKGROUND)
        return [
            name
            for r, name in enumerate(self.row_names())
            if self._item(r, 0).background().color() == winner
        ]

    def headers(self) -> list[str]:
        items = [self.table.horizontalHeaderItem(c) for c in range(self.table.columnCount())]
        return [i.text() if i is not None else "" for i in items]

    def cell(self, name: str, header: str) -> str:
        """The text in policy ``name``'s row under ``header``."""
        return self._item(self.row_names().index(name), self.headers().index(header)).text()


__all__ = ["VerdictView"]
