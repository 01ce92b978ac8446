"""The "Digest" tab: the distillation tree with levels, ContentHash / SemHash, token counts and
summaries; "what changed since" a remembered root (the map diff, highlighted); resolve a hash.

The widget shows state; the core computes it. It renders a
:class:`~picocontext.distill.DigestSnapshot` and asks a
:class:`~picocontext.distill.DigestTools` for the map diff and for resolve results.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from picocontext import PicoContextError
from picocontext.distill import (
    ROOT_ID,
    DigestNode,
    DigestSnapshot,
    DigestTools,
    MapResult,
    ResolveResult,
    label_of,
)
from picocontext_playground.qtenv import monospace_font
from picocontext_playground.widgets import empty_tab_hint

COLUMNS = ("Node", "Level", "Kind", "Tokens", "ContentHash", "SemHash")
_CHANGED = QBrush(QColor(255, 236, 179))
_NEW = QBrush(QColor(200, 235, 200))
_USED = QBrush(QColor("#fff4cc"))
_ID_ROLE = Qt.ItemDataRole.UserRole
_POPULATED = Qt.ItemDataRole.UserRole + 1


class DigestTab(QWidget):
    """Browse a digest tree, remember it, see what changed since, resolve hashes."""

    def __init__(self, tools: DigestTools | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tools: DigestTools | None = None
        self.snapshot = DigestSnapshot()
        self.remembered: dict[str, str] = {}
        self.diff: MapResult | None = None
        self.resolved: ResolveResult | None = None
        self.used: dict[str, list[str]] = {}
        self.origin = ""
        self._example_dir: tempfile.TemporaryDirectory[str] | None = None
        self._build()
        if tools is not None:
            self.set_tools(tools)

    # -- layout ------------------------------------------------------------------------------
    def _build(self) -> None:
        bar = QHBoxLayout()
        self.open_button = QPushButton("Open corpus…")
        self.open_button.clicked.connect(self._choose_corpus)
        self.reload_button = QPushButton("Reload")
        self.reload_button.clicked.connect(self.reload)
        self.remember_button = QPushButton("Remember root")
        self.remember_button.clicked.connect(self.remember)
        self.diff_button = QPushButton("What changed since")
        self.diff_button.clicked.connect(self.show_changes)
        self.root_label = QLabel("no corpus")
        for w in (self.open_button, self.reload_button, self.remember_button, self.diff_button):
            bar.addWidget(w)
        bar.addWidget(self.root_label, 1)

        self.hint, self.example_button = empty_tab_hint(
            "No digest yet. Open a corpus folder written by `picocontext distill sync` (it "
            "holds nodes.sqlite and cas/), use Open in Digest on a distilled step of a run, or "
            "open the bundled example: resources/corpora/docs distilled with the deterministic "
            "stand-in summarizer.",
            self.open_example,
        )

        self.tree = QTreeWidget()
        self.tree.setColumnCount(len(COLUMNS))
        self.tree.setHeaderLabels(list(COLUMNS))
        header = self.tree.header()
        # Titles are never cut: the node column takes its contents' width and the tree
        # scrolls sideways when the hashes do not fit next to it.
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        for col in range(1, len(COLUMNS)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(False)
        self.tree.currentItemChanged.connect(self._show_details)
        self.tree.itemExpanded.connect(self._populate)
        self._nodes: dict[str, DigestNode] = {}
        self._changed: set[str] = set()

        self.details = QPlainTextEdit()
        self.details.setReadOnly(True)
        self.details.setFont(monospace_font())

        resolve_row = QHBoxLayout()
        self.resolve_input = QLineEdit()
        self.resolve_input.setPlaceholderText("ContentHash (64 hex) or SemHash (16 hex)")
        self.resolve_input.returnPressed.connect(self.run_resolve)
        self.resolve_button = QPushButton("Resolve")
        self.resolve_button.clicked.connect(self.run_resolve)
        resolve_row.addWidget(self.resolve_input, 1)
        resolve_row.addWidget(self.resolve_button)
        self.resolve_results = QListWidget()
        self.resolve_results.itemActivated.connect(self._jump_to_result)
        self.resolve_results.itemClicked.connect(self._jump_to_result)

        self.status = QLabel("")
        self.status.setWordWrap(True)

        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(QLabel("Summary"))
        right_layout.addWidget(self.details, 3)
        right_layout.addLayout(resolve_row)
        right_layout.addWidget(self.resolve_results, 1)

        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.tree)
        split.addWidget(right)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)

        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.hint)
        layout.addWidget(split, 1)
        layout.addWidget(self.status)
        self._set_enabled(False)

    def _set_enabled(self, on: bool) -> None:
        for w in (self.reload_button, self.remember_button, self.resolve_button):
            w.setEnabled(on)
        self.diff_button.setEnabled(on and bool(self.remembered))

    # -- data --------------------------------------------------------------------------------
    def set_tools(self, tools: DigestTools) -> None:
        self.tools = tools
        self._set_enabled(True)
        self.reload()

    def open_corpus(self, path: Path) -> bool:
        if self._example_dir is None or not path.is_relative_to(self._example_dir.name):
            self.origin = ""
        try:
            tools = DigestTools.open(path)
        except PicoContextError as exc:
            self._error(str(exc))
            return False
        if self.tools is not None:
            self.tools.close()
        self.set_tools(tools)
        return True

    def _choose_corpus(self) -> None:
        chosen = QFileDialog.getExistingDirectory(self, "Open a digest corpus")
        if chosen:
            self.open_corpus(Path(chosen))

    def reload(self) -> None:
        """Re-read the tree from the corpus (keeps the remembered root and the diff view)."""
        if self.tools is None:
            return
        try:
            snapshot = self.tools.snapshot()
        except PicoContextError as exc:
            self._error(str(exc))
            return
        self.show_snapshot(snapshot)

    def show_snapshot(self, snapshot: DigestSnapshot) -> None:
        self.snapshot = snapshot
        self.diff = None
        self.used = {}
        self._show_root()
        self.hint.hide()
        self._fill_tree()
        self.status.setText("")

    def _show_root(self) -> None:
        """The root hash and node count of the snapshot on screen (after every reload)."""
        root = self.snapshot.node(ROOT_ID)
        count = len(self.snapshot.nodes)
        self.root_label.setText(
            f"{self.origin}root {root.content_hash[:16]}…  ·  {count} nodes"
            if root is not None
            else f"{self.origin}no root  ·  {count} nodes"
        )

    def show_run_digest(
        self, snapshot: DigestSnapshot, origin: str, used: dict[str, list[str]]
    ) -> None:
        """The digest tree a distilled step left during a run (read-only: the run's corpus
        is gone), with the nodes the model's calls named highlighted."""
        if self.tools is not None:
            self.tools.close()
            self.tools = None
        self.remembered = {}
        self.origin = f"{origin} · "
        self.show_snapshot(snapshot)
        self.used = dict(used)
        self._fill_tree()
        self._set_enabled(False)
        named = ", ".join(f"{n} ({'/'.join(v)})" for n, v in used.items()) or "none"
        self.status.setText(f"Nodes the model asked for in this step (highlighted): {named}.")

    def open_example(self) -> bool:
        """Distil the bundled docs corpus with the deterministic summarizer into a temporary
        folder owned by this tab, and open it."""
        from picocontext.distill import (
            DistillConfig,
            Distiller,
            DocumentFolderSource,
            FakeSummarizer,
            LexicalEmbedder,
        )
        from picocontext_playground.manifest_tab import resource_path

        source = resource_path("corpora", "docs")
        if source is None:
            self._error("The bundled example corpus is missing from this installation.")
            return False
        if self._example_dir is None:
            self._example_dir = tempfile.TemporaryDirectory(prefix="picocontext-digest-")
        corpus = Path(self._example_dir.name) / "docs"
        try:
            distiller = Distiller.open(
                corpus, FakeSummarizer(), LexicalEmbedder(), config=DistillConfig(corpus="docs")
            )
            try:
                distiller.sync(DocumentFolderSource(source))
            finally:
                distiller.close()
        except PicoContextError as exc:
            self._error(str(exc))
            return False
        self.origin = "example (resources/corpora/docs, stand-in summaries) · "
        return self.open_corpus(corpus)

    def _fill_tree(self) -> None:
        """Top-level items now; children are added when an item is first expanded, so a
        10,000-leaf corpus (where a leaf sits under a scope *and* a cluster) stays cheap."""
        self.tree.clear()
        self._nodes = {n.id: n for n in self.snapshot.nodes}
        self._changed = {x.id for x in self.diff.changed} if self.diff else set()
        # The root, then every other node nothing lists as a child: with deferred views
        # (the distiller's default) day scopes and clusters hang from no parent, and without a
        # root yet that is the whole top of the corpus.
        children = {c for n in self.snapshot.nodes for c in n.child_ids}
        tops = sorted(
            (n for n in self.snapshot.nodes if n.id not in children),
            key=lambda n: (n.id != ROOT_ID, -n.level, n.id),
        )
        for node in tops:
            self.tree.addTopLevelItem(self._item_for(node))
        first = self.tree.topLevelItem(0)
        if first is not None:
            first.setExpanded(True)
            self.tree.setCurrentItem(first)

    def _item_for(self, node: DigestNode) -> QTreeWidgetItem:
        item = QTreeWidgetItem(
            [
                label_of(node) + (" (view, summary pending)" if node.is_pending else ""),
                str(node.level),
                node.kind,
                str(node.tokens),
                node.content_hash[:16],
                node.sem_hash,
            ]
        )
        item.setData(0, _ID_ROLE, node.id)
        item.setToolTip(0, node.id)
        if node.id in self._changed:
            brush = _NEW if node.id not in self.remembered else _CHANGED
            for col in range(len(COLUMNS)):
                item.setBackground(col, brush)
        if node.id in self.used:
            for col in range(len(COLUMNS)):
                item.setBackground(col, _USED)
            item.setToolTip(0, f"{node.id}\nthe model used: {', '.join(self.used[node.id])}")
        if any(c in self._nodes for c in node.child_ids):
            item.setChildIndicatorPolicy(QTreeWidgetItem.ChildIndicatorPolicy.ShowIndicator)
        return item

    def _populate(self, item: QTreeWidgetItem) -> None:
        if item.childCount() or item.data(0, _POPULATED):
            return
        item.setData(0, _POPULATED, True)
        node = self._nodes.get(str(item.data(0, _ID_ROLE)))
        if node is None:
            return
        for child_id in node.child_ids:
            child = self._nodes.get(child_id)
            if child is not None:
                item.addChild(self._item_for(child))

    def changed_items(self) -> set[str]:
        """Ids highlighted as changed or new (what the map diff reported)."""
        return set(self._changed)

    # -- details -----------------------------------------------------------------------------
    def selected_id(self) -> str | None:
        item = self.tree.currentItem()
        return None if item is None else str(item.data(0, _ID_ROLE))

    def select(self, node_id: str) -> bool:
        """Select ``node_id``: find a path from a top item through child_ids, expand along it."""
        parents: dict[str, str] = {}
        tops = self._top_items()
        queue = [str(t.data(0, _ID_ROLE)) for t in tops]
        seen = set(queue)
        while queue and node_id not in seen:
            current = queue.pop(0)
            for child in self._nodes[current].child_ids if current in self._nodes else ():
                if child not in seen and child in self._nodes:
                    seen.add(child)
                    parents[child] = current
                    queue.append(child)
        if node_id not in seen:
            return False
        path = [node_id]
        while path[-1] in parents:
            path.append(parents[path[-1]])
        path.reverse()
        item = next((t for t in tops if t.data(0, _ID_ROLE) == path[0]), None)
        for step in path[1:]:
            if item is None:
                return False
            self._populate(item)
            item.setExpanded(True)
            item = next((c for c in self._children(item) if c.data(0, _ID_ROLE) == step), None)
        if item is None:
            return False
        self.tree.setCurrentItem(item)
        self.tree.scrollToItem(item)
        return True

    def _top_items(self) -> list[QTreeWidgetItem]:
        items = (self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount()))
        return [i for i in items if i is not None]

    @staticmethod
    def _children(item: QTreeWidgetItem) -> list[QTreeWidgetItem]:
        kids = (item.child(i) for i in range(item.childCount()))
        return [k for k in kids if k is not None]

    def _show_details(self, current: QTreeWidgetItem | None, _prev: object = None) -> None:
        if current is None:
            self.details.setPlainText("")
            return
        node = self.snapshot.node(str(current.data(0, _ID_ROLE)))
        if node is None:
            return
        lines = [
            node.id,
            f"level {node.level} · {node.kind} · {node.tokens} tokens",
            f"ContentHash {node.content_hash}",
            f"SemHash     {node.sem_hash}",
            f"Summary     {node.summary_hash}",
        ]
        if node.scope_name:
            lines.append(f"scope {node.scope_name} = {node.scope_id}")
        if node.parent_ids:
            lines.append("parents " + ", ".join(node.parent_ids))
        summary = self.snapshot.summaries.get(node.id, "")
        if node.is_pending:
            summary = (
                "(summary pending: this view is written on its first `digest` or `recall`, or "
                "by `picocontext-distill complete`; its ContentHash is already exact)"
            )
        lines += ["", summary]
        self.details.setPlainText("\n".join(lines))

    # -- remember / diff / resolve -----------------------------------------------------------
    def remember(self) -> None:
        """Remember every node's ContentHash, like an agent keeping the root it saw."""
        self.remembered = self.snapshot.known_hashes()
        root = self.remembered.get(ROOT_ID, "")
        self.status.setText(f"Remembered {len(self.remembered)} hashes (root {root[:16]}…).")
        self._set_enabled(self.tools is not None)

    def show_changes(self) -> MapResult | None:
        """Reload, ask the core for the map diff against the remembered hashes, highlight it."""
        if self.tools is None or not self.remembered:
            return None
        try:
            snapshot = self.tools.snapshot()
            diff = self.tools.map(known_hashes=self.remembered)
        except PicoContextError as exc:
            self._error(str(exc))
            return None
        self.snapshot = snapshot
        self.diff = diff
        self._show_root()
        self._fill_tree()
        self._set_enabled(True)
        changed = diff.changed
        new = sum(1 for x in changed if x.id not in self.remembered)
        text = (
            f"{len(changed) - new} changed, {new} new, {len(diff.deleted)} deleted "
            f"of {len(diff.lines)} nodes since the remembered root."
        )
        if diff.deleted:
            text += " Deleted: " + ", ".join(diff.deleted[:8])
            text += " …" if len(diff.deleted) > 8 else ""
        self.status.setText(text)
        return diff

    def run_resolve(self) -> ResolveResult | None:
        if self.tools is None:
            return None
        value = self.resolve_input.text().strip()
        if not value:
            return None
        try:
            result = self.tools.resolve(value)
        except PicoContextError as exc:
            self._error(str(exc))
            return None
        self.resolved = result
        self.resolve_results.clear()
        if result.exact is not None:
            self._add_result(f"exact  {result.exact.id}", result.exact.id)
        for node_id in result.also_exact:
            self._add_result(f"exact  {node_id}", node_id)
        for match in result.near:
            self._add_result(f"{match.hamming_bits:>2} bits  {match.node.id}", match.node.id)
        if not self.resolve_results.count():
            self._add_result("no node has this hash", "")
        return result

    def _add_result(self, text: str, node_id: str) -> None:
        item = QListWidgetItem(text)
        item.setData(_ID_ROLE, node_id)
        self.resolve_results.addItem(item)

    def _jump_to_result(self, item: QListWidgetItem) -> None:
        node_id = item.data(_ID_ROLE)
        if node_id:
            self.select(str(node_id))

    def _error(self, message: str) -> None:
        self.status.setText(f"Error: {message}")


