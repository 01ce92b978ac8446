"""The File menu: open a manifest or a digest corpus in their tabs, save and export the shown
run by extension (only once something finished), quit; and why Run is grey."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QApplication, QFileDialog, QMenu
from pytestqt.qtbot import QtBot

from picocontext.distill.testing import VariedEmbedder, build, seven_node_units
from picocontext_playground.digest_tab import DigestTab
from picocontext_playground.manifest_tab import ManifestTab
from picocontext_playground.results import ComparisonResult
from picocontext_playground.settings import ComparisonSettings, ModelChoice
from picocontext_playground.textreport import render_report
from picocontext_playground.window import MainWindow

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "resources" / "manifests" / "homelab" / "homelab.pcx.2k.json"
RUN_TIMEOUT_MS = 20_000


@pytest.fixture
def window(qt_app: QApplication, qtbot: QtBot) -> Iterator[MainWindow]:
    win = MainWindow(ComparisonSettings(model=ModelChoice.SCRIPTED))
    qtbot.addWidget(win)
    win.show()
    yield win
    win.shutdown()


def finish_run(qtbot: QtBot, win: MainWindow) -> ComparisonResult:
    with qtbot.waitSignal(win.run_finished, timeout=RUN_TIMEOUT_MS) as blocker:
        win.start_comparison()
    result = blocker.args[0]
    assert isinstance(result, ComparisonResult)
    return result


def answer_save_dialog(monkeypatch: pytest.MonkeyPatch, path: Path, chosen_filter: str) -> None:
    monkeypatch.setattr(
        QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(path), chosen_filter))
    )


def test_file_menu_lists_its_actions_with_shortcuts(window: MainWindow) -> None:
    menus = [a.text() for a in window.menuBar().actions()]
    assert menus == ["&File"]
    file_menu = window.menuBar().actions()[0].menu()
    assert isinstance(file_menu, QMenu)
    texts = [a.text() for a in file_menu.actions() if not a.isSeparator()]
    assert texts == [
        "Open manifest…",
        "Open digest corpus…",
        "Save report…",
        "Export… (JSON)",
        "Quit",
    ]
    assert window.save_action.shortcut() == QKeySequence(QKeySequence.StandardKey.Save)
    assert window.save_action.shortcut().toString() == "Ctrl+S"


def test_save_and_export_are_enabled_only_when_a_run_finished(
    qtbot: QtBot, window: MainWindow
) -> None:
    assert not window.save_action.isEnabled() and not window.export_action.isEnabled()
    assert not window.controls.save_button.isEnabled()
    finish_run(qtbot, window)
    assert window.save_action.isEnabled() and window.export_action.isEnabled()
    window.controls.pressure.setChecked(True)  # new settings: the result is gone
    assert not window.save_action.isEnabled() and not window.export_action.isEnabled()


def test_save_report_saves_by_extension_and_adds_the_chosen_filters_one(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = finish_run(qtbot, window)
    answer_save_dialog(monkeypatch, tmp_path / "run.txt", "Text report (*.txt)")
    window.save_action.trigger()
    assert (tmp_path / "run.txt").read_text(encoding="utf-8") == render_report(result)
    answer_save_dialog(monkeypatch, tmp_path / "page", "Web page (self-contained) (*.html)")
    window.save_action.trigger()
    assert (tmp_path / "page.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert window.status.text() == f"Saved the report to {tmp_path / 'page.html'}."


def test_export_writes_the_json_run(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    finish_run(qtbot, window)
    answer_save_dialog(monkeypatch, tmp_path / "export", "")
    window.export_action.trigger()
    doc = json.loads((tmp_path / "export.json").read_text(encoding="utf-8"))
    assert doc["format"] == "picocontext-playground-report" and "verdict" in doc


def test_a_save_that_fails_says_why_in_the_status_line(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    finish_run(qtbot, window)
    (tmp_path / "file").write_text("x")
    answer_save_dialog(monkeypatch, tmp_path / "file" / "r.json", "")
    window.save_action.trigger()
    assert window.status.text().startswith("Could not save the report: ")


def test_open_manifest_switches_to_the_manifest_tab_and_loads_it(
    window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        QFileDialog, "getOpenFileName", staticmethod(lambda *a, **k: (str(MANIFEST), ""))
    )
    window.open_manifest_action.trigger()
    tab = window.tabs.currentWidget()
    assert isinstance(tab, ManifestTab) and window.tabs.tabText(window.tabs.currentIndex()) == (
        "Manifest"
    )
    assert tab.path == MANIFEST and tab.manifest is not None


def test_open_digest_switches_to_the_digest_tab_and_opens_the_corpus(
    window: MainWindow, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    corpus = build(tmp_path / "corpus", embedder=VariedEmbedder())
    corpus.apply(seven_node_units())
    folder = corpus.store.path.parent
    corpus.close()
    monkeypatch.setattr(
        QFileDialog, "getExistingDirectory", staticmethod(lambda *a, **k: str(folder))
    )
    window.open_digest_action.trigger()
    tab = window.tabs.currentWidget()
    assert isinstance(tab, DigestTab) and tab.tools is not None
    assert tab.tree.topLevelItemCount() > 0


def test_cancelled_dialogs_change_nothing(
    window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(lambda *a, **k: ("", "")))
    window.open_manifest_action.trigger()
    assert window.tabs.currentIndex() == 0


def test_quit_closes_the_window(qtbot: QtBot, window: MainWindow) -> None:
    window.quit_action.trigger()
    assert not window.isVisible()


def test_run_says_why_it_is_grey_when_no_policy_is_ticked(window: MainWindow) -> None:
    for box in window.controls.policy_boxes.values():
        box.setChecked(False)
    assert not window.controls.run_button.isEnabled()
    assert window.controls.run_button.toolTip() == "Tick at least one policy to run a comparison."
    assert window.status.text() == "Tick at least one policy to run a comparison."
    window.controls.policy_boxes["editable"].setChecked(True)
    assert (
        window.controls.run_button.isEnabled() and "Ctrl+R" in window.controls.run_button.toolTip()
    )
