"""One result column per policy: the card, the step table and the detail tabs (working context,
original, diff, decisions, the exact next input).

A column renders a finished :class:`~picocontext_playground.results.PolicyOutcome` and, while
the policy runs, the steps and streamed output the worker reports; it never computes a grade.
Its link buttons ask the window (through :attr:`PolicyColumn.artefact_requested`) to show what a
step built in the Manifest or Digest tab.
"""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from picocontext import diff_snapshots
from picocontext_playground.charts import SectionBar
from picocontext_playground.comparison import group_repeats, plain_failure, rejected_text
from picocontext_playground.results import PolicyOutcome, StepView, policy_label
from picocontext_playground.text_views import AttemptsView, ContextView, TextPane
from picocontext_playground.widgets import (
    RED,
    ResultCard,
    StepTable,
    policy_color,
    selectable_label,
)

DETAIL_HEIGHT = 440
COLUMN_MIN_WIDTH = 320


class PolicyColumn(QWidget):
    """Card, step table and detail tabs of one policy. ``artefact_requested`` carries
    ``(kind, step)``, kind ``manifest`` or ``digest``, when a link button is pressed."""

    artefact_requested = Signal(str, object)

    def __init__(self, policy: str, index: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.policy = policy
        self.outcome: PolicyOutcome | None = None
        self.unit = "tokens"
        self.live_steps: list[StepView] = []
        self._live_shown = False
        self.setMinimumWidth(COLUMN_MIN_WIDTH)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.card = ResultCard()
        self.card.set_title(policy_label(policy), policy_color(index))
        self.steps = StepTable()
        self.tabs = QTabWidget()
        self.working = ContextView()
        self.original = ContextView()
        self.diff = TextPane("No edit committed.")
        self.attempts = AttemptsView()
        next_box = QWidget()
        next_layout = QVBoxLayout(next_box)
        next_layout.setContentsMargins(4, 4, 4, 4)
        row = QHBoxLayout()
        self.next_step = QComboBox()
        self.next_step.currentIndexChanged.connect(self._show_next_input)
        self.next_label = selectable_label("")
        row.addWidget(QLabel("Step"))
        row.addWidget(self.next_step)
        row.addWidget(self.next_label, 1)
        next_layout.addLayout(row)
        links = QHBoxLayout()
        self.open_manifest = QPushButton("Open in Manifest")
        self.open_manifest.setToolTip(
            "The manifest this step compiled from the archived history, with the nodes the "
            "model opened, looked at or closed highlighted"
        )
        self.open_manifest.clicked.connect(self._open_manifest)
        self.open_digest = QPushButton("Open in Digest")
        self.open_digest.setToolTip(
            "The digest tree this step distilled, with the nodes the model asked for highlighted"
        )
        self.open_digest.clicked.connect(self._open_digest)
        links.addWidget(self.open_manifest)
        links.addWidget(self.open_digest)
        links.addStretch(1)
        next_layout.addLayout(links)
        self.sections = SectionBar()
        next_layout.addWidget(self.sections)
        self.next_input = TextPane("No completion call made.")
        next_layout.addWidget(self.next_input)
        self.tabs.addTab(self.working, "Working context")
        self.tabs.addTab(self.original, "Original")
        self.tabs.addTab(self.diff, "Diff")
        self.tabs.addTab(self.attempts, "Decisions")
        self.tabs.addTab(next_box, "Next input")
        self.tabs.setMinimumHeight(DETAIL_HEIGHT)
        layout.addWidget(self.card)
        layout.addWidget(self.steps)
        layout.addWidget(self.tabs)

    def add_live_step(self, step: StepView) -> None:
        """Show a row as soon as a step finishes, before the whole policy is done."""
        if self.steps.rowCount() == 0:
            self.card.headline.setText("Running…")
        self.live_steps.append(step)
        self.steps.add_step(step)
        self.attempts.show_steps(self.live_steps)

    def show_live_output(self, step: int, text: str) -> None:
        """The model's output so far in the step that is running, under the finished ones."""
        if self.outcome is not None:
            return
        if self.tabs.currentWidget() is not self.attempts and not self._live_shown:
            self.tabs.setCurrentWidget(self.attempts)
        self._live_shown = True
        self.card.headline.setText(f"Running step {step}…")
        self.attempts.show_steps(self.live_steps, live=(f"step-{step} (running)", text))

    def show_outcome(self, outcome: PolicyOutcome, unit: str) -> None:
        self.outcome = outcome
        self.unit = unit
        self.card.show_outcome(outcome, unit)
        self.steps.show_steps(outcome)
        self.working.show_context("Working context", outcome.revised, outcome.original, True)
        self.original.show_context("Original transcript", outcome.original, outcome.revised, False)
        self.diff.setPlainText(group_repeats(diff_snapshots(outcome.original, outcome.revised)))
        self.attempts.show_steps(outcome.steps)
        self.next_step.blockSignals(True)
        self.next_step.clear()
        for step in outcome.steps:
            self.next_step.addItem(step.step_id)
        self.next_step.blockSignals(False)
        self.next_step.setCurrentIndex(len(outcome.steps) - 1)
        self._show_next_input(len(outcome.steps) - 1)

    def expand_for_capture(self, limit: int) -> None:
        """Make the detail tabs tall enough to show the whole working context (up to
        ``limit`` pixels), so a screenshot shows it without a scroll bar where possible. A
        tool-using policy never edits its history, so its Decisions tab (the navigation or
        digest calls it made) is the one shown."""
        pane: QTextBrowser = self.working
        if self.outcome is not None and (self.outcome.tool_steps or self.outcome.prefetch_steps):
            pane = self.attempts
            self.tabs.setCurrentWidget(self.attempts)
        document = pane.document()
        document.setTextWidth(pane.viewport().width())
        needed = int(document.size().height()) + self.tabs.tabBar().sizeHint().height() + 16
        self.tabs.setMinimumHeight(max(DETAIL_HEIGHT, min(limit, needed)))

    def selected_step(self) -> StepView | None:
        index = self.next_step.currentIndex()
        if self.outcome is None or not 0 <= index < len(self.outcome.steps):
            return None
        return self.outcome.steps[index]

    @Slot()
    def _open_manifest(self) -> None:
        step = self.selected_step()
        if step is not None and step.manifest is not None:
            self.artefact_requested.emit("manifest", step)

    @Slot()
    def _open_digest(self) -> None:
        step = self.selected_step()
        if step is not None and step.digest is not None:
            self.artefact_requested.emit("digest", step)

    @Slot(int)
    def _show_next_input(self, index: int) -> None:
        if self.outcome is None or not 0 <= index < len(self.outcome.steps):
            self.open_manifest.hide()
            self.open_digest.hide()
            self.next_input.setPlainText("")
            self.next_label.setText("")
            self.sections.show_sections((), None, self.unit)
            return
        step = self.outcome.steps[index]
        self.open_manifest.setVisible(step.manifest is not None)
        self.open_digest.setVisible(step.digest is not None)
        self.sections.show_sections(step.sections, step.context_window, self.unit)
        self.next_label.setStyleSheet("")
        run = step.run
        if step.rejected_prompt is not None:
            self.next_label.setText(rejected_text(step, self.unit))
            self.next_label.setStyleSheet(f"color: {RED};")
            self.next_input.setPlainText(step.rejected_prompt.rendered)
            return
        if run is None or run.final_prompt is None:
            why = plain_failure(step.failure) if step.failure else "the step ended early"
            self.next_label.setText(f"No completion call made: {why}")
            self.next_input.setPlainText("")
            return
        prompt = run.final_prompt
        window = f" of a {step.context_window:,} window" if step.context_window else ""
        self.next_label.setText(f"Exact next input · {prompt.token_count:,} {self.unit}{window}")
        self.next_input.setPlainText(prompt.rendered)


__all__ = ["COLUMN_MIN_WIDTH", "DETAIL_HEIGHT", "PolicyColumn"]
