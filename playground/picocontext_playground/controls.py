"""The controls above the results: what to run (task, pressure, policies, model, engine,
decoding) with the Run, Resume, Stop and Save buttons, and the picker of which policy columns
to show.

:class:`Controls` holds the settings the window will run and nothing else: it tells the window
through :attr:`Controls.changed` that they changed, keeps a model and an engine that can run
it together, and greys out what a run or the chosen model makes meaningless. The buttons are
connected by the window, which owns what they do.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from PySide6.QtCore import Signal, Slot
from PySide6.QtGui import QKeySequence
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
    QPushButton,
    QWidget,
)

from picocontext_diagnostics import BUILTIN_POLICIES
from picocontext_playground.errors import SetupError
from picocontext_playground.results import policy_label
from picocontext_playground.resume import finished_count
from picocontext_playground.settings import (
    ENGINES,
    ComparisonSettings,
    Engine,
    ModelChoice,
    Task,
    default_model,
    engine_label,
    kv_shift_applies,
)

RUN_TIP = "Run every selected policy on the same task (Ctrl+R)"
ENGINE_TIP = (
    "The engine that runs the model: llama.cpp reads the shipped 4-bit GGUF as it is (fast on "
    "a CPU); MLX uses Metal on Apple silicon and float32 weights on other CPUs"
)
NO_POLICY = "Tick at least one policy to run a comparison."
KV_SHIFT_TIP = (
    "llama.cpp: after an edit, move the cached records behind the deleted ones instead of "
    "computing them again (faster, approximate)"
)


class Controls(QFrame):
    """The settings row of the Comparison tab. ``changed`` fires after any setting changed
    (once per :meth:`apply_settings`, not once per control)."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._loading = False
        self.setObjectName("Controls")
        self.setStyleSheet("#Controls { background: #f3f5f7; border-radius: 6px; }")
        grid = QGridLayout(self)
        grid.setContentsMargins(10, 8, 10, 8)
        grid.setHorizontalSpacing(10)
        grid.addWidget(QLabel("Task"), 0, 0)
        grid.addLayout(self._task_row(), 0, 1, 1, 3)
        grid.addWidget(QLabel("Policies"), 1, 0)
        grid.addLayout(self._policy_row(), 1, 1, 1, 3)
        grid.addWidget(QLabel("Model"), 2, 0)
        grid.addLayout(self._model_row(), 2, 1, 1, 3)
        grid.addWidget(QLabel("Decoding"), 3, 0)
        grid.addLayout(self._action_row(), 3, 1, 1, 3)
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
            self.kv_shift,
        ]

    # -- construction ---------------------------------------------------------------------
    def _task_row(self) -> QHBoxLayout:
        """The task as a segmented row of checkable buttons, then the pressure toggle."""
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
        return task_row

    def _policy_row(self) -> QHBoxLayout:
        """One checkbox per known policy (one column each when run)."""
        self.policy_boxes: dict[str, QCheckBox] = {}
        policy_row = QHBoxLayout()
        for name, policy in BUILTIN_POLICIES.items():
            check = QCheckBox(policy_label(name))
            check.setToolTip(policy.description)
            check.toggled.connect(self._settings_changed)
            self.policy_boxes[name] = check
            policy_row.addWidget(check)
        policy_row.addStretch(1)
        return policy_row

    def _model_row(self) -> QHBoxLayout:
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
        return model_row

    def _action_row(self) -> QHBoxLayout:
        """Decoding and the prefix cache, then the buttons (connected by the window)."""
        self.decoding = QComboBox()
        self.decoding.addItem("Free decoding", False)
        self.decoding.addItem("Constrained decoding (grammar)", True)
        self.decoding.currentIndexChanged.connect(self._settings_changed)
        self.prefix_cache = QCheckBox("Prefix KV cache")
        self.prefix_cache.toggled.connect(self._settings_changed)
        self.kv_shift = QCheckBox("KV shift")
        self.kv_shift.setToolTip(KV_SHIFT_TIP)
        self.kv_shift.toggled.connect(self._settings_changed)
        self.run_button = QPushButton("Run comparison")
        self.run_button.setDefault(True)
        self.run_button.setShortcut(QKeySequence("Ctrl+R"))
        self.run_button.setToolTip(RUN_TIP)
        # Shown when an interrupted run of the current settings finished some policies.
        self.resume_button = QPushButton("Resume")
        self.resume_button.setVisible(False)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.stop_button.setShortcut(QKeySequence("Esc"))
        self.stop_button.setToolTip("Cancel the run at the next token (Esc)")
        self.save_button = QPushButton("Save report…")
        self.save_button.setEnabled(False)
        action_row = QHBoxLayout()
        action_row.addWidget(self.decoding)
        action_row.addWidget(self.prefix_cache)
        action_row.addWidget(self.kv_shift)
        action_row.addStretch(1)
        action_row.addWidget(self.run_button)
        action_row.addWidget(self.resume_button)
        action_row.addWidget(self.stop_button)
        action_row.addWidget(self.save_button)
        return action_row

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
            self.kv_shift.setChecked(settings.kv_shift)
        finally:
            self._loading = False
        self.changed.emit()

    def current_task(self) -> Task:
        for task, button in self.task_buttons.items():
            if button.isChecked():
                return task
        return Task.RETENTION

    def current_model(self) -> ModelChoice:
        return ModelChoice(str(self.model_combo.currentData()))

    def current_engine(self) -> Engine:
        return "llamacpp" if self.engine_combo.currentData() == "llamacpp" else "mlx"

    def any_policy(self) -> bool:
        return any(box.isChecked() for box in self.policy_boxes.values())

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
        engine = self.current_engine()
        # a ticked box that the model, engine or cache choice has made meaningless (and
        # greyed out) does not apply, rather than refusing the run
        kv_shift = self.kv_shift.isChecked() and self._kv_shift_applies(choice, engine)
        try:
            return ComparisonSettings(
                task=task,
                pressure=self.pressure.isChecked() and task.sequential,
                policies=policies,
                model=choice,
                model_dir=Path(directory) if choice is ModelChoice.DIRECTORY else None,
                engine=engine,
                constrained=bool(self.decoding.currentData()),
                prefix_cache=self.prefix_cache.isChecked(),
                kv_shift=kv_shift,
            )
        except ValueError as exc:
            raise SetupError(str(exc)) from None

    def ready_text(self, initial: bool = False) -> str:
        """What Run would do, or why it cannot (a greyed-out button must say why)."""
        task = self.current_task()
        choice = self.current_model()
        if not self.any_policy():
            return NO_POLICY
        if initial and choice is ModelChoice.QWEN3:
            return "Ready. The first run downloads Qwen3-1.7B-4bit (about 1 GB) once."
        if initial:
            return f"Ready for {task.label}. Press Run comparison."
        return f"Ready for {task.label}."

    @Slot()
    def _settings_changed(self) -> None:
        if not self._loading:
            self.changed.emit()

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

    # -- enabled state ----------------------------------------------------------------------
    def sync_enabled(self, running: bool) -> None:
        """Grey out the inputs while ``running``, and what the chosen task or model makes
        meaningless (pressure for the order lookup, engine and decoding for the stand-in)."""
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
            self.kv_shift.setEnabled(self._kv_shift_applies(choice, self.current_engine()))
        any_policy = self.any_policy()
        self.run_button.setEnabled(not running and any_policy)
        self.run_button.setToolTip(RUN_TIP if any_policy else NO_POLICY)
        self._sync_resume(running)
        self.stop_button.setEnabled(running)

    def _kv_shift_applies(self, choice: ModelChoice, engine: Engine) -> bool:
        return kv_shift_applies(choice, engine, self.prefix_cache.isChecked())

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


