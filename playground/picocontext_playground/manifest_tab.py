"""The "Manifests" tab: open a pcx manifest, browse its tree, drive a NavSession by hand with
the budget updating live, and run the navigation eval with either navigator.

The widget shows state; the core computes it. Every button calls one NavSession verb and then
re-renders from the session (ledger, frontier, counters); the eval runs on a worker thread and
hands back an :class:`~picocontext.manifest.eval.EvalReport`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QThread, Signal
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from picocontext import ChatModel, PicoContextError
from picocontext.manifest import (
    EvalReport,
    KeywordNavigator,
    LeafResolver,
    LLMNavigator,
    Manifest,
    ModeConfig,
    Navigator,
    NavSession,
    ViewLevel,
    dict_resolver,
    load_cases,
    load_manifest,
    run_eval,
)
from picocontext_playground import gcguard
from picocontext_playground.widgets import empty_tab_hint

ChatModelFactory = Callable[[], ChatModel]
_HIDDEN = QBrush(QColor(150, 150, 150))
_USED = QBrush(QColor("#fff4cc"))


_PCX_NAME = re.compile(r"^(?P<source>.+)\.pcx\.(?P<budget>[^.]+)\.json$")


def leaves_next_to(path: Path) -> LeafResolver | None:
    """A resolver for a manifest's leaf texts: ``<name>.leaves.<budget>.json`` next to a
    ``<name>.pcx.<budget>.json`` (what ``pcx build`` writes), else a ``leaves/`` folder with
    one ``<id>.<ext>`` file per leaf; ``None`` when neither exists."""
    match = _PCX_NAME.match(path.name)
    if match:
        built = path.with_name(f"{match['source']}.leaves.{match['budget']}.json")
        if built.is_file():
            loaded = json.loads(built.read_text(encoding="utf-8"))
            if isinstance(loaded, dict):
                return dict_resolver({str(k): str(v) for k, v in loaded.items()})
    folder = path.parent / "leaves"
    if not folder.is_dir():
        return None
    return dict_resolver(
        {p.stem: p.read_text(encoding="utf-8") for p in folder.iterdir() if p.is_file()}
    )


def resource_path(*parts: str) -> Path | None:
    """A file under the bundled ``resources/`` (package data in a wheel, else the checkout)."""
    here = Path(__file__).resolve().parent
    for base in (here, here.parents[1]):
        candidate = base.joinpath("resources", *parts)
        if candidate.exists():
            return candidate
    return None


EXAMPLE_MANIFEST = ("manifests", "homelab", "homelab.pcx.2k.json")


class _EvalThread(QThread):
    """Runs one eval job. The thread object itself lives in the GUI thread (parented to the
    tab), so Qt owns and deletes it there; its signals arrive queued in the GUI thread."""

    succeeded = Signal(object)
    failed = Signal(str)

    def __init__(self, job: Callable[[], EvalReport], parent: QObject) -> None:
        super().__init__(parent)
        self._job = job

    def run(self) -> None:
        try:
            self.succeeded.emit(self._job())
        except PicoContextError as exc:
            self.failed.emit(exc.message)
        except Exception as exc:  # a worker must report, never die silently
            self.failed.emit(f"{type(exc).__name__}: {exc}")


class ManifestTab(QWidget):
    """Browse and navigate one manifest. ``chat_model_factory`` enables the LLM navigator."""

    eval_finished = Signal(object)
    session_changed = Signal()

    def __init__(
        self,
        parent: QWidget | None = None,
        chat_model_factory: ChatModelFactory | None = None,
    ) -> None:
        super().__init__(parent)
        self.manifest: Manifest | None = None
        self.path: Path | None = None
        self.resolver: LeafResolver | None = None
        self.session: NavSession | None = None
        self.last_report: EvalReport | None = None
        self._chat_model_factory = chat_model_factory
        self._thread: _EvalThread | None = None
        self._items: dict[str, QTreeWidgetItem] = {}
        self._build()

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        root = QVBoxLayout(self)
        bar = QHBoxLayout()
        self.open_button = QPushButton("Open manifest…")
        self.open_button.clicked.connect(self._choose_file)
        self.path_label = QLabel("no manifest")
        self.mode = QComboBox()
        self.mode.addItems(["local", "remote"])
        self.view_level = QComboBox()
        self.view_level.addItems(["title", "brief", "full"])
        self.view_level.setCurrentText("brief")
        self.budget = QSpinBox()
        # 0 shows as a hint until a manifest sets its own budget; a change applies at once.
        self.budget.setRange(0, 10_000_000)
        self.budget.setSpecialValueText("budget (from the manifest)")
        self.budget.setPrefix("budget ")
        self.budget.setEnabled(False)
        self.budget.valueChanged.connect(self._budget_changed)
        self.reserve = QSpinBox()
        self.reserve.setRange(0, 10_000_000)
        self.reserve.setPrefix("reserve ")
        self.reset_button = QPushButton("Reset session")
        self.reset_button.clicked.connect(self.reset_session)
        self.mode.currentTextChanged.connect(self._mode_changed)
        for w in (
            self.open_button,
            self.path_label,
            self.mode,
            self.view_level,
            self.budget,
            self.reserve,
            self.reset_button,
        ):
            bar.addWidget(w)
        bar.addStretch(1)
        root.addLayout(bar)

        self.hint, self.example_button = empty_tab_hint(
            "No manifest yet. Open a pcx manifest (a file ending in .pcx.<budget>.json, as "
            "written by pcx build; its leaves and cases.json are found next to it), or open "
            "the bundled example.",
            self.open_example,
        )
        root.addWidget(self.hint)

        self.budget_bar = QProgressBar()
        self.budget_bar.setFormat("%v / %m tokens")
        self.budget_label = QLabel("")
        root.addWidget(self.budget_bar)
        root.addWidget(self.budget_label)

        split = QSplitter(Qt.Orientation.Horizontal)
        left = QWidget()
        left_box = QVBoxLayout(left)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["node", "title", "kind", "tokens", "facets", "links"])
        self.tree.setColumnCount(6)
        self.tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.header().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        left_box.addWidget(self.tree)
        actions = QHBoxLayout()
        self.expand_button = QPushButton("Open")
        self.look_button = QPushButton("Look")
        self.collapse_button = QPushButton("Close")
        self.related_button = QPushButton("Related")
        self.expand_button.clicked.connect(lambda: self._act("open"))
        self.look_button.clicked.connect(lambda: self._act("look"))
        self.collapse_button.clicked.connect(lambda: self._act("close"))
        self.related_button.clicked.connect(lambda: self._act("related"))
        for btn in (
            self.expand_button,
            self.look_button,
            self.collapse_button,
            self.related_button,
        ):
            actions.addWidget(btn)
        left_box.addLayout(actions)
        finder = QHBoxLayout()
        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("search descriptors…")
        self.search_edit.returnPressed.connect(self.run_search)
        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText("filter facets, e.g. kind=runbook")
        self.filter_edit.returnPressed.connect(self.run_filter)
        finder.addWidget(self.search_edit)
        finder.addWidget(self.filter_edit)
        left_box.addLayout(finder)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        left_box.addWidget(self.status)
        split.addWidget(left)

        self.tabs = QTabWidget()
        self.frontier_view = QPlainTextEdit()
        self.frontier_view.setReadOnly(True)
        self.output_view = QPlainTextEdit()
        self.output_view.setReadOnly(True)
        self.details = QPlainTextEdit()
        self.details.setReadOnly(True)
        self.tabs.addTab(self.frontier_view, "Frontier")
        self.tabs.addTab(self.output_view, "Output")
        self.tabs.addTab(self.details, "Node")
        self.tabs.addTab(self._build_eval(), "Eval")
        split.addWidget(self.tabs)
        root.addWidget(split, 1)
        self.tree.currentItemChanged.connect(self._show_details)
        self.view_level.currentTextChanged.connect(lambda _: self.reset_session())
        self._set_enabled(False)

    def _build_eval(self) -> QWidget:
        page = QWidget()
        box = QVBoxLayout(page)
        row = QHBoxLayout()
        self.cases_edit = QLineEdit()
        self.cases_edit.setPlaceholderText("cases.json")
        browse = QPushButton("Cases…")
        browse.clicked.connect(self._choose_cases)
        self.navigator_box = QComboBox()
        self.navigator_box.addItems(["keyword", "llm"])
        if self._chat_model_factory is None:
            model = self.navigator_box.model()
            item = getattr(model, "item", None)
            if item is not None:
                item(1).setEnabled(False)
            self.navigator_box.setToolTip("The LLM navigator needs a loaded chat model.")
        self.eval_button = QPushButton("Run eval")
        self.eval_button.clicked.connect(self.start_eval)
        for w in (self.cases_edit, browse, self.navigator_box, self.eval_button):
            row.addWidget(w)
        box.addLayout(row)
        self.eval_summary = QPlainTextEdit()
        self.eval_summary.setReadOnly(True)
        self.eval_summary.setMaximumHeight(190)
        box.addWidget(self.eval_summary)
        self.eval_table = QTableWidget(0, 6)
        self.eval_table.setHorizontalHeaderLabels(
            ["ok", "query", "target", "route", "tokens", "oracle"]
        )
        box.addWidget(self.eval_table, 1)
        return page

    def _set_enabled(self, on: bool) -> None:
        for w in (
            self.expand_button,
            self.look_button,
            self.collapse_button,
            self.related_button,
            self.search_edit,
            self.filter_edit,
            self.eval_button,
            self.reset_button,
        ):
            w.setEnabled(on)

    # ------------------------------------------------------------------ loading
    def _choose_file(self) -> None:
        name, _ = QFileDialog.getOpenFileName(
            self, "Open pcx manifest", "", "pcx manifests (*.json);;All files (*)"
        )
        if name:
            self.load_path(Path(name))

    def _choose_cases(self) -> None:
        name, _ = QFileDialog.getOpenFileName(self, "Eval cases", "", "JSON (*.json)")
        if name:
            self.cases_edit.setText(name)

    def load_path(self, path: Path, resolver: LeafResolver | None = None) -> bool:
        """Load and validate a manifest; on failure show every error and keep the old one."""
        try:
            manifest = load_manifest(path)
        except PicoContextError as exc:
            self._error(exc.message)
            return False
        self.path = path
        self.resolver = resolver if resolver is not None else leaves_next_to(path)
        # Cases belong to the manifest next to them: a new manifest never keeps another's.
        cases = path.parent / "cases.json"
        self.cases_edit.setText(str(cases) if cases.is_file() else "")
        self.show_manifest(manifest)
        return True

    def open_example(self) -> bool:
        """Load the bundled example manifest (with its leaves and eval cases)."""
        path = resource_path(*EXAMPLE_MANIFEST)
        if path is None:
            self._error("The bundled example manifest is missing from this installation.")
            return False
        return self.load_path(path)

    def show_manifest(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self.path_label.setText(
            f"{self.path.name if self.path else manifest.source.id} · "
            f"{len(manifest.nodes) + 1} nodes · costs by {manifest.tokenizer or 'unstated'}"
        )
        self.budget.blockSignals(True)
        self.budget.setMinimum(1)
        self.budget.setValue(manifest.variant.budget)
        self.budget.setEnabled(True)
        self.budget.blockSignals(False)
        self.hint.hide()
        self._fill_tree(manifest)
        self._set_enabled(True)
        self.reset_session()

    def show_run_manifest(
        self, manifest: Manifest, origin: str, used: dict[str, list[str]]
    ) -> None:
        """A manifest a navigated step compiled during a run (no file, no leaf store: the
        leaves were that run's own records), with the nodes the model's verbs touched
        highlighted and named in the status line."""
        self.path = None
        self.resolver = None
        self.cases_edit.setText("")
        self.show_manifest(manifest)
        self.path_label.setText(f"{origin} · {len(manifest.nodes) + 1} nodes")
        for node_id, verbs in used.items():
            item = self._items.get(node_id)
            if item is None:
                continue
            for column in range(self.tree.columnCount()):
                item.setBackground(column, _USED)
            item.setToolTip(1, f"{item.text(1)}\nthe model used: {', '.join(verbs)}")
            parent = item.parent()
            while parent is not None:
                parent.setExpanded(True)
                parent = parent.parent()
        touched = ", ".join(f"{node} ({'/'.join(v)})" for node, v in used.items()) or "none"
        self.status.setStyleSheet("")
        self.status.setText(
            f"Nodes used in this step, by the model or prefetched for it (highlighted): {touched}."
        )

    def _fill_tree(self, m: Manifest) -> None:
        self.tree.clear()
        self._items = {}
        top = QTreeWidgetItem([m.root_id, m.root.title or "", "root", "", "", ""])
        self.tree.addTopLevelItem(top)
        self._items[m.root_id] = top
        stack: list[tuple[str, QTreeWidgetItem]] = [(m.root_id, top)]
        while stack:  # iterative: validated depth, but never trust recursion with data
            nid, item = stack.pop()
            for cid in reversed(m.children_of(nid)):
                node = m.get(cid)
                kind = "leaf" if node.is_leaf else f"branch ({len(node.children or ())})"
                tokens = node.tokens if node.is_leaf else node.subtree_tokens
                child = QTreeWidgetItem(
                    [
                        cid,
                        node.title or "",
                        kind,
                        "" if tokens is None else str(tokens),
                        ", ".join(f"{k}={v}" for k, v in (node.facets or {}).items()),
                        ", ".join(link.to for link in node.links or ()),
                    ]
                )
                child.setToolTip(0, f"what: {node.what}\nwhen: {node.when}")
                child.setToolTip(1, node.title or "")
                child.setData(0, Qt.ItemDataRole.UserRole, cid)
                item.insertChild(0, child)
                self._items[cid] = child
                stack.append((cid, child))
        top.setExpanded(True)

    # ------------------------------------------------------------------ session
    def _mode_changed(self, mode: str) -> None:
        self.view_level.blockSignals(True)
        self.view_level.setCurrentText("full" if mode == "remote" else "brief")
        self.view_level.blockSignals(False)
        self.reset_session()

    def reset_session(self) -> None:
        if self.manifest is None:
            return
        level: ViewLevel = self.view_level.currentText()  # type: ignore[assignment]
        config = ModeConfig(
            view_level=level, inline_small_leaves=self.mode.currentText() == "remote"
        )
        try:
            self.session = NavSession(
                self.manifest,
                self.mode.currentText(),
                config=config,
                budget=self.budget.value(),
                reserve=self.reserve.value(),
                resolver=self.resolver,
            )
        except PicoContextError as exc:
            self.session = None
            self._error(exc.message)
            self._render()
            return
        self.output_view.setPlainText(self.session.index())
        self.status.setText("")
        self._render()

    def selected_id(self) -> str | None:
        item = self.tree.currentItem()
        if item is None:
            return None
        value = item.data(0, Qt.ItemDataRole.UserRole)
        return value if isinstance(value, str) else None

    def select(self, node_id: str) -> None:
        item = self._items.get(node_id)
        if item is not None:
            self.tree.setCurrentItem(item)

    def _act(self, verb: str) -> None:
        nid = self.selected_id()
        if self.session is None or nid is None:
            self._error("select a node first")
            return
        try:
            if verb == "open":
                out = self.session.open(nid)
            elif verb == "look":
                out = self.session.look([nid])
            elif verb == "close":
                out = f"closed {nid}: {self.session.close(nid)} tokens reclaimed"
            else:
                out = self.session.related(nid)
        except PicoContextError as exc:
            self._error(exc.message)
            self._render()
            return
        self.status.setText("")
        self.output_view.setPlainText(out)
        self._render()

    def run_search(self) -> None:
        if self.session is None:
            return
        query = self.search_edit.text().strip()
        hits = self.session.runtime.search(query, k=10) if query else []
        self.output_view.setPlainText("\n".join(hits) if hits else f"(no node matches {query!r})")
        if hits:
            self.select(hits[0])

    def run_filter(self) -> None:
        if self.session is None:
            return
        facets: dict[str, str] = {}
        for part in self.filter_edit.text().replace(",", " ").split():
            key, sep, value = part.partition("=")
            if not sep or not key or not value:
                self._error(f"filter terms look like key=value, not {part!r}")
                return
            facets[key] = value
        try:
            out = self.session.filter(**facets)
        except PicoContextError as exc:
            self._error(exc.message)
            self._render()
            return
        self.status.setText("")
        self.output_view.setPlainText(out)
        self._render()

    def _budget_changed(self, value: int) -> None:
        """A new budget starts a new session over the loaded manifest right away."""
        if self.manifest is not None and value > 0:
            self.reset_session()

    def _error(self, message: str) -> None:
        self.status.setText(message)
        self.status.setStyleSheet("color: #b00020;")

    def _render(self) -> None:
        s = self.session
        if s is None:
            self.budget_bar.setRange(0, 1)
            self.budget_bar.setValue(0)
            self.budget_label.setText("no session")
            self.frontier_view.setPlainText("")
            self.session_changed.emit()
            return
        rt = s.runtime
        self.budget_bar.setRange(0, rt.effective_budget)
        self.budget_bar.setValue(rt.spent)
        self.budget_label.setText(
            f"spent {rt.spent} of {rt.effective_budget} (budget {rt.budget} − reserve "
            f"{rt.reserve}) · remaining {rt.budget_remaining} · baseline {rt.baseline_tokens}"
            f" · shown {s.shown_tokens} · {rt.counter.name}"
        )
        self.frontier_view.setPlainText(rt.render())
        normal = QFont()
        bold = QFont()
        bold.setBold(True)
        for nid, item in self._items.items():
            if nid == rt.manifest.root_id:
                continue
            visible = rt.is_visible(nid)
            opened = rt.is_revealed(nid) or rt.is_spliced(nid)
            for col in range(6):
                item.setForeground(col, QBrush() if visible else _HIDDEN)
                item.setFont(col, bold if opened else normal)
            if rt.is_revealed(nid):
                item.setExpanded(True)
        self.session_changed.emit()

    def _show_details(self, current: QTreeWidgetItem | None, _prev: object = None) -> None:
        if current is None or self.manifest is None:
            return
        nid = current.data(0, Qt.ItemDataRole.UserRole)
        if not isinstance(nid, str):
            nid = self.manifest.root_id
        node = self.manifest.get(nid)
        lines = [
            f"id: {nid}",
            f"title: {node.title or ''}",
            f"what: {node.what}",
            f"when: {node.when}",
        ]
        if node.keywords:
            lines.append("keywords: " + ", ".join(node.keywords))
        for link in node.links or ():
            lines.append(f"see also {link.to}: {link.why or ''}")
        for k, v in (node.facets or {}).items():
            lines.append(f"facet {k} = {v}")
        if self.session is not None and nid != self.manifest.root_id:
            rt = self.session.runtime
            for level in ("title", "brief", "full"):
                lines.append(f"{level:>5}: {rt.level_cost(nid, level)} tokens")
            lines.append(f"open now costs {rt.expand_cost(nid)} tokens")
        self.details.setPlainText("\n".join(lines))

    # ------------------------------------------------------------------ eval
    def _navigator(self, use_llm: bool) -> Navigator:
        if use_llm and self._chat_model_factory is not None:
            return LLMNavigator(self._chat_model_factory())
        return KeywordNavigator()

    def start_eval(self) -> bool:
        """Run the eval on a worker thread; the result arrives through ``eval_finished``."""
        if self.manifest is None or self._thread is not None:
            return False
        try:
            cases = load_cases(self.cases_edit.text())
        except PicoContextError as exc:
            self._error(exc.message)
            return False
        manifest = self.manifest
        level: ViewLevel = self.view_level.currentText()  # type: ignore[assignment]
        budget, reserve, resolver = self.budget.value(), self.reserve.value(), self.resolver
        use_llm = self.navigator_box.currentText() == "llm"

        def job() -> EvalReport:
            # Built on the worker: loading a model must never block the window.
            navigator = self._navigator(use_llm)
            return run_eval(
                manifest,
                cases,
                navigator,
                budget=budget,
                reserve=reserve,
                view_level=level,
                resolver=resolver,
            )

        self.eval_button.setEnabled(False)
        self.eval_summary.setPlainText("running…")
        thread = _EvalThread(job, self)
        thread.succeeded.connect(self._eval_done)
        thread.failed.connect(self._eval_failed)
        thread.finished.connect(self._thread_done)
        self._thread = thread
        gcguard.hold()  # cycles are collected on the GUI thread only (see gcguard)
        thread.start()
        return True

    def _thread_done(self) -> None:
        if self._thread is not None:
            self._thread.deleteLater()
            gcguard.release()
        self._thread = None
        self.eval_button.setEnabled(self.manifest is not None)

    def shutdown(self, timeout_ms: int = 30_000) -> None:
        """Wait for a running eval (window close); the job itself is not interruptible."""
        if self._thread is not None:
            self._thread.wait(timeout_ms)

    def _eval_failed(self, message: str) -> None:
        self.eval_summary.setPlainText(f"eval failed: {message}")
        self._error(message)

    def _eval_done(self, report: EvalReport) -> None:
        self.show_report(report)
        self.eval_finished.emit(report)

    def show_report(self, report: EvalReport) -> None:
        self.last_report = report
        self.eval_summary.setPlainText(report.summary())
        self.eval_table.setRowCount(len(report.cases))
        for row, case in enumerate(report.cases):
            cells = [
                "✓" if case.success else "✗",
                case.query,
                case.target,
                " › ".join(case.path) or f"— ({case.stop_reason})",
                "" if case.tokens_to_answer is None else str(case.tokens_to_answer),
                "✓" if case.oracle_success else "✗",
            ]
            for col, text in enumerate(cells):
                self.eval_table.setItem(row, col, QTableWidgetItem(text))
        self.eval_table.resizeColumnsToContents()
        self.eval_table.setColumnWidth(1, min(self.eval_table.columnWidth(1), 260))


def create_tab(parent: QWidget | None = None) -> ManifestTab:
    """Entry point for the playground window. A window that can hand out its loaded chat
    model exposes ``chat_model_factory() -> ChatModel``; that enables the LLM navigator."""
    factory = getattr(parent, "chat_model_factory", None)
    return ManifestTab(parent, chat_model_factory=factory if callable(factory) else None)
