"""Offscreen test of the Manifests tab: load, navigate with a live budget, refusals, search,
filter, and an eval run on the worker thread."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QApplication

from picocontext.manifest.eval import EvalReport
from picocontext_playground.manifest_tab import ManifestTab

HOMELAB = Path(__file__).resolve().parents[2] / "resources" / "manifests" / "homelab"


@pytest.fixture(scope="module")
def app() -> Iterator[QApplication]:
    existing = QApplication.instance()
    yield existing if isinstance(existing, QApplication) else QApplication([])


@pytest.fixture
def tab(app: QApplication) -> Iterator[ManifestTab]:
    widget = ManifestTab()
    assert widget.load_path(HOMELAB / "homelab.pcx.2k.json")
    widget.show()
    yield widget
    widget.shutdown()
    widget.close()
    widget.deleteLater()
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def test_loads_tree_costs_and_budget(tab: ManifestTab) -> None:
    assert tab.manifest is not None and tab.session is not None
    assert len(tab._items) == len(tab.manifest.nodes) + 1
    assert tab.resolver is not None  # leaves/ next to the manifest
    rt = tab.session.runtime
    assert tab.budget_bar.maximum() == rt.effective_budget == 2048
    assert tab.budget_bar.value() == rt.spent == rt.baseline_tokens
    assert "heuristic:4chars" in tab.path_label.text()
    assert tab.frontier_view.toPlainText() == rt.render()
    assert tab.cases_edit.text().endswith("cases.json")


def test_expand_collapse_update_the_budget_live(tab: ManifestTab) -> None:
    assert tab.session is not None
    start = tab.budget_bar.value()
    tab.select("network")
    tab.expand_button.click()
    after_open = tab.budget_bar.value()
    assert after_open > start and tab.session.runtime.is_revealed("network")
    assert "network.dns [leaf]" in tab.output_view.toPlainText()
    tab.select("network.dns")
    tab.expand_button.click()
    assert "Pi-hole" in tab.output_view.toPlainText()
    assert tab.budget_bar.value() == tab.session.spent > after_open
    tab.select("network")
    tab.collapse_button.click()
    assert tab.budget_bar.value() == start
    assert "tokens reclaimed" in tab.output_view.toPlainText()


def test_refusals_are_shown_not_raised(tab: ManifestTab) -> None:
    tab.select("storage.pool")
    tab.expand_button.click()
    assert "not on the frontier" in tab.status.text()
    tab.budget.setValue(10)
    tab.reset_session()
    assert tab.session is None and "below the baseline" in tab.status.text()


def test_view_levels_change_the_charged_frontier(tab: ManifestTab) -> None:
    costs = {}
    for level in ("title", "brief", "full"):
        tab.view_level.setCurrentText(level)
        assert tab.session is not None
        costs[level] = tab.session.spent
    assert costs["title"] < costs["brief"] < costs["full"]
    tab.mode.setCurrentText("remote")
    assert tab.view_level.currentText() == "full"


def test_search_and_filter(tab: ManifestTab) -> None:
    tab.search_edit.setText("wireguard peer")
    tab.run_search()
    assert tab.selected_id() == "network.vpn"
    assert tab.session is not None
    before = tab.session.spent
    tab.filter_edit.setText("kind=runbook")
    tab.run_filter()
    assert "storage.replace" in tab.output_view.toPlainText()
    assert tab.session.runtime.is_visible("monitoring.ups") and tab.session.spent > before
    tab.filter_edit.setText("nonsense")
    tab.run_filter()
    assert "key=value" in tab.status.text()


def test_bad_manifest_keeps_the_old_one(tab: ManifestTab, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    data = json.loads((HOMELAB / "homelab.pcx.2k.json").read_text())
    data["root"]["children"].append("network")
    bad.write_text(json.dumps(data))
    assert not tab.load_path(bad)
    assert "duplicate child ref" in tab.status.text()
    assert tab.manifest is not None and tab.manifest.source.id == "homelab"


def test_eval_runs_on_a_worker_and_shows_routes(tab: ManifestTab, app: QApplication) -> None:
    results: list[EvalReport] = []
    tab.eval_finished.connect(results.append)
    assert tab.start_eval()
    deadline = time.monotonic() + 30
    while (not results or tab._thread is not None) and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.01)
    assert results, "eval did not finish"
    report = results[0]
    assert report.n == 10 and tab.eval_table.rowCount() == 10
    first = report.cases[0]
    route_cell = tab.eval_table.item(0, 3)
    assert route_cell is not None
    assert route_cell.text() == (" › ".join(first.path) or f"— ({first.stop_reason})")
    assert "navigation_success" in tab.eval_summary.toPlainText()
    assert tab.eval_button.isEnabled()


class _ScriptChat:
    """A deterministic ChatModel: always opens the first listed option whose id contains
    the query's first word, else stops."""

    model_id = "script"

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def chat(self, messages: Any, max_tokens: int, tools: Any = (), cancel: Any = None) -> Any:
        from picocontext.backend import ModelResponse

        user = messages[-1].content
        query = user.split("\n")[0].removeprefix("Query: ").split()[0]
        for line in user.splitlines():
            if line.startswith("- ") and query in line.split(" | ")[0]:
                return ModelResponse(text=f"OPEN {line[2:].split(' | ')[0]}")
        return ModelResponse(text="STOP")


