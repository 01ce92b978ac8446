"""The window, offscreen, with pytest-qt: build, run, fill every pane, stop, clear, close."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QApplication, QLabel
from pytestqt.qtbot import QtBot

from picocontext_playground.comparison import PrintEvents, run_comparison
from picocontext_playground.errors import SetupError
from picocontext_playground.model_loader import LoadedModel, ModelCache, scripted_model
from picocontext_playground.policy_column import PolicyColumn
from picocontext_playground.qtenv import glyphs_render, monospace_font
from picocontext_playground.results import ComparisonResult
from picocontext_playground.runverdict import headline, result_verdict
from picocontext_playground.settings import ComparisonSettings, ModelChoice, Task, default_model
from picocontext_playground.textreport import render_report
from picocontext_playground.window import MainWindow

SCRIPTED = ComparisonSettings(model=ModelChoice.SCRIPTED)
RUN_TIMEOUT_MS = 20_000


@pytest.fixture
def window(qt_app: QApplication, qtbot: QtBot) -> Iterator[MainWindow]:
    win = MainWindow(SCRIPTED)
    qtbot.addWidget(win)
    win.show()
    yield win
    win.shutdown()


def run_and_wait(qtbot: QtBot, win: MainWindow) -> ComparisonResult:
    with qtbot.waitSignal(win.run_finished, timeout=RUN_TIMEOUT_MS) as blocker:
        qtbot.mouseClick(win.controls.run_button, Qt.MouseButton.LeftButton)  # type: ignore[no-untyped-call]
    result = blocker.args[0] if blocker.args else None
    assert isinstance(result, ComparisonResult), win.last_error
    return result


def cell_text(column: PolicyColumn, row: int, col: int) -> str:
    return column.steps.cell(row, col)


def test_window_builds_with_controls_for_every_task_policy_and_model(window: MainWindow) -> None:
    assert window.windowTitle() == "PicoContext Playground"
    assert window.minimumWidth() >= 1000 and window.minimumHeight() >= 700
    assert set(window.controls.task_buttons) == set(Task)
    assert window.controls.current_task() is Task.RETENTION
    assert {"append-only", "editable"} <= set(window.controls.policy_boxes)
    models = {
        window.controls.model_combo.itemData(i) for i in range(window.controls.model_combo.count())
    }
    assert models == {c.value for c in ModelChoice}
    assert window.controls.run_button.isEnabled() and not window.controls.stop_button.isEnabled()
    assert window.status.text().startswith("Ready")
    assert window.tabs.tabText(0) == "Comparison"


@pytest.mark.parametrize("engine", ["mlx", "llamacpp"])
def test_default_model_follows_the_default_engine(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Qwen3 on Metal, the embedded 0.5B on MLX on a CPU, the 1.5B on llama.cpp."""
    import platform

    monkeypatch.setenv("PICOCONTEXT_ENGINE", engine)
    apple = platform.system() == "Darwin" and platform.machine() == "arm64"
    on_mlx = ModelChoice.QWEN3 if apple else ModelChoice.QWEN25_05
    expected = ModelChoice.QWEN25_15 if engine == "llamacpp" else on_mlx
    assert default_model() is expected


