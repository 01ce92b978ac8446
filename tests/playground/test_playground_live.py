"""Live progress and Stop in the window, on the tiny random-weight MLX model (real prefill and
decoding, milliseconds per token): the live line names policy, step, tokens against the cap
and time; the running step's output streams into Decisions; Stop acts within one token."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from picocontext import CancelToken
from picocontext.models import GenerationProgress
from picocontext_playground.comparison import generation_line
from picocontext_playground.model_loader import LoadedModel, ModelCache, wrap_model
from picocontext_playground.settings import ComparisonSettings, ModelChoice, Task
from picocontext_playground.window import MainWindow
from picocontext_playground.worker import PREFILL_CHUNK


def test_generation_line_reads_prefill_then_tokens_rate_and_time_left() -> None:
    reading = GenerationProgress("prefill", 256, 1000, 0, 512, 3.2)
    assert generation_line("navigated", 2, 4, reading) == (
        "Navigated · step 2 of 4 · reading the prompt: 256 of 1,000 tokens · 0:03 elapsed"
    )
    writing = GenerationProgress("decode", 1000, 1000, 101, 512, 70.0, decode_seconds=10.0)
    line = generation_line("editable", 3, 4, writing)
    assert "generated 101 of at most 512 tokens" in line
    assert "10.0 tokens/s" in line and "1:10 elapsed" in line
    assert "at most 0:41 left in this call" in line
    assert writing.seconds_left_at_most == pytest.approx(41.1)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mlx_lm")
    from picocontext.models.tiny import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("tiny-live"))


@pytest.fixture
def tiny_window(qt_app: QApplication, qtbot: QtBot, tiny_dir: Path) -> Iterator[MainWindow]:
    from picocontext.models import MLXModel

    def loader(settings: ComparisonSettings, progress: Any, cancel: CancelToken) -> LoadedModel:
        model = MLXModel.load(tiny_dir, model_id="tiny", prefix_cache=False)
        model.progress_interval = 0.0  # every token reaches the window
        return wrap_model(model)

    cache = ModelCache(loader)
    settings = ComparisonSettings(
        task=Task.RETENTION,
        policies=("append-only",),
        model=ModelChoice.DIRECTORY,
        model_dir=tiny_dir,
    )
    win = MainWindow(settings, cache)
    qtbot.addWidget(win)
    win.show()
    yield win
    win.shutdown()
    cache.close()


@pytest.mark.mlx
def test_live_progress_streams_output_and_stop_acts_within_one_token(
    tiny_window: MainWindow, qtbot: QtBot
) -> None:
    win = tiny_window
    after_stop: list[int] = []

    def count_steps(model: Any) -> None:
        """Count decode steps the model computes once Stop was pressed."""

        def factory() -> list[Any]:
            def processor(tokens: Any, logits: Any) -> Any:
                if win.comparison_run.cancel is not None and win.comparison_run.cancel.cancelled:
                    after_stop.append(1)
                return logits

            return [processor]

        model.extra_processors = factory

    win.start_comparison()
    qtbot.waitUntil(lambda: win.cache._model is not None, timeout=60_000)
    assert win.cache._model is not None
    raw = win.cache._model.raw
    count_steps(raw)
    qtbot.waitUntil(lambda: "generated" in win.live.text(), timeout=60_000)
    assert raw.prefill_step_size == PREFILL_CHUNK
    live = win.live.text()
    assert re.match(r"Append-only · step [1-4] of 4 · generated \d+ of at most 512 tokens", live)
    decisions = win.columns["append-only"].attempts.toPlainText()
    assert re.search(r"step-[1-4] \(running\)", decisions)
    assert "Model output so far:" in decisions
    with qtbot.waitSignal(win.run_finished, timeout=30_000):
        win.stop()
    assert win.status.text().startswith("Stopped")
    assert len(after_stop) <= 1  # at most the look-ahead step already in flight
    assert not win.live.isVisible()
    assert raw.progress_listener is None  # the window stops listening after the run
    raw.extra_processors = None


def test_stopcheck_recognises_both_phases_of_the_live_line() -> None:
    """The real-model Stop measurement waits for these words in the live line."""
    from picocontext_playground.stopcheck import PHASE_TEXT

    reading = GenerationProgress("prefill", 0, 10, 0, 5, 0.0)
    writing = GenerationProgress("decode", 10, 10, 1, 5, 0.1)
    assert PHASE_TEXT["prefill"] in generation_line("editable", 1, 4, reading)
    assert PHASE_TEXT["decode"] in generation_line("editable", 1, 4, writing)
    assert PHASE_TEXT["decode"] not in generation_line("editable", 1, 4, reading)


@pytest.mark.mlx
def test_sections_count_real_model_tokens_and_add_up_exactly(tiny_dir: Path) -> None:
    from picocontext import ModelInput, Phase, Record, Role, Scope, Snapshot
    from picocontext.models import MLXModel
    from picocontext_playground.sections import Section, prompt_sections

    records = (
        Record(id="rules", role=Role.SYSTEM, body="Keep the notebook exact."),
        Record(id="task", role=Role.USER, body="Track every fact.", protected=True),
        Record(id="note", role=Role.ASSISTANT, body="heron=KX-7302-B " * 30),
    )
    snapshot = Snapshot(
        scope=Scope(user_id="u", conversation_id="c", branch_id="b"), revision=0, records=records
    )
    model = MLXModel.load(tiny_dir, model_id="tiny")
    try:
        prompt = model.prepare(ModelInput(context=snapshot, phase=Phase.COMPLETION))
        sizes = prompt_sections(prompt, model.count_tokens, 512)
        by = {s.section: s.amount for s in sizes}
        assert sum(a for s, a in by.items() if s is not Section.RESERVED) == prompt.token_count
        assert set(by) >= {Section.SYSTEM, Section.TASK, Section.HISTORY, Section.CONTROL}
        # the kept note, in real tokens (not bytes), with its message and record header
        note_tokens = model.count_tokens(records[2].body)
        assert note_tokens <= by[Section.HISTORY] <= note_tokens + 64  # + its header
    finally:
        model.close()
