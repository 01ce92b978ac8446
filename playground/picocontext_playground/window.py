"""The main window: File menu, controls, progress, status, the verdict and one result column
per policy.

The window only collects settings, starts a :class:`~picocontext_playground.worker.
ComparisonWorker` in a ``QThread`` and renders what the worker sends back. Changing the task,
the pressure, the policies or the model clears the results (when idle), so what is on screen
always belongs to the settings shown.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Qt, QThread, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QCloseEvent, QFont, QKeySequence
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from picocontext import CancelToken, ChatModel, OutputFileError, diff_snapshots
from picocontext.models import BYTE_UNIT, TOKEN_UNIT, GenerationProgress
from picocontext_diagnostics import BUILTIN_POLICIES
from picocontext_playground import gcguard
from picocontext_playground.comparison import (
    ComparisonResult,
    PolicyOutcome,
    StepView,
    generation_line,
    group_repeats,
    plain_failure,
    policy_label,
    rejected_text,
    step_line,
    task_episode,
    used_nodes,
)
from picocontext_playground.errors import SetupError
from picocontext_playground.model_loader import ModelCache
from picocontext_playground.qtenv import APP_NAME
from picocontext_playground.reports import FORMATS, dialog_filters, report_format, write_report
from picocontext_playground.resume import finished_count
from picocontext_playground.runverdict import headline, result_verdict
from picocontext_playground.settings import (
    DEFAULT_POLICIES,
    ENGINES,
    ComparisonSettings,
    Engine,
    ModelChoice,
    Task,
    default_engine,
    engine_label,
)
from picocontext_playground.verdict_view import VerdictView
from picocontext_playground.widgets import (
    RED,
    AttemptsView,
    ContextView,
    ResultCard,
    SectionBar,
    StepTable,
    TextPane,
    TokenChart,
    chart_series,
    policy_color,
    selectable_label,
)
from picocontext_playground.worker import PROGRESS_MAX, ComparisonWorker

RUN_TIP = "Run every selected policy on the same task (Ctrl+R)"
ENGINE_TIP = (
    "The engine that runs the model: llama.cpp reads the shipped 4-bit GGUF as it is (fast on "
    "a CPU); MLX uses Metal on Apple silicon and float32 weights on other CPUs"
)
DEFAULT_SIZE = (1280, 900)
MIN_SIZE = (1000, 700)
DETAIL_HEIGHT = 440
COLUMN_MIN_WIDTH = 320
CHART_HEIGHT = 200
NO_POLICY = "Tick at least one policy to run a comparison."

# The tabs next to the comparison, each built by a factory (its module is imported lazily).
TabFactory = Callable[[QWidget], QWidget]


def _manifest_tab(parent: QWidget) -> QWidget:
    from picocontext_playground.manifest_tab import create_tab

    return create_tab(parent)


def _digest_tab(parent: QWidget) -> QWidget:
    from picocontext_playground.digest_tab import DigestTab

    return DigestTab()


def _conversation_tab(parent: QWidget) -> QWidget:
    from picocontext_playground.conversation_tab import create_tab

    return create_tab(parent)


# label -> factory; a tab that fails to build is replaced by a page that says why.
EXTRA_TABS: tuple[tuple[str, TabFactory], ...] = (
    ("Manifest", _manifest_tab),
    ("Digest", _digest_tab),
    ("Conversation", _conversation_tab),
)


def default_model(engine: Engine | None = None) -> ModelChoice:
    """The registry's default model for ``engine`` (default: the default engine): Qwen3 on
    Apple silicon (Metal), Qwen2.5-Coder-1.5B on llama.cpp, the embedded Qwen2.5-Coder-0.5B
    on MLX on a CPU — each chosen by measurement (docs/models.md)."""
    from picocontext.models import default_model_name

    return ModelChoice(default_model_name(engine or default_engine()))


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


class MainWindow(QMainWindow):
    """The playground window. ``run_finished`` carries the :class:`ComparisonResult` (or
    ``None`` when the run could not start or failed during setup)."""

    run_finished = Signal(object)
    status_changed = Signal(str)

    def __init__(
        self,
        settings: ComparisonSettings | None = None,
        cache: ModelCache | None = None,
    ) -> None:
        super().__init__()
        self.setWindowTitle(APP_NAME)
        self.setMinimumSize(*MIN_SIZE)
        self.resize(*DEFAULT_SIZE)
        self._owns_cache = cache is None
        self.cache = cache or ModelCache()
        self.result: ComparisonResult | None = None
        self.last_error: str | None = None
        self.step_lines: list[str] = []
        self._thread: QThread | None = None
        self._worker: ComparisonWorker | None = None
        self._cancel: CancelToken | None = None
        self._unit = ""
        self._steps_per_policy = 0
        self._last_generation: tuple[str, int, GenerationProgress, float] | None = None
        self._live_clock = QTimer(self)
        self._live_clock.setInterval(1000)
        self._live_clock.timeout.connect(self._refresh_live)
        self.columns: dict[str, PolicyColumn] = {}
        self._loading = False
        self._model_settings: ComparisonSettings | None = None
        self._build()
        self.apply_settings(settings or ComparisonSettings(model=default_model()))
        self._loading = False
        self.set_status(self._ready_text(initial=True))

    # -- construction ---------------------------------------------------------------------
    def _build(self) -> None:
        self.tabs = QTabWidget()
        self.setCentralWidget(self.tabs)
        page = QWidget()
        outer = QVBoxLayout(page)
        outer.setContentsMargins(12, 10, 12, 6)
        title = QLabel("PicoContext Playground")
        font = QFont(title.font())
        font.setPointSize(font.pointSize() + 6)
        font.setBold(True)
        title.setFont(font)
        subtitle = QLabel(
            "Run context policies side by side on one local model: what each keeps, "
            "what it answers, and what it costs."
        )
        outer.addWidget(title)
        outer.addWidget(subtitle)
        outer.addWidget(self._controls())
        self.progress = QProgressBar()
        self.progress.setRange(0, PROGRESS_MAX)
        self.progress.setValue(0)
        self.progress.setTextVisible(False)
        self.progress.setFixedHeight(10)
        self.status = selectable_label()
        self.status.setStyleSheet("font-weight: bold;")
        self.live = selectable_label()
        self.live.setStyleSheet("color: #1b5e9a;")
        self.live.hide()
        self.caption = selectable_label()
        self.caption.setStyleSheet("color: #5f6368;")
        outer.addWidget(self.progress)
        outer.addWidget(self.status)
        outer.addWidget(self.live)
        outer.addWidget(self.caption)
        self.verdict = VerdictView()  # hidden until a run finishes; never scrolls away
        outer.addWidget(self.verdict)
        # The chart sits outside the scrolling columns: it always spans the window's width
        # and stays in view however many policies there are.
        self.chart = TokenChart()
        self.results_scroll = QScrollArea()
        self.results_scroll.setWidgetResizable(True)
        self.results_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.results = QWidget()
        results_layout = QVBoxLayout(self.results)
        results_layout.setContentsMargins(0, 4, 0, 4)
        self.columns_box = QHBoxLayout()
        self.columns_box.setSpacing(12)
        results_layout.addLayout(self.columns_box)
        results_layout.addStretch(1)
        self.results_scroll.setWidget(self.results)
        below = QWidget()
        below_layout = QVBoxLayout(below)
        below_layout.setContentsMargins(0, 0, 0, 0)
        below_layout.addWidget(self._view_picker())
        below_layout.addWidget(self.results_scroll, 1)
        # The chart and the columns share the height; drag the handle to give either more.
        self.results_split = QSplitter(Qt.Orientation.Vertical)
        self.results_split.addWidget(self.chart)
        self.results_split.addWidget(below)
        self.results_split.setChildrenCollapsible(False)
        self.results_split.setStretchFactor(0, 0)
        self.results_split.setStretchFactor(1, 1)
        self.results_split.setSizes([CHART_HEIGHT, 10_000])
        outer.addWidget(self.results_split, 1)
        self.tabs.addTab(page, "Comparison")
        self.extra_tabs = self._add_extra_tabs()
        self._build_menu()

    def _build_menu(self) -> None:
        """File: open a manifest or a digest corpus in their tabs, save or export the shown
        run, quit."""
        menu = self.menuBar().addMenu("&File")

        def action(text: str, slot: Callable[[], object], keys: QKeySequence | None) -> QAction:
            act = QAction(text, self)
            act.triggered.connect(slot)
            if keys is not None:
                act.setShortcut(keys)
            menu.addAction(act)
            return act

        self.open_manifest_action = action(
            "Open manifest…",
            self._open_manifest_dialog,
            QKeySequence(QKeySequence.StandardKey.Open),
        )
        self.open_digest_action = action("Open digest corpus…", self._open_digest_dialog, None)
        menu.addSeparator()
        self.save_action = action(
            "Save report…", self._save_dialog, QKeySequence(QKeySequence.StandardKey.Save)
        )
        self.export_action = action("Export… (JSON)", self._export_dialog, QKeySequence("Ctrl+E"))
        menu.addSeparator()
        self.quit_action = action("Quit", self.close, QKeySequence(QKeySequence.StandardKey.Quit))
        self.save_action.setEnabled(False)
        self.export_action.setEnabled(False)

    def _controls(self) -> QWidget:
        box = QFrame()
        box.setObjectName("Controls")
        box.setStyleSheet("#Controls { background: #f3f5f7; border-radius: 6px; }")
        grid = QGridLayout(box)
        grid.setContentsMargins(10, 8, 10, 8)
        grid.setHorizontalSpacing(10)
        # task: a segmented row of checkable buttons
        self.task_group = QButtonGroup(self)
        self.task_group.setExclusive(True)
        self.task_buttons: dict[Task, QPushButton] = {}
        task_row = QHBoxLayout()
        task_row.setSpacing(0)
        for task in Task:
            button = QPushButton(task.label)
            button.setCheckable(True)
            self.task_group.addButton(button)
            self.task_buttons[task] = button
            task_row.addWidget(button)
        self.task_group.buttonToggled.connect(self._task_toggled)
        self.pressure = QCheckBox("Context pressure (48 noise lines per update)")
        self.pressure.toggled.connect(self._settings_changed)
        task_row.addSpacing(16)
        task_row.addWidget(self.pressure)
        task_row.addStretch(1)
        grid.addWidget(QLabel("Task"), 0, 0)
        grid.addLayout(task_row, 0, 1, 1, 3)
        # policies: one checkbox per known policy (N columns)
        self.policy_boxes: dict[str, QCheckBox] = {}
        policy_row = QHBoxLayout()
        for name, policy in BUILTIN_POLICIES.items():
            check = QCheckBox(policy_label(name))
            check.setToolTip(policy.description)
            check.toggled.connect(self._settings_changed)
            self.policy_boxes[name] = check
            policy_row.addWidget(check)
        policy_row.addStretch(1)
        grid.addWidget(QLabel("Policies"), 1, 0)
        grid.addLayout(policy_row, 1, 1, 1, 3)
        # model
        self.model_combo = QComboBox()
        for choice in ModelChoice:
            self.model_combo.addItem(choice.label, choice.value)
        self.model_combo.currentIndexChanged.connect(self._model_changed)
        self.engine_combo = QComboBox()
        for engine in ENGINES:
            self.engine_combo.addItem(engine_label(engine), engine)
        self.engine_combo.setToolTip(ENGINE_TIP)
        self.engine_combo.currentIndexChanged.connect(self._engine_changed)
        self.model_dir = QLineEdit()
        self.model_dir.setPlaceholderText(
            "model directory: MLX (config.json, safetensors) or llama.cpp (model.gguf)"
        )
        self.model_dir.editingFinished.connect(self._directory_changed)
        self.browse = QPushButton("Browse…")
        self.browse.clicked.connect(self._browse)
        model_row = QHBoxLayout()
        model_row.addWidget(self.model_combo)
        model_row.addWidget(self.engine_combo)
        model_row.addWidget(self.model_dir, 1)
        model_row.addWidget(self.browse)
        grid.addWidget(QLabel("Model"), 2, 0)
        grid.addLayout(model_row, 2, 1, 1, 3)
        # decoding and actions
        self.decoding = QComboBox()
        self.decoding.addItem("Free decoding", False)
        self.decoding.addItem("Constrained decoding (grammar)", True)
        self.decoding.currentIndexChanged.connect(self._settings_changed)
        self.prefix_cache = QCheckBox("Prefix KV cache")
        self.prefix_cache.toggled.connect(self._settings_changed)
        self.run_button = QPushButton("Run comparison")
        self.run_button.setDefault(True)
        self.run_button.clicked.connect(self.start_comparison)
        self.run_button.setShortcut(QKeySequence("Ctrl+R"))
        self.run_button.setToolTip(RUN_TIP)
        # Shown when an interrupted run of the current settings finished some policies.
        self.resume_button = QPushButton("Resume")
        self.resume_button.clicked.connect(self.resume_comparison)
        self.resume_button.setVisible(False)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.stop_button.setEnabled(False)
        self.stop_button.setShortcut(QKeySequence("Esc"))
        self.stop_button.setToolTip("Cancel the run at the next token (Esc)")
        self.save_button = QPushButton("Save report…")
        self.save_button.clicked.connect(self._save_dialog)
        self.save_button.setEnabled(False)
        action_row = QHBoxLayout()
        action_row.addWidget(self.decoding)
        action_row.addWidget(self.prefix_cache)
        action_row.addStretch(1)
        action_row.addWidget(self.run_button)
        action_row.addWidget(self.resume_button)
        action_row.addWidget(self.stop_button)
        action_row.addWidget(self.save_button)
        grid.addWidget(QLabel("Decoding"), 3, 0)
        grid.addLayout(action_row, 3, 1, 1, 3)
        grid.setColumnStretch(1, 1)
        self._inputs: list[QWidget] = [
            *self.task_buttons.values(),
            self.pressure,
            *self.policy_boxes.values(),
            self.model_combo,
            self.engine_combo,
            self.model_dir,
            self.browse,
            self.decoding,
            self.prefix_cache,
        ]
        return box

    def _view_picker(self) -> QWidget:
        """All columns side by side (each at least COLUMN_MIN_WIDTH, scrolling sideways
        when they do not fit) or two chosen policies at full width."""
        box = QWidget()
        row = QHBoxLayout(box)
        row.setContentsMargins(0, 2, 0, 0)
        self.view_mode = QComboBox()
        self.view_mode.addItem("All policies side by side", "all")
        self.view_mode.addItem("Compare two", "two")
        self.left_pick = QComboBox()
        self.right_pick = QComboBox()
        for widget in (self.view_mode, self.left_pick, self.right_pick):
            widget.currentIndexChanged.connect(self._apply_view)
        row.addWidget(QLabel("Columns"))
        row.addWidget(self.view_mode)
        versus = QLabel("vs")
        row.addWidget(self.left_pick)
        row.addWidget(versus)
        row.addWidget(self.right_pick)
        row.addStretch(1)
        self._pick_labels: list[QWidget] = [versus]
        self.view_box = box
        box.hide()
        return box

    def _fill_view_picker(self, policies: tuple[str, ...]) -> None:
        for pick, default in ((self.left_pick, 0), (self.right_pick, 1)):
            pick.blockSignals(True)
            pick.clear()
            for name in policies:
                pick.addItem(policy_label(name), name)
            pick.setCurrentIndex(min(default, len(policies) - 1))
            pick.blockSignals(False)
        self.view_box.setVisible(len(policies) > 2)
        self._apply_view()

    @Slot()
    def _apply_view(self) -> None:
        two = self.view_mode.currentData() == "two" and len(self.columns) > 2
        for widget in (self.left_pick, self.right_pick, *self._pick_labels):
            widget.setVisible(two)
        chosen = {self.left_pick.currentData(), self.right_pick.currentData()}
        for name, column in self.columns.items():
            column.setVisible(not two or name in chosen)

    def visible_columns(self) -> list[str]:
        return [name for name, column in self.columns.items() if not column.isHidden()]

    def _add_extra_tabs(self) -> list[str]:
        """Every extra tab, in order. One that fails to build becomes a page naming the
        error (and :attr:`tab_errors` records it), so it never silently disappears."""
        self.tab_errors: dict[str, str] = {}
        for label, factory in EXTRA_TABS:
            try:
                widget = factory(self)
            except Exception as exc:  # shown to the user as the tab's content
                self.tab_errors[label] = f"{type(exc).__name__}: {exc}"
                widget = _error_page(label, self.tab_errors[label])
            self.tabs.addTab(widget, label)
        return [label for label, _ in EXTRA_TABS]

    # -- settings ---------------------------------------------------------------------------
    def apply_settings(self, settings: ComparisonSettings) -> None:
        """Show ``settings`` in the controls (without starting anything)."""
        self._loading = True
        try:
            self.task_buttons[settings.task].setChecked(True)
            self.pressure.setChecked(settings.pressure)
            for name, box in self.policy_boxes.items():
                box.setChecked(name in settings.policies)
            self.model_combo.setCurrentIndex(self.model_combo.findData(settings.model.value))
            self.engine_combo.setCurrentIndex(self.engine_combo.findData(settings.engine))
            self.model_dir.setText(str(settings.model_dir) if settings.model_dir else "")
            self.decoding.setCurrentIndex(1 if settings.constrained else 0)
            self.prefix_cache.setChecked(settings.prefix_cache)
        finally:
            self._loading = False
        self._settings_changed()

    def current_task(self) -> Task:
        for task, button in self.task_buttons.items():
            if button.isChecked():
                return task
        return Task.RETENTION

    def current_model(self) -> ModelChoice:
        return ModelChoice(str(self.model_combo.currentData()))

    def current_engine(self) -> Engine:
        return "llamacpp" if self.engine_combo.currentData() == "llamacpp" else "mlx"

    def current_settings(self) -> ComparisonSettings:
        """The settings the controls show; raises :class:`SetupError` when they are
        incomplete (no policy, no model directory)."""
        policies = tuple(name for name, box in self.policy_boxes.items() if box.isChecked())
        if not policies:
            raise SetupError("Select at least one policy.")
        choice = self.current_model()
        directory = self.model_dir.text().strip()
        if choice is ModelChoice.DIRECTORY and not directory:
            raise SetupError("Choose a local model directory first.")
        task = self.current_task()
        try:
            return ComparisonSettings(
                task=task,
                pressure=self.pressure.isChecked() and task.sequential,
                policies=policies,
                model=choice,
                model_dir=Path(directory) if choice is ModelChoice.DIRECTORY else None,
                engine=self.current_engine(),
                constrained=bool(self.decoding.currentData()),
                prefix_cache=self.prefix_cache.isChecked(),
            )
        except ValueError as exc:
            raise SetupError(str(exc)) from None

    def _ready_text(self, initial: bool = False) -> str:
        """What Run would do, or why it cannot (a greyed-out button must say why)."""
        task = self.current_task()
        choice = self.current_model()
        if not any(box.isChecked() for box in self.policy_boxes.values()):
            return NO_POLICY
        if initial and choice is ModelChoice.QWEN3:
            return "Ready. The first run downloads Qwen3-1.7B-4bit (about 1 GB) once."
        if initial:
            return f"Ready for {task.label}. Press Run comparison."
        return f"Ready for {task.label}."

    @Slot(object, bool)
    def _task_toggled(self, button: object, checked: bool) -> None:
        if checked:
            self._settings_changed()

    @Slot(int)
    def _model_changed(self, index: int) -> None:
        """A model that one engine cannot run moves the engine to one that can."""
        engines = self.current_model().engines
        if engines and self.current_engine() not in engines and not self._loading:
            self.engine_combo.setCurrentIndex(self.engine_combo.findData(engines[0]))
        self._settings_changed()

    @Slot(int)
    def _engine_changed(self, index: int) -> None:
        """An engine that cannot run the chosen model moves the model to its default."""
        engines = self.current_model().engines
        if engines and self.current_engine() not in engines and not self._loading:
            fallback = default_model(self.current_engine())
            self.model_combo.setCurrentIndex(self.model_combo.findData(fallback.value))
        self._settings_changed()

    @Slot()
    def _settings_changed(self) -> None:
        self._sync_enabled()
        try:
            self._model_settings = self.current_settings()
        except SetupError:
            self._model_settings = None
        if self._loading or self.running:
            return
        self.clear_results()
        self.set_status(self._ready_text())

    def _sync_enabled(self) -> None:
        running = self.running
        for widget in self._inputs:
            widget.setEnabled(not running)
        if not running:
            sequential = self.current_task().sequential
            self.pressure.setEnabled(sequential)
            choice = self.current_model()
            is_dir = choice is ModelChoice.DIRECTORY
            self.model_dir.setVisible(is_dir)
            self.browse.setVisible(is_dir)
            real = choice.real
            self.engine_combo.setEnabled(real)
            self.decoding.setEnabled(real)
            self.prefix_cache.setEnabled(real)
        any_policy = any(box.isChecked() for box in self.policy_boxes.values())
        self.run_button.setEnabled(not running and any_policy)
        self.run_button.setToolTip(RUN_TIP if any_policy else NO_POLICY)
        self._sync_resume(running)
        self.stop_button.setEnabled(running)
        self._sync_save()

    def _sync_resume(self, running: bool) -> None:
        """**Resume** with finished/remaining, when a journal of these settings holds
        finished policies (:mod:`picocontext_playground.resume`)."""
        try:
            settings = self.current_settings()
        except SetupError:
            self.resume_button.setVisible(False)
            return
        finished = finished_count(settings)
        total = len(settings.policies)
        self.resume_button.setVisible(finished > 0 and not running)
        self.resume_button.setText(f"Resume ({finished} of {total} finished)")
        self.resume_button.setToolTip(
            f"Reuse the {finished} policies an interrupted run finished with these settings "
            f"and run the {total - finished} left"
        )

    def _sync_save(self) -> None:
        saveable = self.has_report
        self.save_button.setEnabled(saveable)
        self.save_action.setEnabled(saveable)
        self.export_action.setEnabled(saveable)

    @property
    def has_report(self) -> bool:
        """A run finished at least one policy and nothing is running: there is a report."""
        return not self.running and self.result is not None and bool(self.result.outcomes)

    @Slot()
    def _browse(self) -> None:
        chosen = QFileDialog.getExistingDirectory(self, "Model directory (MLX or GGUF)")
        if chosen:
            self.model_dir.setText(chosen)
            self._directory_changed()

    @Slot()
    def _directory_changed(self) -> None:
        """A directory's layout (``model.gguf`` or ``config.json``) chooses its engine."""
        from picocontext.models import directory_engine

        text = self.model_dir.text().strip()
        found = directory_engine(Path(text)) if text else None
        if found is not None:
            self.engine_combo.setCurrentIndex(self.engine_combo.findData(found))
        self._settings_changed()

    # -- running ----------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None

    def set_status(self, text: str, error: bool = False) -> None:
        color = f" color: {RED};" if error else ""
        self.status.setStyleSheet(f"font-weight: bold;{color}")
        if text != self.status.text():
            self.status.setText(text)
            self.status_changed.emit(text)

    def save_report(self, path: Path) -> None:
        """Write the shown result's report in the format ``path``'s extension names (the same
        report the smoke mode writes)."""
        if self.result is None or not self.result.outcomes:
            raise SetupError("There is no finished run to save.")
        report_format(path, "Save report:")
        write_report(self.result, path)

    @Slot()
    def _save_dialog(self) -> None:
        chosen, chosen_filter = QFileDialog.getSaveFileName(
            self, "Save report", "picocontext-report.txt", dialog_filters()
        )
        self._save_chosen(chosen, chosen_filter)

    @Slot()
    def _export_dialog(self) -> None:
        label = FORMATS[".json"][0]
        chosen, _ = QFileDialog.getSaveFileName(
            self, "Export the run as JSON", "picocontext-run.json", f"{label} (*.json)"
        )
        self._save_chosen(chosen, f"{label} (*.json)")

    def _save_chosen(self, chosen: str, chosen_filter: str) -> None:
        """Save to a dialog's answer; a name without a known extension takes the filter's."""
        if not chosen:
            return
        path = Path(chosen)
        if path.suffix.lower() not in FORMATS:
            ext = next((e for e in FORMATS if f"*{e}" in chosen_filter), ".txt")
            path = path.with_name(path.name + ext)
        try:
            self.save_report(path)
        except (OSError, SetupError, OutputFileError) as exc:
            self.set_status(f"Could not save the report: {exc}")
        else:
            self.set_status(f"Saved the report to {path}.")

    # -- opening artefacts in their tabs ---------------------------------------------------
    def tab_named(self, label: str) -> QWidget | None:
        for index in range(self.tabs.count()):
            if self.tabs.tabText(index) == label:
                return self.tabs.widget(index)
        return None

    def open_manifest(self, path: Path) -> bool:
        """Show the Manifest tab and load ``path`` there (its errors show in the tab)."""
        from picocontext_playground.manifest_tab import ManifestTab

        tab = self.tab_named("Manifest")
        if not isinstance(tab, ManifestTab):
            self.set_status("The Manifest tab is not available (see its tab for why).")
            return False
        self.tabs.setCurrentWidget(tab)
        return tab.load_path(path)

    def open_digest(self, path: Path) -> bool:
        """Show the Digest tab and open the corpus folder ``path`` there."""
        from picocontext_playground.digest_tab import DigestTab

        tab = self.tab_named("Digest")
        if not isinstance(tab, DigestTab):
            self.set_status("The Digest tab is not available (see its tab for why).")
            return False
        self.tabs.setCurrentWidget(tab)
        return tab.open_corpus(path)

    @Slot()
    def _open_manifest_dialog(self) -> None:
        name, _ = QFileDialog.getOpenFileName(
            self, "Open pcx manifest", "", "pcx manifests (*.json);;All files (*)"
        )
        if name:
            self.open_manifest(Path(name))

    @Slot()
    def _open_digest_dialog(self) -> None:
        chosen = QFileDialog.getExistingDirectory(self, "Open a digest corpus")
        if chosen:
            self.open_digest(Path(chosen))

    def clear_results(self) -> None:
        self.result = None
        self._sync_save()
        self.verdict.clear()
        self.step_lines = []
        self.chart.clear()
        self.chart.unit = self._unit_for(self.current_model())
        self.caption.setText("")
        self.live.setText("")
        self.live.hide()
        self._last_generation = None
        self.progress.setRange(0, PROGRESS_MAX)
        self.progress.setValue(0)
        for column in self.columns.values():
            self.columns_box.removeWidget(column)
            column.deleteLater()
        self.columns = {}
        self.view_box.hide()

    @Slot()
    def resume_comparison(self) -> None:
        """What **Resume** does: the same run, reusing the policies already finished."""
        self.start_comparison(resume=True)

    @Slot()
    def start_comparison(self, resume: bool = False) -> None:
        """What **Run comparison** does; ignored while a run is in progress."""
        if self.running:
            return
        try:
            settings = self.current_settings()
        except SetupError as exc:
            self._not_started(exc.message)
            return
        try:
            self._start(settings, resume)
        except Exception as exc:  # never leave a caller waiting for run_finished
            self._thread, self._worker, self._cancel = None, None, None
            self._sync_enabled()
            self._not_started(f"Could not start the run: {type(exc).__name__}: {exc}")

    def _not_started(self, message: str) -> None:
        self.last_error = message
        self.set_status(message, error=True)
        self.run_finished.emit(None)

    def _start(self, settings: ComparisonSettings, resume: bool = False) -> None:
        self.clear_results()
        self.last_error = None
        self._steps_per_policy = len(task_episode(settings).steps)
        for index, name in enumerate(settings.policies):
            column = PolicyColumn(name, index)
            column.unit = self._unit_for(settings.model)
            column.artefact_requested.connect(self._open_artefact)
            self.columns[name] = column
            self.columns_box.addWidget(column, 1)
        self._fill_view_picker(settings.policies)
        self._cancel = CancelToken()
        thread = QThread(self)
        worker = ComparisonWorker(settings, self.cache, self._cancel, resume)
        worker.moveToThread(thread)
        thread.started.connect(worker.run)
        worker.status.connect(self._on_status)
        worker.progress.connect(self._on_progress)
        worker.model_ready.connect(self._on_model_ready)
        worker.step.connect(self._on_step)
        worker.generation.connect(self._on_generation)
        worker.outcome.connect(self._on_outcome)
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)
        # Direct: quit() is thread-safe, and a queued call would wait for the GUI thread, which
        # may itself be blocked in shutdown() waiting for this thread.
        worker.done.connect(thread.quit, Qt.ConnectionType.DirectConnection)
        thread.finished.connect(self._on_thread_finished)
        self._thread, self._worker = thread, worker
        self._sync_enabled()
        gcguard.hold()  # cycles are collected on the GUI thread only (see gcguard)
        thread.start()

    @Slot()
    def stop(self) -> None:
        """Cancel the run; the worker stops at the next check (between or during tokens)."""
        if self._cancel is not None and self.running:
            self._cancel.cancel()
            self.set_status("Stopping…")
            self.stop_button.setEnabled(False)

    @Slot(str)
    def _on_status(self, text: str) -> None:
        self.set_status(text)

    @Slot(int)
    def _on_progress(self, value: int) -> None:
        if value < 0:
            self.progress.setRange(0, 0)
        else:
            self.progress.setRange(0, PROGRESS_MAX)
            self.progress.setValue(value)

    @Slot(str, str)
    def _on_model_ready(self, label: str, unit: str) -> None:
        self._unit = unit
        self.chart.unit = unit
        self.chart.update()
        for column in self.columns.values():
            column.unit = unit
        self.caption.setText(f"Model: {label} · greedy sampling · counts in {unit}")

    @staticmethod
    def _unit_for(choice: ModelChoice) -> str:
        return TOKEN_UNIT if choice.real else BYTE_UNIT

    @Slot(str, int, object)
    def _on_generation(self, policy: str, step: int, progress: object) -> None:
        """A real model's progress inside one call: the live line and the streamed output."""
        assert isinstance(progress, GenerationProgress)
        if not self.running:
            return
        self._last_generation = (policy, step, progress, time.monotonic())
        self._refresh_live()
        self.live.show()
        if not self._live_clock.isActive():
            self._live_clock.start()
        column = self.columns.get(policy)
        if column is not None and progress.phase != "prefill":
            column.show_live_output(step, progress.text)

    @Slot()
    def _refresh_live(self) -> None:
        """The live line with its clock moving between reports (a prefill chunk on a big
        model can take seconds, and a frozen clock looks like a hang)."""
        if self._last_generation is None or not self.running:
            self._live_clock.stop()
            return
        policy, step, progress, received = self._last_generation
        now = replace(progress, elapsed=progress.elapsed + time.monotonic() - received)
        self.live.setText(generation_line(policy, step, self._steps_per_policy, now))

    @Slot(str, object)
    def _on_step(self, policy: str, step: object) -> None:
        assert isinstance(step, StepView)
        line = step_line(policy, step)
        self.step_lines.append(line)
        self.set_status(line)
        column = self.columns.get(policy)
        if column is not None and self.current_task().sequential:
            column.add_live_step(step)

    @Slot(object)
    def _on_outcome(self, outcome: object) -> None:
        assert isinstance(outcome, PolicyOutcome)
        column = self.columns.get(outcome.policy.name)
        if column is not None:
            column.show_outcome(outcome, self._unit)

    @Slot(object)
    def _on_finished(self, result: object) -> None:
        assert isinstance(result, ComparisonResult)
        self.result = result
        steps, series = chart_series(result.outcomes)
        self.chart.set_data(steps, series, result.token_unit, result.budget.context_window)
        b = result.budget
        self.caption.setText(
            f"Model: {result.model_label} on {result.engine_label} · greedy sampling · counts "
            f"in {result.token_unit} · "
            f"window {b.context_window:,}, {b.total_tokens:,} per turn, "
            f"{b.max_edit_attempts} decision attempts · same model, budgets and records for "
            "every policy; each policy starts from a fresh session and a cold cache."
        )
        for column in self.columns.values():
            if column.outcome is None:
                column.card.headline.setText("Not run (stopped before this policy finished).")
        verdict = result_verdict(result)
        if result.outcomes:
            self.verdict.show_verdict(verdict, headline(result, verdict))
        # The worker's last status already said "Finished. …" (what failed); the verdict's
        # sentence follows it instead of repeating it.
        self.set_status(result.status if result.cancelled else headline(result, verdict))
        self.live.hide()
        self.progress.setRange(0, PROGRESS_MAX)
        self.progress.setValue(PROGRESS_MAX if result.completed else self.progress.value())

    @Slot(str)
    def _on_failed(self, message: str) -> None:
        """The run could not start (a model that would not load): say so in red and drop
        the empty columns that were waiting for it."""
        self.last_error = message
        self.set_status(message, error=True)
        self.live.hide()
        self.progress.setRange(0, PROGRESS_MAX)
        self.progress.setValue(0)
        for column in self.columns.values():
            self.columns_box.removeWidget(column)
            column.deleteLater()
        self.columns = {}

    @Slot()
    def _on_thread_finished(self) -> None:
        thread, worker = self._thread, self._worker
        self._thread, self._worker, self._cancel = None, None, None
        if worker is not None:
            worker.deleteLater()
        if thread is not None:
            thread.deleteLater()
        gcguard.release()
        self._sync_enabled()
        self.run_finished.emit(self.result)

    # -- links to the Manifest and Digest tabs ------------------------------------------------
    @Slot(str, object)
    def _open_artefact(self, kind: str, step: object) -> None:
        """Show what a step built in its tab: the manifest a navigated step compiled or the
        digest tree a distilled step left, with the nodes the model used highlighted."""
        from picocontext_playground.digest_tab import DigestTab
        from picocontext_playground.manifest_tab import ManifestTab

        assert isinstance(step, StepView)
        column = self.sender()
        policy = column.policy if isinstance(column, PolicyColumn) else ""
        origin = f"{policy_label(policy)} · {step.step_id}"
        used = used_nodes(step)
        label = "Manifest" if kind == "manifest" else "Digest"
        tab = self.tab_named(label)
        if kind == "manifest" and isinstance(tab, ManifestTab) and step.manifest is not None:
            tab.show_run_manifest(step.manifest, origin, used)
        elif kind == "digest" and isinstance(tab, DigestTab) and step.digest is not None:
            tab.show_run_digest(step.digest, origin, used)
        else:
            return
        self.tabs.setCurrentWidget(tab)

    # -- sharing the model with other tabs ---------------------------------------------------
    def chat_model_factory(self) -> ChatModel:
        """The model chosen in the Comparison tab as a :class:`picocontext.ChatModel`, for the
        Manifest tab's LLM navigator. Called on that tab's worker thread; it loads through the
        same cache as the comparison, so a model is never loaded twice."""
        settings = self._model_settings
        if settings is None or not settings.model.real:
            raise SetupError(
                "The LLM navigator needs a real model: choose Qwen3, SmolLM2 or a local "
                "directory in the Comparison tab."
            )
        model = self.cache.get(settings, lambda _label, _fraction: None, CancelToken())
        if not isinstance(model.raw, ChatModel):
            raise SetupError(f"{model.label} cannot be used as a chat model")
        return model.raw

    # -- shutdown ---------------------------------------------------------------------------
    def shutdown(self, timeout_ms: int = 60_000) -> bool:
        """Cancel any run and wait for the worker thread; close the model if we own it.
        Returns whether the thread ended in time."""
        ended = True
        thread = self._thread
        if thread is not None:
            if self._cancel is not None:
                self._cancel.cancel()
            thread.quit()  # the event loop ends as soon as the running slot returns
            ended = thread.wait(timeout_ms)
        if self._owns_cache and ended:
            self.cache.close()
        return ended

    def closeEvent(self, event: QCloseEvent) -> None:
        self.shutdown()
        event.accept()


def _error_page(label: str, error: str) -> QWidget:
    page = QLabel(
        f"The {label} tab could not be built: {error}\n\nThe comparison still works; "
        "please report this error."
    )
    page.setObjectName("tabError")
    page.setWordWrap(True)
    page.setAlignment(Qt.AlignmentFlag.AlignCenter)
    return page


__all__ = ["DEFAULT_POLICIES", "MainWindow", "PolicyColumn", "default_model"]