def test_run_comparison_fills_every_pane(qtbot: QtBot, window: MainWindow) -> None:
    result = run_and_wait(qtbot, window)
    assert result.completed
    assert list(window.columns) == ["append-only", "editable"]
    # the status line concludes with the verdict's sentence
    assert window.status.text() == headline(result, result_verdict(result))
    assert window.progress.value() == window.progress.maximum()
    assert "Scripted deterministic model" in window.caption.text()
    # chart: one bar group per step, one series per policy
    assert window.chart.steps == ["step-1", "step-2", "step-3", "step-4"]
    assert [s.label for s in window.chart.series] == ["Append-only", "Editable"]
    edit = window.columns["editable"]
    outcome = result.outcomes[1]
    # card
    assert "Context 4/4 · answers 4/4" in edit.card.checks.text()
    assert f"{outcome.prompt_before:,} → {outcome.prompt_after:,}" in edit.card.prompt.text()
    assert f"Total input {outcome.total_input:,}" in edit.card.usage.text()
    assert "Edit calls 4" in edit.card.calls.text()
    assert edit.card.answer.text().startswith('Last answer: {"facts":')
    # per-step table
    assert edit.steps.rowCount() == 4
    assert [cell_text(edit, r, 0) for r in range(4)] == ["step-1", "step-2", "step-3", "step-4"]
    assert cell_text(edit, 0, 1) == "✓ context ✓ answer"
    # context panes with highlights
    working = edit.working.toPlainText()
    assert "REPLACED" in working and "step-1-data" in working
    original = edit.original.toPlainText()
    assert "Sensor sweep 1, frame 0" in original and "REPLACED" in original
    # diff, decisions, exact next input
    assert edit.diff.toPlainText().startswith("Replaced step-1-data (tool)")
    attempts = edit.attempts.toPlainText()
    assert "Attempt 1" in attempts and "edited" in attempts and "Arguments:" in attempts
    final = outcome.steps[-1].run
    assert final is not None and final.final_prompt is not None
    assert edit.next_input.toPlainText() == final.final_prompt.rendered
    # the scripted model counts bytes, and says so (never "tokens")
    assert f"{final.final_prompt.token_count:,} UTF-8 bytes" in edit.next_label.text()
    edit.next_step.setCurrentIndex(0)
    first = outcome.steps[0].run
    assert first is not None and first.final_prompt is not None
    assert edit.next_input.toPlainText() == first.final_prompt.rendered
    # the baseline made no decisions and has no diff
    base = window.columns["append-only"]
    assert "No decision call" in base.attempts.toPlainText()
    assert base.diff.toPlainText() == ""


def test_order_lookup_shows_deleted_records_and_one_step(qtbot: QtBot, window: MainWindow) -> None:
    window.controls.task_buttons[Task.ORDER_LOOKUP].click()
    assert not window.controls.pressure.isEnabled()
    result = run_and_wait(qtbot, window)
    assert result.title == "Order lookup"
    edit = window.columns["editable"]
    assert edit.steps.rowCount() == 1
    assert "DELETED" in edit.working.toPlainText()
    assert "Deleted earlier-result (tool)" in edit.diff.toPlainText()
    assert window.chart.steps == ["order-lookup"]


def test_switching_task_or_pressure_clears_results(qtbot: QtBot, window: MainWindow) -> None:
    run_and_wait(qtbot, window)
    assert window.result is not None and window.columns
    window.controls.task_buttons[Task.STATE_UPDATES].click()
    assert window.result is None and not window.columns
    assert window.chart.series == []
    assert window.status.text() == "Ready for State updates."
    run_and_wait(qtbot, window)
    window.controls.pressure.setChecked(True)
    assert window.result is None and not window.columns


def test_stop_cancels_mid_run_and_the_window_stays_usable(
    qt_app: QApplication, qtbot: QtBot, slow_model_cache: ModelCache
) -> None:
    win = MainWindow(SCRIPTED, slow_model_cache)
    qtbot.addWidget(win)
    win.show()
    with qtbot.waitSignal(win.run_finished, timeout=RUN_TIMEOUT_MS) as blocker:
        win.controls.run_button.click()
        assert (
            win.running
            and win.controls.stop_button.isEnabled()
            and not win.controls.run_button.isEnabled()
        )
        assert not win.controls.task_buttons[Task.ORDER_LOOKUP].isEnabled()
        qtbot.waitUntil(lambda: len(win.step_lines) >= 1, timeout=RUN_TIMEOUT_MS)
        win.controls.stop_button.click()
    result = blocker.args[0]
    assert isinstance(result, ComparisonResult)
    assert result.cancelled and win.status.text().startswith("Stopped.")
    assert (
        not win.running
        and win.controls.run_button.isEnabled()
        and not win.controls.stop_button.isEnabled()
    )
    assert win.columns["append-only"].steps.rowCount() >= 1  # live rows stay visible
    win.shutdown()


