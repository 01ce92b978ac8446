"""Offscreen test of the Conversation tab: open a conversation, compare in a worker thread,
and the facts-lost view (a cell per question and policy that says where missing evidence
went), plus opening a saved report and refusing a bad file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from PySide6.QtWidgets import QApplication

from picocontext_playground.conversation_tab import (
    IN_PROMPT,
    NO_PROMPT,
    POLICIES,
    ConversationTab,
    compare,
)
from picocontext_playground.extra_tabs import EXTRA_TABS

CONVERSATIONS = Path(__file__).resolve().parents[2] / "resources" / "conversations"


def texts(tab: ConversationTab, column: str) -> list[str]:
    headers = [tab.table.horizontalHeaderItem(c) for c in range(tab.table.columnCount())]
    index = [h.text() if h else "" for h in headers].index(column)
    items = [tab.table.item(r, index) for r in range(tab.table.rowCount())]
    return [item.text() if item else "" for item in items]


def test_compare_fills_the_facts_lost_view(qt_app: QApplication) -> None:
    tab = ConversationTab()
    assert tab.open_conversation(CONVERSATIONS / "moving-house.json")
    assert "10 questions" in tab.status.text() and tab.compare_button.isEnabled()
    tab.window_box.setValue(6_144)
    tab.start_compare()
    assert tab.wait(60_000)
    assert tab.report is not None and tab.compare_button.isEnabled()
    assert tab.table.rowCount() == 10 and tab.table.columnCount() == len(POLICIES) + 1
    assert set(texts(tab, "oracle")) == {IN_PROMPT}
    assert "dropped by the window" in texts(tab, "sliding-window")
    assert "summarized away" in texts(tab, "compaction")
    assert set(texts(tab, "append-only")) == {NO_PROMPT}
    tab.table.setCurrentCell(0, 1 + POLICIES.index("sliding-window"))
    details = tab.details.toPlainText()
    assert "Reference: Biscuit" in details and "s1-t3: dropped by the window" in details


def test_open_report_and_bad_files(qt_app: QApplication, tmp_path: Path) -> None:
    tab = ConversationTab()
    conversation = tab.open_conversation(CONVERSATIONS / "bike-shop.json")
    assert conversation and tab.conversation is not None
    saved = tmp_path / "r.json"
    saved.write_text(compare(tab.conversation, 4_096, "bike-shop.json").to_json())
    other = ConversationTab()
    assert other.open_report(saved)
    assert other.table.rowCount() == 9 and "bike-shop" in other.status.text()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "picocontext.conversation/9"}))
    assert not other.open_conversation(bad)
    assert "unknown format" in other.status.text()
    assert not other.open_report(bad)


def test_the_window_lists_the_tab() -> None:
    assert "Conversation" in [label for label, _ in EXTRA_TABS]
