"""The main window: File menu, controls, progress, status, the verdict and one result column
per policy, next to the Manifest, Digest and Conversation tabs.

The window only collects settings (:class:`~picocontext_playground.controls.Controls`), starts
a :class:`~picocontext_playground.comparison_run.ComparisonRun` and renders what its worker
sends back, one :class:`~picocontext_playground.policy_column.PolicyColumn` per policy.
Changing the task, the pressure, the policies or the model clears the results (when idle), so
what is on screen always belongs to the settings shown.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QCloseEvent, QFont, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QProgressBar,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from picocontext import CancelToken, ChatModel, OutputFileError
from picocontext.models import BYTE_UNIT, TOKEN_UNIT, GenerationProgress
from picocontext_playground.charts import TokenChart, chart_series
from picocontext_playground.comparison import generation_line, step_line, task_episode, used_nodes
from picocontext_playground.comparison_run import ComparisonRun
from picocontext_playground.controls import Controls, ViewPicker
from picocontext_playground.errors import SetupError
from picocontext_playground.extra_tabs import EXTRA_TABS, add_extra_tabs
from picocontext_playground.model_loader import ModelCache
from picocontext_playground.policy_column import PolicyColumn
from picocontext_playground.qtenv import APP_NAME
from picocontext_playground.reports import FORMATS, dialog_filters, report_format, write_report
from picocontext_playground.results import ComparisonResult, PolicyOutcome, StepView, policy_label
from picocontext_playground.runverdict import headline, result_verdict
from picocontext_playground.settings import ComparisonSettings, ModelChoice, default_model
from picocontext_playground.verdict_view import VerdictView
from picocontext_playground.widgets import RED, selectable_label
from picocontext_playground.worker import PROGRESS_MAX

DEFAULT_SIZE = (1280, 900)
MIN_SIZE = (1000, 700)
CHART_HEIGHT = 200


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
        self.comparison_run = ComparisonRun(self)
        self.comparison_run.ended.connect(self._on_run_ended)
        self._unit = ""
        self._steps_per_policy = 0
        self._last_generation: tuple[str, int, GenerationProgress, float] | None = None
        self._live_clock = QTimer(self)
        self._live_clock.setInterval(1000)
        self._live_clock.timeout.connect(self._refresh_live)
        self.columns: dict[str, PolicyColumn] = {}
        self._model_settings: ComparisonSettings | None = None
        self._build()
        self.controls.apply_settings(settings or ComparisonSettings(model=default_model()))
        self.set_status(self.controls.ready_text(initial=True))

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
        self.view_picker = ViewPicker()
        self.view_picker.changed.connect(self._apply_view)
        below_layout.addWidget(self.view_picker)
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
        self.tab_errors = add_extra_tabs(self.tabs, self)
        self.extra_tabs = [label for label, _ in EXTRA_TABS]
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

    def _controls(self) -> Controls:
        """The settings row, its Run, Resume, Stop and Save buttons wired to the window."""
        self.controls = Controls()
        self.controls.changed.connect(self._settings_changed)
        self.controls.run_button.clicked.connect(self.start_comparison)
        self.controls.resume_button.clicked.connect(self.resume_comparison)
        self.controls.stop_button.clicked.connect(self.stop)
        self.controls.save_button.clicked.connect(self._save_dialog)
        return self.controls

    @Slot()
    def _apply_view(self) -> None:
        self.view_picker.apply(self.columns)

    def visible_columns(self) -> list[str]:
        return [name for name, column in self.columns.items() if not column.isHidden()]

    # -- settings ---------------------------------------------------------------------------
    @Slot()
    def _settings_changed(self) -> None:
        self._sync_enabled()
        try:
            self._model_settings = self.controls.current_settings()
        except SetupError:
            self._model_settings = None
        if self.running:
            return
        self.clear_results()
        self.set_status(self.controls.ready_text())

    def _sync_enabled(self) -> None:
        self.controls.sync_enabled(self.running)
        self._sync_save()

    def _sync_save(self) -> None:
        saveable = self.has_report
        self.controls.save_button.setEnabled(saveable)
        self.save_action.setEnabled(saveable)
        self.export_action.setEnabled(saveable)

    @property
    def has_report(self) -> bool:
        """A run finished at least one policy and nothing is running: there is a report."""
        return not self.running and self.result is not None and bool(self.result.outcomes)

    # -- running ----------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.comparison_run.running

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
        self.chart.unit = self._unit_for(self.controls.current_model())
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
        self.view_picker.hide()

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
            settings = self.controls.current_settings()
        except SetupError as exc:
            self._not_started(exc.message)
            return
        try:
            self._start(settings, resume)
        except Exception as exc:  # never leave a caller waiting for run_finished
            self.comparison_run.discard()
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
        self.view_picker.fill(settings.policies)
        worker = self.comparison_run.prepare(settings, self.cache, resume)
        worker.status.connect(self._on_status)
        worker.progress.connect(self._on_progress)
        worker.model_ready.connect(self._on_model_ready)
        worker.step.connect(self._on_step)
        worker.generation.connect(self._on_generation)
        worker.outcome.connect(self._on_outcome)
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)
        self._sync_enabled()
        self.comparison_run.start()

    @Slot()
    def stop(self) -> None:
        """Cancel the run; the worker stops at the next check (between or during tokens)."""
        if self.comparison_run.stop():
            self.set_status("Stopping…")
            self.controls.stop_button.setEnabled(False)

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
        if column is not None and self.controls.current_task().sequential:
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
    def _on_run_ended(self) -> None:
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
        ended = self.comparison_run.shutdown(timeout_ms)
        if self._owns_cache and ended:
            self.cache.close()
        return ended

    def closeEvent(self, event: QCloseEvent) -> None:
        self.shutdown()
        event.accept()


__all__ = ["MainWindow"]