def test_run_is_ignored_while_running(
    qt_app: QApplication, qtbot: QtBot, slow_model_cache: ModelCache
) -> None:
    win = MainWindow(SCRIPTED, slow_model_cache)
    qtbot.addWidget(win)
    finished: list[object] = []
    win.run_finished.connect(finished.append)
    win.start_comparison()
    thread = win.comparison_run.qthread
    win.start_comparison()  # ignored
    assert win.comparison_run.qthread is thread
    win.stop()
    qtbot.waitUntil(lambda: not win.running, timeout=RUN_TIMEOUT_MS)
    assert len(finished) == 1


def test_closing_mid_run_ends_the_worker_thread(
    qt_app: QApplication, qtbot: QtBot, slow_model_cache: ModelCache
) -> None:
    win = MainWindow(SCRIPTED, slow_model_cache)
    qtbot.addWidget(win)
    win.show()
    win.start_comparison()
    thread = win.comparison_run.qthread
    assert thread is not None
    qtbot.waitUntil(lambda: thread.isRunning(), timeout=RUN_TIMEOUT_MS)
    win.close()
    assert thread.isFinished()


def test_three_policies_make_three_columns(qtbot: QtBot, window: MainWindow) -> None:
    window.controls.policy_boxes["summarize"].setChecked(True)
    result = run_and_wait(qtbot, window)
    assert [o.policy.name for o in result.outcomes] == ["append-only", "editable", "summarize"]
    assert list(window.columns) == ["append-only", "editable", "summarize"]
    assert len(window.chart.series) == 3


def test_no_policy_selected_disables_run_and_explains(qtbot: QtBot, window: MainWindow) -> None:
    for box in window.controls.policy_boxes.values():
        box.setChecked(False)
    assert not window.controls.run_button.isEnabled()
    finished: list[object] = []
    window.run_finished.connect(finished.append)
    window.start_comparison()
    assert finished == [None] and window.status.text() == "Select at least one policy."


def test_directory_model_needs_a_directory(qtbot: QtBot, window: MainWindow) -> None:
    window.controls.model_combo.setCurrentIndex(window.controls.model_combo.findData("directory"))
    assert window.controls.model_dir.isVisibleTo(window) and window.controls.decoding.isEnabled()
    window.start_comparison()
    assert window.status.text() == "Choose a local model directory first."


def test_settings_round_trip_through_the_controls(window: MainWindow) -> None:
    wanted = ComparisonSettings(
        task=Task.STATE_UPDATES,
        pressure=True,
        policies=("append-only", "summarize"),
        model=ModelChoice.SMOLLM2,
        constrained=True,
        prefix_cache=False,
    )
    window.controls.apply_settings(wanted)
    assert window.controls.current_settings() == wanted


def test_text_renders_with_real_glyphs(qt_app: QApplication, window: MainWindow) -> None:
    label = QLabel("iiii WWWW")
    metrics = QFontMetrics(label.font())
    assert metrics.horizontalAdvance("iiii") < metrics.horizontalAdvance("WWWW")
    assert glyphs_render(qt_app.font())
    # the monospaced panes use a real monospaced face: equal advances, non-zero
    mono = QFontMetrics(monospace_font())
    assert mono.horizontalAdvance("iiii") == mono.horizontalAdvance("WWWW") > 0
    assert mono.inFontUcs4(ord("W")) and QFontMetrics(qt_app.font()).inFontUcs4(ord("→"))