class ViewPicker(QWidget):
    """All columns side by side (each at least ``COLUMN_MIN_WIDTH``, scrolling sideways when
    they do not fit) or two chosen policies at full width. Shown only for more than two
    policies; ``changed`` fires when the choice changes."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 2, 0, 0)
        self.view_mode = QComboBox()
        self.view_mode.addItem("All policies side by side", "all")
        self.view_mode.addItem("Compare two", "two")
        self.left_pick = QComboBox()
        self.right_pick = QComboBox()
        for widget in (self.view_mode, self.left_pick, self.right_pick):
            widget.currentIndexChanged.connect(self._picked)
        row.addWidget(QLabel("Columns"))
        row.addWidget(self.view_mode)
        versus = QLabel("vs")
        row.addWidget(self.left_pick)
        row.addWidget(versus)
        row.addWidget(self.right_pick)
        row.addStretch(1)
        self._pick_labels: list[QWidget] = [versus]
        self.hide()

    @Slot()
    def _picked(self) -> None:
        self.changed.emit()

    def fill(self, policies: tuple[str, ...]) -> None:
        """Offer ``policies`` in both picks (the first two chosen); then ``changed`` fires."""
        for pick, default in ((self.left_pick, 0), (self.right_pick, 1)):
            pick.blockSignals(True)
            pick.clear()
            for name in policies:
                pick.addItem(policy_label(name), name)
            pick.setCurrentIndex(min(default, len(policies) - 1))
            pick.blockSignals(False)
        self.setVisible(len(policies) > 2)
        self.changed.emit()

    def apply(self, columns: Mapping[str, QWidget]) -> None:
        """Show the columns the picker chooses and hide the others."""
        two = self.view_mode.currentData() == "two" and len(columns) > 2
        for widget in (self.left_pick, self.right_pick, *self._pick_labels):
            widget.setVisible(two)
        chosen = {self.left_pick.currentData(), self.right_pick.currentData()}
        for name, column in columns.items():
            column.setVisible(not two or name in chosen)


__all__ = ["ENGINE_TIP", "NO_POLICY", "RUN_TIP", "Controls", "ViewPicker"]
