"""The window by section, the prompt that did not fit, folded prompts, grouped diff noise, the
step table's typography and the units shown before a run (scripted model, offscreen)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QTextOption
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from picocontext import ModelInput, Phase, PreparedPrompt, Record, Role, Scope, Snapshot, ToolCall
from picocontext.models import ByteCounter
from picocontext_playground.comparison import group_repeats
from picocontext_playground.results import ComparisonResult
from picocontext_playground.sections import Section, classify, prompt_sections, utf8_bytes
from picocontext_playground.settings import ComparisonSettings, ModelChoice, Task
from picocontext_playground.widgets import elide
from picocontext_playground.window import MainWindow

FIVE = ("append-only", "editable", "navigated", "distilled", "sliding-window")
PRESSURE = ComparisonSettings(
    model=ModelChoice.SCRIPTED, task=Task.RETENTION, pressure=True, policies=FIVE
)
SCOPE = Scope(user_id="u", conversation_id="c", branch_id="b")


@pytest.fixture
def window(qt_app: QApplication, qtbot: QtBot) -> Iterator[MainWindow]:
    win = MainWindow(PRESSURE)
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    yield win
    win.shutdown()


@pytest.fixture
def finished(window: MainWindow, qtbot: QtBot) -> ComparisonResult:
    with qtbot.waitSignal(window.run_finished, timeout=30_000) as blocker:
        qtbot.mouseClick(window.controls.run_button, Qt.MouseButton.LeftButton)  # type: ignore[no-untyped-call]
    result = blocker.args[0]
    assert isinstance(result, ComparisonResult), window.last_error
    return result


def prompt(records: tuple[Record, ...], control: tuple[Record, ...] = ()) -> PreparedPrompt:
    snapshot = Snapshot(scope=SCOPE, revision=0, records=records)
    return ByteCounter().prepare(
        ModelInput(context=snapshot, phase=Phase.COMPLETION, control_records=control)
    )


def test_sections_add_up_to_the_exact_prompt_and_name_each_part() -> None:
    records = (
        Record(id="rules", role=Role.SYSTEM, body="Keep the notebook."),
        Record(id="task", role=Role.USER, body="Track the facts.", protected=True),
        Record(
            id="call",
            role=Role.ASSISTANT,
            tool_calls=(ToolCall(id="c1", name="notebook_feed", arguments="{}"),),
        ),
        Record(id="data", role=Role.TOOL, tool_call_id="c1", body="FACT heron=KX-7302-B\n" * 20),
        Record(id="answer", role=Role.ASSISTANT, body='{"facts":{}}'),
    )
    control = (Record(id="runtime-history-index", role=Role.USER, body="index: turn 1"),)
    built = prompt(records, control)
    sizes = prompt_sections(built, utf8_bytes, 512)
    kinds = [s.section for s in sizes]
    assert kinds == [
        Section.SYSTEM,
        Section.TASK,
        Section.TOOLS,
        Section.HISTORY,
        Section.VIEWS,
        Section.RESERVED,
    ]
    assert sum(s.amount for s in sizes[:-1]) == built.token_count
    assert sizes[-1].amount == 512
    tools = next(s for s in sizes if s.section is Section.TOOLS)
    assert tools.amount >= len(records[3].body.encode())  # the whole tool body, with header


def test_classify_by_role_protection_and_origin() -> None:
    user = Record(id="u", role=Role.USER, body="note")
    assert classify(user, control=False) is Section.HISTORY
    assert classify(user, control=True) is Section.VIEWS
    tool = Record(id="t", role=Role.TOOL, body="x")
    assert classify(tool, control=True) is Section.CONTROL
    assert classify(tool, control=False) is Section.TOOLS


def test_section_bar_shows_the_next_input_by_section_against_the_window(
    window: MainWindow, finished: ComparisonResult, qtbot: QtBot
) -> None:
    column = window.columns["editable"]
    column.tabs.setCurrentIndex(column.tabs.count() - 1)
    bar = column.sections
    step = finished.outcomes[1].steps[-1]
    run = step.run
    assert run is not None and run.final_prompt is not None
    assert bar.limit == finished.budget.context_window
    input_total = sum(s.amount for s in bar.sections if s.section is not Section.RESERVED)
    assert input_total == run.final_prompt.token_count
    legend = bar.legend_items()
    assert legend[0].startswith("System ") and legend[-1].startswith("Reserved output ")
    assert "UTF-8 bytes (not model tokens)" in column.next_label.text()
    bar.grab()  # paints without error


def test_a_failed_step_shows_the_prompt_that_did_not_fit_and_by_how_much(
    window: MainWindow, finished: ComparisonResult
) -> None:
    column = window.columns["append-only"]
    column.next_step.setCurrentIndex(3)  # step-4 ran past the window
    step = finished.outcomes[0].steps[3]
    assert step.rejected_prompt is not None and step.over_window_by is not None
    assert step.over_window_by > 0
    text = column.next_label.text()
    assert "Did not fit" in text and f"by {step.over_window_by:,}" in text
    assert column.next_input.toPlainText() == step.rejected_prompt.rendered
    assert f"{step.rejected_prompt.token_count:,}" in column.card.prompt.text()
    assert "did not fit" in column.card.prompt.text()


def test_protected_prompts_start_folded_and_unfold_on_click(
    window: MainWindow, finished: ComparisonResult
) -> None:
    view = window.columns["editable"].working
    text = view.toPlainText()
    assert "show all" in text
    body = next(r.body for r in finished.outcomes[1].revised.records if r.id == "instructions")
    assert body.split("\n")[1] not in text  # the second line is folded away
    from PySide6.QtCore import QUrl

    view.anchorClicked.emit(QUrl("fold:instructions"))
    assert body.split("\n")[1] in view.toPlainText()


def test_repeated_diff_lines_are_grouped(window: MainWindow, finished: ComparisonResult) -> None:
    diff = window.columns["editable"].diff.toPlainText()
    assert "more lines alike" in diff
    assert diff.count("notebook unchanged.") < 20
    text = "head\n" + "\n".join(f"sweep {i}: idle" for i in range(48)) + "\ntail"
    grouped = group_repeats(text).split("\n")
    assert grouped == [
        "head",
        "sweep 0: idle",
        "    \u22ee \u00d7 46 more lines alike (only numbers differ)",
        "sweep 47: idle",
        "tail",
    ]
    assert group_repeats("a\na\na") == "a\na\na"  # short runs stay


def test_step_table_never_breaks_words_and_elides_long_problems(
    window: MainWindow, finished: ComparisonResult
) -> None:
    table = window.columns["append-only"].steps
    assert "receipt-4410" in table.toPlainText()  # never split as receipt-44/10
    assert table.wordWrapMode() is QTextOption.WrapMode.WordWrap  # breaks only between words
    problem = table.cell(3, 4)
    assert len(problem) > table.PROBLEM_CHARS
    assert elide(problem, table.PROBLEM_CHARS) in table.toPlainText()
    assert problem not in table.toPlainText()
    tip = table.row_tooltip(3)
    assert problem in tip
    assert table.row_at(QPointF(-5, -5)) is None


def test_elide_cuts_at_a_word() -> None:
    assert elide("short", 10) == "short"
    assert elide("Token budget exceeded: input plus reserved", 20) == "Token budget\u2026"


def test_units_are_bytes_before_any_run(window: MainWindow) -> None:
    assert "bytes" in window.chart.unit
    for column in window.columns.values():
        assert "bytes" in column.unit


def test_chart_stays_outside_the_scrolling_columns_and_fits_the_width(
    window: MainWindow, finished: ComparisonResult, qtbot: QtBot
) -> None:
    assert not window.results_scroll.isAncestorOf(window.chart)
    qtbot.wait(50)
    assert window.chart.width() <= window.width()
    assert window.chart.steps == ["step-1", "step-2", "step-3", "step-4"]


def test_a_model_load_error_is_red_and_leaves_no_empty_columns(
    qt_app: QApplication, qtbot: QtBot
) -> None:
    from picocontext import CancelToken
    from picocontext_playground.errors import SetupError
    from picocontext_playground.model_loader import LoadedModel, ModelCache

    def failing(settings: ComparisonSettings, progress: object, cancel: CancelToken) -> LoadedModel:
        raise SetupError("the model directory has no config.json")

    cache = ModelCache(failing)
    win = MainWindow(PRESSURE, cache)
    qtbot.addWidget(win)
    with qtbot.waitSignal(win.run_finished, timeout=10_000):
        win.start_comparison()
    assert "no config.json" in win.status.text()
    assert "#b3261e" in win.status.styleSheet()
    assert win.columns == {}
    win.shutdown()


def test_loading_label_has_one_ellipsis(qt_app: QApplication, qtbot: QtBot) -> None:
    from picocontext import CancelToken
    from picocontext_playground.model_loader import LoadedModel, ModelCache, scripted_model

    def loader(settings: ComparisonSettings, progress: object, cancel: CancelToken) -> LoadedModel:
        return scripted_model()

    win = MainWindow(PRESSURE, ModelCache(loader))
    qtbot.addWidget(win)
    seen: list[str] = []
    win.status_changed.connect(seen.append)
    win.controls.model_combo.setCurrentIndex(
        win.controls.model_combo.findData(ModelChoice.DIRECTORY.value)
    )
    win.controls.model_dir.setText("/nonexistent-model")
    with qtbot.waitSignal(win.run_finished, timeout=10_000):
        win.start_comparison()
    loading = [s for s in seen if s.startswith("Loading")]
    assert loading and all("……" not in s for s in loading)
    win.shutdown()


def test_navigated_step_opens_its_manifest_with_the_used_nodes_highlighted(
    window: MainWindow, finished: ComparisonResult
) -> None:
    from picocontext_playground.comparison import used_nodes
    from picocontext_playground.manifest_tab import ManifestTab

    column = window.columns["navigated"]
    last = finished.outcomes[2].steps[-1]
    assert last.manifest is not None
    used = used_nodes(last)
    assert used and all(verbs for verbs in used.values())
    column.tabs.setCurrentIndex(column.tabs.count() - 1)
    assert column.open_manifest.isVisible() and not column.open_digest.isVisible()
    column.open_manifest.click()
    tab = window.tabs.currentWidget()
    assert isinstance(tab, ManifestTab) and tab.manifest == last.manifest
    assert "Navigated · step-4" in tab.path_label.text()
    highlighted = [
        node for node, item in tab._items.items() if item.background(0).color().name() == "#fff4cc"
    ]
    assert highlighted and set(highlighted) <= set(used)
    assert "Nodes used in this step, by the model or prefetched for it" in tab.status.text()
    assert "prefetched open" in tab.status.text()
    assert window.columns["editable"].open_manifest.isHidden()


def test_distilled_step_opens_its_digest_tree(
    window: MainWindow, finished: ComparisonResult
) -> None:
    from picocontext_playground.digest_tab import DigestTab

    column = window.columns["distilled"]
    last = finished.outcomes[3].steps[-1]
    assert last.digest is not None and last.digest.nodes
    column.tabs.setCurrentIndex(column.tabs.count() - 1)
    assert column.open_digest.isVisible()
    column.open_digest.click()
    tab = window.tabs.currentWidget()
    assert isinstance(tab, DigestTab) and tab.snapshot == last.digest
    assert tab.root_label.text().startswith("Distilled · step-4 · ")
    assert tab.tree.topLevelItemCount() > 0
    assert not tab.hint.isVisible()


def test_artefacts_stay_out_of_serialised_steps(finished: ComparisonResult) -> None:
    step = finished.outcomes[2].steps[-1]
    dumped = step.model_dump()
    assert "manifest" not in dumped and "digest" not in dumped
    assert "sections" in dumped


def test_compare_two_shows_the_chosen_pair_at_full_width(
    window: MainWindow, finished: ComparisonResult
) -> None:
    assert window.view_picker.isVisible()  # five policies: the picker is offered
    assert window.visible_columns() == list(FIVE)
    window.view_picker.view_mode.setCurrentIndex(window.view_picker.view_mode.findData("two"))
    assert window.visible_columns() == ["append-only", "editable"]
    window.view_picker.right_pick.setCurrentIndex(
        window.view_picker.right_pick.findData("navigated")
    )
    assert window.visible_columns() == ["append-only", "navigated"]
    window.view_picker.view_mode.setCurrentIndex(window.view_picker.view_mode.findData("all"))
    assert window.visible_columns() == list(FIVE)


def test_failures_read_in_plain_words_and_keep_the_exact_message() -> None:
    from picocontext_playground.comparison import plain_failure

    exact = "Token budget exceeded: input plus reserved output exceeds the context window"
    text = plain_failure(exact)
    assert text.startswith("The prompt plus the room kept for the answer no longer fit")
    assert "input plus reserved output exceeds the context window" in text
    limit = plain_failure("The bounded edit/recovery limit was reached.")
    assert "no valid edit or keep decision" in limit
    assert plain_failure("something else") == "something else"


def test_card_answers_wrap_between_entries(window: MainWindow, finished: ComparisonResult) -> None:
    from picocontext_playground.widgets import ZERO_WIDTH_SPACE, breakable

    assert breakable('{"a":"x-1","b":"y"}') == '{"a":"x-1",' + ZERO_WIDTH_SPACE + '"b":"y"}'
    card = window.columns["editable"].card
    assert ZERO_WIDTH_SPACE in card.answer.text()
    assert card.answer.toolTip().startswith('{"facts":')


def test_with_no_policy_ticked_the_grey_run_button_says_why(window: MainWindow) -> None:
    from picocontext_playground.controls import NO_POLICY

    for box in window.controls.policy_boxes.values():
        box.setChecked(False)
    assert not window.controls.run_button.isEnabled()
    assert window.status.text() == NO_POLICY and window.controls.run_button.toolTip() == NO_POLICY
    window.controls.policy_boxes["editable"].setChecked(True)
    assert window.controls.run_button.isEnabled() and window.status.text().startswith("Ready")