def test_manifest_tab_gets_the_comparison_model(
    qt_app: QApplication, qtbot: QtBot, tmp_path: object
) -> None:
    loaded: list[ComparisonSettings] = []

    class FakeChat:
        model_id = "fake-chat"

        def count_tokens(self, text: str) -> int:
            return len(text)

        def chat(
            self, messages: object, max_tokens: int, tools: object = (), cancel: object = None
        ) -> object:
            raise AssertionError("not called here")

        def prepare(self, model_input: object) -> object:
            raise AssertionError("not called here")

        def generate(self, prompt: object, max_tokens: int, cancel: object = None) -> object:
            raise AssertionError("not called here")

    def loader(settings: ComparisonSettings, progress: object, cancel: object) -> LoadedModel:
        loaded.append(settings)
        model = scripted_model()
        model.raw = FakeChat()
        return model

    win = MainWindow(SCRIPTED, ModelCache(loader))
    qtbot.addWidget(win)
    with pytest.raises(SetupError, match="needs a real model"):
        win.chat_model_factory()
    win.controls.model_combo.setCurrentIndex(
        win.controls.model_combo.findData(ModelChoice.SMOLLM2.value)
    )
    chat = win.chat_model_factory()
    assert chat.model_id == "fake-chat"
    assert [s.model for s in loaded] == [ModelChoice.SMOLLM2]
    assert win.chat_model_factory() is chat and len(loaded) == 1  # cached, not reloaded


def test_long_answers_are_excerpted_on_the_card_and_shown_in_full_in_decisions(
    qt_app: QApplication,
) -> None:
    from picocontext_playground.text_views import AttemptsView
    from picocontext_playground.widgets import CARD_ANSWER_CHARS, card_excerpt

    short = "x" * CARD_ANSWER_CHARS
    assert card_excerpt(short) == short
    long = "y" * (CARD_ANSWER_CHARS + 25)
    excerpt = card_excerpt(long)
    assert excerpt.startswith(short.replace("x", "y")) and "(+25 more characters" in excerpt
    result = run_comparison(
        ComparisonSettings(task=Task.RETENTION), scripted_model(), PrintEvents(lambda _l: None)
    )
    view = AttemptsView()
    view.show_steps(result.outcomes[1].steps)
    text = view.toPlainText()
    for step in result.outcomes[1].steps:
        assert step.run is not None and step.run.answer in text


def test_decisions_say_why_each_pair_was_kept_or_replaced_in_the_window_and_reports(
    qt_app: QApplication,
) -> None:
    """The incremental decision's model output says only "(no call)" for a pair the runtime
    settled; the Decisions tab, the text report and the JSON report carry each pair's reason."""
    import json

    from picocontext import Choice
    from picocontext_playground.jsonreport import render_json
    from picocontext_playground.text_views import AttemptsView

    result = run_comparison(
        ComparisonSettings(task=Task.RETENTION, policies=("append-only", "editable")),
        scripted_model(),
        PrintEvents(lambda _l: None),
    )
    judged = (
        Choice(
            records=("n3",),
            options=("n1",),
            handles=("n1",),
            reply="It costs 35 EUR now.",
            chosen="n1",
            detail="asked 'What does the lamp cost?' of n1: the answer repeats 35; replaces n1",
        ),
        Choice(
            records=("n3",),
            options=("n2",),
            handles=("n2",),
            asked=False,
            detail="asked 'What does the lamp cost?' of n2: n3 leaves unsaid 'Cord: 2 m'",
        ),
    )
    editable = result.outcomes[1]
    first = editable.steps[0]
    assert first.run is not None
    step = first.model_copy(update={"run": first.run.model_copy(update={"choices": judged})})
    steps = (step, *editable.steps[1:])
    result = result.model_copy(
        update={"outcomes": (result.outcomes[0], editable.model_copy(update={"steps": steps}))}
    )
    lines = [
        "n3 about n1: replaces n1 · asked 'What does the lamp cost?' of n1: the answer repeats "
        "35; replaces n1",
        "n3 about n2: replaces nothing (no call) · asked 'What does the lamp cost?' of n2: n3 "
        "leaves unsaid 'Cord: 2 m'",
    ]
    view = AttemptsView()
    view.show_steps(steps)
    shown = view.toPlainText()
    assert "Why (judged 2 pairs: 1 by the model's answer, 1 without one):" in shown
    assert all(line in shown for line in lines)
    report = render_report(result)
    assert (
        "WHY (judged 2 pairs: 1 by the model's answer, 1 without one)\n" + "\n".join(lines)
        in report
    )
    doc = json.loads(render_json(result))
    carried = doc["policies"][1]["steps"][0]["choices"]
    assert [(c["records"], c["chosen"], c["asked"]) for c in carried] == [
        (["n3"], "n1", True),
        (["n3"], None, False),
    ]
    assert doc["policies"][0]["steps"][0]["choices"] == []


