"""The verdict of a run: totals per policy, the sortable table with the winner highlighted, and
the sentence in the window's status line."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from picocontext_playground.comparison import PrintEvents, run_comparison
from picocontext_playground.model_loader import ModelCache, scripted_model
from picocontext_playground.results import ComparisonResult
from picocontext_playground.runverdict import (
    first_reason,
    headline,
    policy_totals,
    result_verdict,
    table,
)
from picocontext_playground.settings import ComparisonSettings, ModelChoice, Task
from picocontext_playground.verdict_view import VerdictView, hint_text, title_text
from picocontext_playground.window import MainWindow

FOUR = ("append-only", "editable", "navigated", "distilled")
RUN_TIMEOUT_MS = 20_000


def run(policies: tuple[str, ...], pressure: bool = True) -> ComparisonResult:
    settings = ComparisonSettings(task=Task.RETENTION, pressure=pressure, policies=policies)
    return run_comparison(settings, scripted_model(), PrintEvents(lambda _line: None))


@pytest.fixture(scope="module")
def four() -> ComparisonResult:
    return run(FOUR)


@pytest.fixture
def view(qt_app: QApplication, qtbot: QtBot) -> Iterator[VerdictView]:
    widget = VerdictView()
    qtbot.addWidget(widget)
    widget.resize(1200, 300)
    yield widget  # not shown: the view shows itself once it has a verdict


# -- totals and sentence (no Qt) -------------------------------------------------------------
def test_totals_count_two_checks_per_step_and_sum_every_step(four: ComparisonResult) -> None:
    for outcome in four.outcomes:
        totals = policy_totals(outcome)
        runs = [s.run for s in outcome.steps if s.run is not None]
        assert totals.checks_total == 2 * outcome.planned_steps
        assert totals.checks_passed == outcome.context_passed + outcome.answers_passed
        assert totals.input_tokens == sum(r.total_input_tokens for r in runs)
        assert totals.prefill_tokens == sum(r.total_prefill_tokens for r in runs)
        assert totals.passed == outcome.passed
    navigated = next(o for o in four.outcomes if o.policy.name == "navigated")
    # the model's own calls: what the archive navigator prefetched for it is not counted
    assert policy_totals(navigated).tool_calls == len(navigated.tool_steps)
    assert navigated.prefetch_steps
    editable = next(o for o in four.outcomes if o.policy.name == "editable")
    assert policy_totals(editable).tool_calls == editable.edit_calls + editable.keep_calls > 0


def test_under_pressure_append_only_fails_at_step_4_and_a_passing_policy_wins(
    four: ComparisonResult,
) -> None:
    verdict = result_verdict(four)
    base = next(o for o in four.outcomes if o.policy.name == "append-only")
    assert not base.passed
    reason = first_reason(base)
    assert reason is not None and reason.startswith("at step-4, token budget exceeded")
    winner = next(r for r in verdict.rows if r.totals.name == verdict.winner)
    assert winner.passed and winner.rank == 1
    passing = [r for r in verdict.rows if r.passed]
    assert winner.totals.model_work == min(r.totals.model_work for r in passing)
    assert verdict.sentence.startswith(f"{winner.totals.label} won: it ")
    assert "(8 of 8;" in verdict.sentence
    assert "bytes prefilled and generated" in verdict.sentence  # the scripted unit, not tokens
    assert f"Append-only: {reason}." in verdict.sentence
    assert verdict.rows[-1].totals.name == "append-only"  # failed policies rank last


def test_none_passing_names_each_first_reason() -> None:
    result = run(("append-only",))
    verdict = result_verdict(result)
    assert verdict.winner is None
    assert verdict.sentence.startswith("No policy passed every check. Append-only: at step-4")
    assert title_text(verdict) == "Verdict: no policy passed every check"


def test_a_stopped_run_says_so_before_its_verdict(four: ComparisonResult) -> None:
    stopped = four.model_copy(update={"cancelled": True})
    verdict = result_verdict(stopped)
    assert headline(stopped, verdict).startswith("Stopped before the end; among the policies")
    empty = four.model_copy(update={"cancelled": True, "outcomes": ()})
    assert headline(empty, result_verdict(empty)).startswith("Stopped before any policy")


def test_table_change_column_is_against_append_only(four: ComparisonResult) -> None:
    headers, rows = table(result_verdict(four))
    assert headers[headers.index("vs Append-only")] == "vs Append-only"
    by_policy = {r[headers.index("Policy")]: r for r in rows}
    assert by_policy["Append-only"][headers.index("vs Append-only")] == "baseline"
    base = next(o for o in four.outcomes if o.policy.name == "append-only").total_input
    editable = next(o for o in four.outcomes if o.policy.name == "editable").total_input
    change = round((editable - base) / base * 100)
    text = by_policy["Editable"][headers.index("vs Append-only")]
    assert text.startswith(f"{change:+d} % input".replace("-", "\u2212"))


# -- the view --------------------------------------------------------------------------------
def test_view_is_hidden_until_a_verdict_and_ranks_rows(
    view: VerdictView, four: ComparisonResult
) -> None:
    assert view.isHidden()
    verdict = result_verdict(four)
    view.show_verdict(verdict)
    assert view.isVisible()
    assert view.row_names() == [r.totals.name for r in verdict.rows]
    assert view.highlighted() == [verdict.winner]
    assert view.title.text() == title_text(verdict)
    assert view.title.toolTip() == verdict.sentence
    assert view.cell("append-only", "Checks") == "7/8"
    view.clear()
    assert not view.isVisible() and view.table.rowCount() == 0


def test_the_hint_says_least_work_only_when_another_policy_also_passed(
    view: VerdictView, four: ComparisonResult
) -> None:
    verdict = result_verdict(four)
    view.show_verdict(verdict)
    passing = [r for r in verdict.rows if r.passed]
    assert len(passing) > 1 and "with the least model work" in view.hint.text()
    sole = result_verdict(run(("append-only", "editable")))
    assert [r.totals.name for r in sole.rows if r.passed] == ["editable"]
    view.show_verdict(sole)
    assert view.hint.text().startswith("The highlighted row is the only one that passed")
    assert "least model work" not in view.hint.text()
    nobody = result_verdict(run(("append-only",)))
    assert hint_text(nobody).startswith("No row passed every check")


def click_header(qtbot: QtBot, view: VerdictView, header: str) -> None:
    bar = view.table.horizontalHeader()
    index = view.headers().index(header)
    pos = QPoint(bar.sectionViewportPosition(index) + 4, bar.height() // 2)
    qtbot.mouseClick(bar.viewport(), Qt.MouseButton.LeftButton, pos=pos)  # type: ignore[no-untyped-call]


def test_clicking_a_header_sorts_numerically_and_the_highlight_follows(
    qtbot: QtBot, view: VerdictView, four: ComparisonResult
) -> None:
    verdict = result_verdict(four)
    view.show_verdict(verdict)
    click_header(qtbot, view, "Input")
    by_input = sorted(verdict.rows, key=lambda r: r.totals.input_tokens)
    names = [r.totals.name for r in by_input]
    assert view.row_names() in (names, names[::-1])
    # numeric, not text: 107,590 sorts after 42,243 although "1" < "4"
    inputs = [int(view.cell(n, "Input").replace(",", "")) for n in view.row_names()]
    assert inputs in (sorted(inputs), sorted(inputs, reverse=True))
    assert view.highlighted() == [verdict.winner]
    click_header(qtbot, view, "Input")
    assert view.highlighted() == [verdict.winner]
    assert [int(view.cell(n, "Input").replace(",", "")) for n in view.row_names()] == inputs[::-1]


def test_failed_rows_are_red_and_the_reason_is_in_the_result_column(
    view: VerdictView, four: ComparisonResult
) -> None:
    view.show_verdict(result_verdict(four))
    row = view.row_names().index("append-only")
    item = view.table.item(row, view.headers().index("Result"))
    assert item is not None and item.text().startswith("at step-4")
    assert item.foreground().color().name() == "#b3261e"
    assert item.toolTip() == item.text()  # an elided reason is readable in full


# -- in the window ---------------------------------------------------------------------------
def test_window_shows_the_verdict_and_the_sentence_after_a_run(
    qt_app: QApplication, qtbot: QtBot
) -> None:
    settings = ComparisonSettings(
        task=Task.RETENTION, pressure=True, policies=FOUR, model=ModelChoice.SCRIPTED
    )
    win = MainWindow(settings)
    qtbot.addWidget(win)
    win.show()
    assert not win.verdict.isVisible()
    with qtbot.waitSignal(win.run_finished, timeout=RUN_TIMEOUT_MS) as blocker:
        win.controls.run_button.click()
    result = blocker.args[0]
    assert isinstance(result, ComparisonResult)
    verdict = result_verdict(result)
    assert win.verdict.isVisible() and win.verdict.highlighted() == [verdict.winner]
    assert win.status.text() == headline(result, verdict)  # after the worker's "Finished."
    assert "compare the cost" not in win.status.text()
    # the verdict sits above the scrolling results, so it never scrolls out of view
    # (the results now sit in a splitter under the chart; the verdict is on the page above it)
    assert not win.results_scroll.isAncestorOf(win.verdict)
    assert win.verdict.parent() is win.results_split.parent()
    win.controls.pressure.setChecked(False)  # new settings clear the old verdict
    assert not win.verdict.isVisible()
    win.shutdown()


def test_a_run_stopped_before_any_policy_finished_has_no_verdict_and_nothing_to_save(
    qt_app: QApplication, qtbot: QtBot, slow_model_cache: ModelCache
) -> None:
    win = MainWindow(ComparisonSettings(model=ModelChoice.SCRIPTED), slow_model_cache)
    qtbot.addWidget(win)
    with qtbot.waitSignal(win.run_finished, timeout=RUN_TIMEOUT_MS) as blocker:
        win.start_comparison()
        win.stop()
    result = blocker.args[0]
    assert isinstance(result, ComparisonResult) and result.cancelled and not result.outcomes
    assert not win.verdict.isVisible()
    assert not win.controls.save_button.isEnabled() and not win.save_action.isEnabled()
    win.shutdown()