def test_llm_navigator_in_the_tab_and_create_tab(app: QApplication, tmp_path: Path) -> None:
    from PySide6.QtWidgets import QWidget

    from picocontext_playground.manifest_tab import create_tab

    class Host(QWidget):
        def chat_model_factory(self) -> Any:
            return _ScriptChat()

    host = Host()
    tab = create_tab(host)
    assert tab.load_path(HOMELAB / "homelab.pcx.2k.json")
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps([{"query": "network dns", "target": "network.dns"}]))
    tab.cases_edit.setText(str(cases))
    tab.navigator_box.setCurrentText("llm")
    results: list[EvalReport] = []
    tab.eval_finished.connect(results.append)
    assert tab.start_eval()
    deadline = time.monotonic() + 30
    while (not results or tab._thread is not None) and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.01)
    assert results and results[0].navigator == "llm"
    assert results[0].cases[0].path == ("network", "network.dns")
    orphan = create_tab(None)
    assert orphan._chat_model_factory is None
    orphan.deleteLater()
    tab.shutdown()
    host.deleteLater()  # the tab is its child
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def test_pcx_build_output_opens_with_its_leaves(app: QApplication, tmp_path: Path) -> None:
    """``pcx build`` writes ``<name>.leaves.<budget>.json`` next to the manifest."""
    source = HOMELAB / "homelab.pcx.2k.json"
    (tmp_path / "homelab.pcx.2k.json").write_text(source.read_text(encoding="utf-8"))
    leaves = {p.stem: p.read_text(encoding="utf-8") for p in (HOMELAB / "leaves").iterdir()}
    (tmp_path / "homelab.leaves.2k.json").write_text(json.dumps(leaves), encoding="utf-8")
    widget = ManifestTab()
    try:
        assert widget.load_path(tmp_path / "homelab.pcx.2k.json")
        assert widget.resolver is not None
        some_id = next(iter(leaves))
        assert widget.resolver(some_id) == leaves[some_id]
    finally:
        widget.shutdown()
        widget.deleteLater()


def test_empty_tab_says_what_to_do_and_opens_the_example(app: QApplication) -> None:
    widget = ManifestTab()
    try:
        widget.show()
        assert widget.hint.isVisible() and widget.example_button.text() == "Open example"
        assert widget.budget.text() == "budget (from the manifest)"  # never "budget 1"
        assert not widget.budget.isEnabled()
        widget.example_button.click()
        assert widget.manifest is not None and not widget.hint.isVisible()
        assert widget.cases_edit.text().endswith("cases.json")
        assert widget.budget.value() == widget.manifest.variant.budget
    finally:
        widget.shutdown()
        widget.deleteLater()


def test_budget_change_applies_at_once(tab: ManifestTab) -> None:
    assert tab.session is not None
    tab.budget.setValue(tab.budget.value() // 2)
    assert tab.session is not None and tab.session.runtime.budget == tab.budget.value()


def test_a_new_manifest_never_keeps_the_previous_cases(tab: ManifestTab, tmp_path: Path) -> None:
    assert tab.cases_edit.text().endswith("cases.json")
    alone = tmp_path / "homelab.pcx.2k.json"
    alone.write_text((HOMELAB / "homelab.pcx.2k.json").read_text(encoding="utf-8"))
    assert tab.load_path(alone)
    assert tab.cases_edit.text() == ""