def test_save_report_writes_the_shown_result(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    assert not window.controls.save_button.isEnabled()
    with pytest.raises(SetupError, match="no finished run"):
        window.save_report(tmp_path / "none.txt")
    result = run_and_wait(qtbot, window)
    assert window.controls.save_button.isEnabled()
    target = tmp_path / "saved.txt"
    window.save_report(target)
    assert target.read_text(encoding="utf-8") == render_report(result)
    window.controls.task_buttons[Task.ORDER_LOOKUP].click()
    assert not window.controls.save_button.isEnabled()


def test_navigated_column_lists_its_tool_calls(qtbot: QtBot, window: MainWindow) -> None:
    """The Decisions tab of a tool-using policy shows every navigation call made, with
    arguments and result -- here the calls prefetched for the model, apart from its own --
    and the card counts them by verb."""
    window.controls.task_buttons[Task.RETENTION].click()
    window.controls.pressure.setChecked(True)
    for name, box in window.controls.policy_boxes.items():
        box.setChecked(name == "navigated")
    run_and_wait(qtbot, window)
    column = window.columns["navigated"]
    outcome = column.outcome
    assert outcome is not None and outcome.prefetch_steps
    shown = column.attempts.toPlainText()
    assert "Before the model read: prefetched" in shown and "Prefetch 1 · open" in shown
    assert outcome.prefetch_steps[0].arguments in shown
    calls = column.card.calls.text()
    assert calls.startswith(f"Tool calls {len(outcome.tool_steps)}")
    assert f"prefetched {len(outcome.prefetch_steps)}: open" in calls


def test_every_extra_tab_is_built(qt_app: QApplication, qtbot: QtBot) -> None:
    from picocontext_playground import extra_tabs as tabs_module

    win = MainWindow(SCRIPTED)
    qtbot.addWidget(win)
    labels = [win.tabs.tabText(i) for i in range(win.tabs.count())]
    assert labels == ["Comparison", *(label for label, _ in tabs_module.EXTRA_TABS)]
    assert labels[1:] == ["Manifest", "Digest", "Conversation"]
    assert win.tab_errors == {}
    pages = [win.tabs.widget(i) for i in range(win.tabs.count())]
    assert all(page is not None and page.objectName() != "tabError" for page in pages)


def test_a_tab_that_fails_to_build_is_an_error_the_user_sees(
    qt_app: QApplication, qtbot: QtBot, monkeypatch: pytest.MonkeyPatch
) -> None:
    from picocontext_playground import extra_tabs as tabs_module

    def broken(parent: object) -> object:
        raise RuntimeError("no manifest for you")

    tabs = (("Manifest", broken), *tabs_module.EXTRA_TABS[1:])
    monkeypatch.setattr(tabs_module, "EXTRA_TABS", tabs)
    win = MainWindow(SCRIPTED)
    qtbot.addWidget(win)
    assert [win.tabs.tabText(i) for i in range(win.tabs.count())] == [
        "Comparison",
        "Manifest",
        "Digest",
        "Conversation",
    ]
    page = win.tabs.widget(1)
    assert isinstance(page, QLabel) and page.objectName() == "tabError"
    assert "RuntimeError: no manifest for you" in page.text()
    assert win.tab_errors == {"Manifest": "RuntimeError: no manifest for you"}
