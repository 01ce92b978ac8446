"""Offscreen test of the Digest tab: tree with levels and hashes, summaries, remember + what
changed since (highlighted map diff), resolve, and opening a corpus directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from picocontext.distill import ROOT_ID, DigestTools, Distiller
from picocontext.distill.testing import VariedEmbedder, build, note, seven_node_units
from picocontext_playground.digest_tab import COLUMNS, DigestTab


@pytest.fixture(scope="module")
def app() -> Iterator[QApplication]:
    existing = QApplication.instance()
    yield existing if isinstance(existing, QApplication) else QApplication([])


@pytest.fixture
def corpus(tmp_path: Path) -> Iterator[Distiller]:
    d = build(tmp_path / "corpus", embedder=VariedEmbedder())
    d.apply([*seven_node_units(), note("n4", "gasket replaced", "s3")])
    yield d
    d.close()


@pytest.fixture
def tab(app: QApplication, corpus: Distiller) -> Iterator[DigestTab]:
    widget = DigestTab(corpus.tools())
    widget.resize(1000, 600)
    widget.show()
    yield widget
    widget.close()
    widget.deleteLater()


def test_tree_shows_levels_hashes_tokens_and_summaries(tab: DigestTab, corpus: Distiller) -> None:
    assert tab.tree.headerItem().text(4) == "ContentHash" and len(COLUMNS) == 6
    top = tab.tree.topLevelItem(0)
    root = corpus.store.get(ROOT_ID)
    assert root is not None and top is not None
    assert top.text(0) == "root" and top.toolTip(0) == ROOT_ID
    assert top.text(1) == "2" and top.text(2) == "tenant"
    assert top.text(3) == str(root.tokens) and top.text(4) == root.content_hash[:16]
    assert top.text(5) == root.sem_hash
    assert top.childCount() == len(root.child_ids)  # expanded: children populated
    assert root.content_hash in tab.details.toPlainText()
    assert "rollup(" in tab.details.toPlainText()
    assert tab.select("digest:0:note:n1")
    item = tab.tree.currentItem()
    assert item is not None and item.text(1) == "0" and item.text(2) == "entity"
    assert "l0(Pump vibration high)" in tab.details.toPlainText()


def test_what_changed_since_a_remembered_root(tab: DigestTab, corpus: Distiller) -> None:
    assert not tab.diff_button.isEnabled()
    tab.remember()
    assert tab.diff_button.isEnabled()
    corpus.apply([note("n1", "vibration critical", "s1", title="Pump"), note("n5", "new", "s9")])
    diff = tab.show_changes()
    assert diff is not None
    expected = {x.id for x in corpus.tools().map(known_hashes=tab.remembered).changed}
    assert tab.changed_items() == expected
    assert "digest:0:note:n1" in expected and ROOT_ID in expected
    assert "new" in tab.status.text() and "changed" in tab.status.text()
    top = tab.tree.topLevelItem(0)
    assert top is not None and top.background(0).style() == Qt.BrushStyle.SolidPattern
    assert tab.select("digest:0:note:n4")
    current = tab.tree.currentItem()
    assert current is not None and current.background(0).style() == Qt.BrushStyle.NoBrush


def test_resolve_exact_and_near(tab: DigestTab, corpus: Distiller) -> None:
    root = corpus.store.get(ROOT_ID)
    assert root is not None
    tab.resolve_input.setText(root.content_hash)
    result = tab.run_resolve()
    assert result is not None and result.exact is not None
    assert tab.resolve_results.item(0).text() == f"exact  {ROOT_ID}"
    leaf = corpus.store.get("digest:0:note:n3")
    assert leaf is not None
    tab.resolve_input.setText(leaf.sem_hash)
    tab.run_resolve()
    texts = [tab.resolve_results.item(i).text() for i in range(tab.resolve_results.count())]
    assert " 0 bits  digest:0:note:n3" in texts
    tab._jump_to_result(tab.resolve_results.item(texts.index(" 0 bits  digest:0:note:n3")))
    assert tab.selected_id() == "digest:0:note:n3"
    tab.resolve_input.setText("deadbeef")
    tab.run_resolve()
    assert tab.resolve_results.item(0).text() == "no node has this hash"


def test_open_corpus_directory_and_errors(
    app: QApplication, corpus: Distiller, tmp_path: Path
) -> None:
    widget = DigestTab()
    assert not widget.reload_button.isEnabled()
    assert not widget.open_corpus(tmp_path / "missing")
    assert widget.status.text().startswith("Error:")
    assert widget.open_corpus(corpus.store.path.parent)
    top = widget.tree.topLevelItem(0)
    assert top is not None and top.toolTip(0) == ROOT_ID
    assert isinstance(widget.tools, DigestTools)
    image = widget.grab()
    assert not image.isNull()
    widget.close()
    widget.deleteLater()


def test_screenshot_with_a_highlighted_diff(
    app: QApplication, corpus: Distiller, tmp_path: Path
) -> None:
    from picocontext_playground.digest_tab import save_screenshot

    known = corpus.snapshot(with_summaries=False).known_hashes()
    corpus.apply([note("n2", "pressure high", "s1", title="Valve")])
    out = save_screenshot(
        corpus.store.path.parent, tmp_path / "digest.png", select="digest:0:note:n2", known=known
    )
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_deferred_views_are_top_level_and_say_when_their_summary_is_pending(
    app: QApplication, tmp_path: Path
) -> None:
    """With the default layout a secondary scope is a view: no parent, so it is listed after
    the root instead of being unreachable, and its pending summary is labelled as such."""
    # one embedding for all: the scoped leaves also form a cluster, which is a view
    d = build(tmp_path / "views", views="deferred", split_key="id")
    try:
        d.apply([*seven_node_units(), note("n4", "gasket replaced", "s3")])
        widget = DigestTab(d.tools())
        try:
            tops = [widget.tree.topLevelItem(i) for i in range(widget.tree.topLevelItemCount())]
            ids = [t.toolTip(0) for t in tops if t is not None]
            assert ids[0] == ROOT_ID and len(ids) > 1
            orphans = {n.id for n in d.store.nodes() if not n.parent_ids} - {ROOT_ID}
            assert set(ids[1:]) == orphans and orphans
            pending = [n for n in d.store.nodes() if n.level > 0 and not n.summary_hash]
            assert pending, "the layout left no view pending"
            assert widget.select(pending[0].id)
            item = widget.tree.currentItem()
            assert item is not None and item.text(0).endswith("(view, summary pending)")
            assert "summary pending" in widget.details.toPlainText()
        finally:
            widget.close()
            widget.deleteLater()
    finally:
        d.close()


def test_root_label_follows_what_changed_since(tab: DigestTab, corpus: Distiller) -> None:
    tab.remember()
    before = tab.root_label.text()
    corpus.apply([note("n2", "pressure high", "s1", title="Valve")])
    assert tab.show_changes() is not None
    root = corpus.store.get(ROOT_ID)
    assert root is not None
    assert root.content_hash[:16] in tab.root_label.text()
    assert tab.root_label.text() != before  # not the old hash any more


def test_titles_are_never_cut(tab: DigestTab) -> None:
    from PySide6.QtWidgets import QHeaderView

    mode = tab.tree.header().sectionResizeMode(0)
    assert mode is QHeaderView.ResizeMode.ResizeToContents


def test_empty_tab_offers_the_bundled_example(app: QApplication) -> None:
    widget = DigestTab()
    try:
        widget.show()
        assert widget.hint.isVisible() and widget.example_button.text() == "Open example"
        widget.example_button.click()
        assert widget.tools is not None and widget.snapshot.nodes
        assert not widget.hint.isVisible()
        assert widget.root_label.text().startswith("example (resources/corpora/docs")
    finally:
        if widget.tools is not None:
            widget.tools.close()
        widget.deleteLater()