def save_screenshot(
    corpus: Path,
    output: Path,
    select: str | None = None,
    known: dict[str, str] | None = None,
    size: tuple[int, int] = (1280, 760),
) -> Path:
    """Render the tab for ``corpus`` offscreen (or on screen) into a PNG, optionally with a
    node selected and the diff against ``known`` hashes highlighted — for READMEs and reports."""
    from picocontext_playground.qtenv import application, choose_platform, require_glyphs

    choose_platform(headless=True)
    app = application()
    require_glyphs(app)
    tab = DigestTab()
    tab.resize(*size)
    if not tab.open_corpus(corpus):
        raise PicoContextError(tab.status.text())
    if known:
        tab.remembered = dict(known)
        tab.show_changes()
    if select:
        tab.select(select)
    tab.show()
    app.processEvents()
    output.parent.mkdir(parents=True, exist_ok=True)
    if not tab.grab().save(str(output), "PNG"):
        raise PicoContextError(f"Could not write {output}.")
    tab.close()
    return output


def main(argv: list[str] | None = None) -> int:
    """``python -m picocontext_playground.digest_tab CORPUS OUT.png [--select ID] [--known F]``"""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="digest_tab", description=main.__doc__)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--select", default=None)
    parser.add_argument("--known", type=Path, default=None, help="JSON from `snapshot`")
    args = parser.parse_args(argv)
    known = json.loads(args.known.read_text(encoding="utf-8")) if args.known else None
    try:
        print(save_screenshot(args.corpus, args.output, args.select, known))
    except PicoContextError as exc:
        print(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
