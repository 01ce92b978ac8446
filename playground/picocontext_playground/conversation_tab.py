"""The "Conversation" tab: open a conversation, compare policies on it, and see which facts
each policy lost and where they went.

The facts-lost view is a table with one row per question and one column per policy: a cell
says ``in prompt`` when every evidence turn was in the exact prompt the answer came from, and
otherwise where the missing evidence went (``dropped by the window``, ``summarized away``,
``not retrieved``, ``not opened``, or ``no prompt sent`` when the turn failed before
sending, the failure in the tooltip). Selecting a cell shows the
question, the reference, the answer and each evidence turn's fate.

The widget shows state; the diagnostics compute it. It renders a
:class:`~picocontext_diagnostics.conversations.ConversationReport`; "Compare" runs the
:class:`~picocontext_diagnostics.conversations.ConversationRunner` on the deterministic
backend in a ``QThread`` (a second or two, no model) and renders what comes back.
``python -m picocontext_playground.conversation_tab --conversation FILE --screenshot PNG``
renders the tab headless and grabs it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from picocontext import PicoContextError
from picocontext_diagnostics.conversations.conversation_runner import (
    ORACLE,
    ConversationRunner,
    conversation_budget,
)
from picocontext_diagnostics.conversations.format import Conversation, load_conversation
from picocontext_diagnostics.conversations.scores import (
    ConversationReport,
    QuestionResult,
)
from picocontext_diagnostics.policies import BUILTIN_POLICIES, Policy

POLICIES = (
    "oracle",
    "append-only",
    "sliding-window",
    "compaction",
    "retrieval",
    "editable",
    "navigated",
    "distilled",
)
IN_PROMPT = "in prompt"
NO_PROMPT = "no prompt sent"  # the failure itself is in the tooltip and the details
QUESTION_WIDTH = 340
_GOOD = QBrush(QColor(200, 235, 200))
_PARTIAL = QBrush(QColor(255, 236, 179))
_LOST = QBrush(QColor(244, 199, 195))


def cell_text(result: QuestionResult) -> str:
    """``in prompt``, or the distinct reasons the missing evidence gives, in order."""
    if not result.misses:
        return IN_PROMPT
    reasons = [NO_PROMPT if m.reason.startswith("no prompt") else m.reason for m in result.misses]
    return "; ".join(dict.fromkeys(reasons))


def details_text(result: QuestionResult) -> str:
    lines = [
        f"{result.policy} · {result.question_id} ({result.category or 'uncategorized'})",
        f"Question: {result.question}",
        f"Reference: {result.reference}",
        f"Answer: {result.answer or '(none)'}",
    ]
    if result.failure:
        lines.append(f"Failure: {result.failure}")
    lines.append(
        f"Evidence recall {result.evidence_recall:.2f}, F1 {result.answer_f1:.2f}, "
        f"prompt {result.prompt_tokens} tokens, input {result.input_tokens}"
    )
    missing = {m.turn_id: m.reason for m in result.misses}
    for turn in result.evidence:
        lines.append(f"  {turn}: {missing.get(turn, IN_PROMPT)}")
    return "\n".join(lines)


def _policies(names: Sequence[str]) -> list[Policy]:
    known = {**BUILTIN_POLICIES, ORACLE.name: ORACLE}
    return [known[n] for n in names]


class ConversationWorker(QObject):
    """Runs one deterministic comparison off the GUI thread."""

    finished = Signal(object)  # ConversationReport
    failed = Signal(str)

    def __init__(self, conversation: Conversation, window: int, source: str) -> None:
        super().__init__()
        self.conversation = conversation
        self.window = window
        self.source = source

    @Slot()
    def run(self) -> None:
        try:
            self.finished.emit(compare(self.conversation, self.window, self.source))
        except PicoContextError as exc:
            self.failed.emit(exc.message)


def compare(conversation: Conversation, window: int, source: str = "") -> ConversationReport:
    """Every policy on the deterministic backend (UTF-8 bytes), as the CLI runs it."""
    from picocontext_diagnostics.backends import deterministic_backend, provenance

    handle = deterministic_backend()
    runner = ConversationRunner(handle.counter, handle.backend)
    return runner.run(
        conversation,
        _policies(POLICIES),
        conversation_budget(window),
        source=source,
        provenance=provenance(handle),
    )


class ConversationTab(QWidget):
    """Open a conversation or a report; compare; browse the facts-lost view."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.conversation: Conversation | None = None
        self.source = ""
        self.report: ConversationReport | None = None
        self._thread: QThread | None = None
        self._worker: ConversationWorker | None = None
        self._build()

    def _build(self) -> None:
        self.open_button = QPushButton("Open conversation…")
        self.open_button.clicked.connect(self._open_dialog)
        self.report_button = QPushButton("Open report…")
        self.report_button.clicked.connect(self._open_report_dialog)
        self.window_box = QSpinBox()
        self.window_box.setRange(256, 32_768)
        self.window_box.setSingleStep(1_024)
        self.window_box.setValue(4_096)
        self.window_box.setSuffix(" window")
        self.compare_button = QPushButton("Compare (deterministic)")
        self.compare_button.setEnabled(False)
        self.compare_button.clicked.connect(self.start_compare)
        self.status = QLabel("Open a conversation (picocontext.conversation/1) to compare.")
        self.status.setWordWrap(True)
        bar = QHBoxLayout()
        for widget in (self.open_button, self.report_button, self.window_box):
            bar.addWidget(widget)
        bar.addWidget(self.compare_button)
        bar.addStretch(1)
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.table = QTableWidget(0, 0)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.currentCellChanged.connect(self._cell_changed)
        self.details = QPlainTextEdit()
        self.details.setReadOnly(True)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.details)
        split.setStretchFactor(0, 3)
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.status)
        layout.addWidget(self.summary)
        layout.addWidget(split, 1)

    # -- loading ----------------------------------------------------------------------------
    def _open_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Open conversation", "", "Conversations (*.json *.jsonl)"
        )
        if path:
            self.open_conversation(Path(path))

    def _open_report_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open report", "", "Reports (*.json)")
        if path:
            self.open_report(Path(path))

    def open_conversation(self, path: Path) -> bool:
        try:
            conversation = load_conversation(path)
        except PicoContextError as exc:
            self.status.setText(f"Cannot open: {exc.message}")
            return False
        self.conversation, self.source = conversation, path.name
        turns = sum(len(s.turns) for s in conversation.sessions)
        self.status.setText(
            f"{path.name}: {len(conversation.sessions)} sessions, {turns} turns, "
            f"{len(conversation.questions)} questions"
            + ("" if conversation.questions else " (nothing to compare: no questions)")
        )
        self.compare_button.setEnabled(bool(conversation.questions))
        return True

    def open_report(self, path: Path) -> bool:
        try:
            report = ConversationReport.from_json(path.read_bytes())
        except (OSError, ValueError) as exc:
            self.status.setText(f"Cannot open report: {exc}")
            return False
        self.show_report(report)
        return True

    # -- comparing --------------------------------------------------------------------------
    def start_compare(self) -> None:
        if self.conversation is None or self._thread is not None:
            return
        self.compare_button.setEnabled(False)
        self.status.setText(f"Comparing {len(POLICIES)} policies on {self.source}…")
        thread = QThread(self)
        worker = ConversationWorker(self.conversation, self.window_box.value(), self.source)
        worker.moveToThread(thread)
        thread.started.connect(worker.run)
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)
        worker.finished.connect(thread.quit)
        worker.failed.connect(thread.quit)
        thread.finished.connect(self._on_thread_finished)
        self._thread, self._worker = thread, worker
        thread.start()

    @Slot(object)
    def _on_finished(self, report: object) -> None:
        if isinstance(report, ConversationReport):
            self.show_report(report)

    @Slot(str)
    def _on_failed(self, message: str) -> None:
        self.status.setText(f"Comparison failed: {message}")

    @Slot()
    def _on_thread_finished(self) -> None:
        if self._thread is not None:
            self._thread.deleteLater()
        self._thread, self._worker = None, None
        self.compare_button.setEnabled(self.conversation is not None)

    def wait(self, ms: int = 30_000) -> bool:
        """Process events until a running comparison has ended and been shown (headless use
        and tests); False on timeout. The thread's end is delivered through this event loop,
        so blocking on ``QThread.wait`` here would never see it."""
        deadline = time.monotonic() + ms / 1000
        while self._thread is not None and time.monotonic() < deadline:
            QApplication.processEvents()
            QThread.msleep(10)
        return self._thread is None

    # -- the facts-lost view ----------------------------------------------------------------
    def show_report(self, report: ConversationReport) -> None:
        self.report = report
        policies = list(report.policies)
        questions = list(dict.fromkeys(r.question_id for r in report.results))
        cells = {(r.question_id, r.policy): r for r in report.results}
        self.table.clear()
        self.table.setRowCount(len(questions))
        self.table.setColumnCount(len(policies) + 1)
        self.table.setHorizontalHeaderLabels(["question", *policies])
        for row, qid in enumerate(questions):
            first = next(r for r in report.results if r.question_id == qid)
            label = QTableWidgetItem(f"{qid}: {first.question}")
            label.setToolTip(f"reference: {first.reference}")
            self.table.setItem(row, 0, label)
            for col, policy in enumerate(policies, start=1):
                result = cells.get((qid, policy))
                if result is not None:
                    self.table.setItem(row, col, self._cell(result))
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        self.table.setColumnWidth(0, QUESTION_WIDTH)
        for col in range(1, len(policies) + 1):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        self.summary.setText(self._summary(report))
        self.status.setText(
            f"{report.conversation_id}: {report.questions_asked} questions, window "
            f"{report.budget.context_window} ({self._unit(report)})"
        )

    @staticmethod
    def _unit(report: ConversationReport) -> str:
        return report.provenance.token_unit if report.provenance else "tokens"

    @staticmethod
    def _cell(result: QuestionResult) -> QTableWidgetItem:
        item = QTableWidgetItem(cell_text(result))
        if not result.misses:
            item.setBackground(_GOOD)
        elif result.evidence_present:
            item.setBackground(_PARTIAL)
        else:
            item.setBackground(_LOST)
        item.setToolTip(details_text(result))
        item.setData(Qt.ItemDataRole.UserRole, (result.question_id, result.policy))
        return item

    @staticmethod
    def _summary(report: ConversationReport) -> str:
        parts = [
            f"{s.policy}: recall {s.overall.evidence_recall.mean:.2f}, "
            f"F1 {s.overall.answer_f1.mean:.2f}, failures {s.overall.failures}"
            for s in report.summary
        ]
        return "  ·  ".join(parts)

    def _cell_changed(self, row: int, col: int, _prev_row: int, _prev_col: int) -> None:
        item = self.table.item(row, col)
        key = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
        if self.report is None or not isinstance(key, tuple):
            return
        for result in self.report.results:
            if (result.question_id, result.policy) == key:
                self.details.setPlainText(details_text(result))
                return


def create_tab(parent: QWidget | None = None) -> ConversationTab:
    return ConversationTab(parent)


def main(argv: Sequence[str] | None = None) -> int:
    """Render the tab for one conversation headless and save a screenshot."""
    parser = argparse.ArgumentParser(prog="python -m picocontext_playground.conversation_tab")
    parser.add_argument("--conversation", required=True)
    parser.add_argument("--window", type=int, default=4_096)
    parser.add_argument("--screenshot", required=True)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    app = QApplication.instance() or QApplication([])
    tab = ConversationTab()
    tab.resize(1500, 900)
    if not tab.open_conversation(Path(args.conversation)) or tab.conversation is None:
        print(tab.status.text(), file=sys.stderr)
        return 1
    tab.window_box.setValue(args.window)
    tab.show_report(compare(tab.conversation, args.window, tab.source))
    tab.table.setCurrentCell(0, 3)
    tab.show()
    app.processEvents()
    tab.grab().save(args.screenshot, "PNG")
    print(f"Saved {args.screenshot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
