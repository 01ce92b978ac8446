"""The one model entry point: scripted stand-in, cache, errors, and the real MLX path on the
tiny random-weight model (milliseconds, no download)."""

from __future__ import annotations

from pathlib import Path

import pytest

from picocontext import Cancelled, CancelToken, TokenCounter
from picocontext.models import ByteCounter
from picocontext_playground.comparison import PrintEvents, run_comparison
from picocontext_playground.errors import SetupError
from picocontext_playground.model_loader import (
    BYTE_UNIT,
    TOKEN_UNIT,
    LoadedModel,
    ModelCache,
    load_model,
    scripted_model,
)
from picocontext_playground.scripted import ScriptedPlaygroundBackend
from picocontext_playground.settings import ComparisonSettings, ModelChoice, Task


def test_scripted_choice_is_a_byte_counter_and_rule_backend() -> None:
    model = load_model(ComparisonSettings(model=ModelChoice.SCRIPTED))
    assert isinstance(model.counter, ByteCounter)
    assert isinstance(model.backend, ScriptedPlaygroundBackend)
    assert model.token_unit == BYTE_UNIT and model.budget_scale == 4
    assert model.model_id == "scripted-deterministic"


def test_cancelled_token_stops_before_loading() -> None:
    cancel = CancelToken()
    cancel.cancel()
    with pytest.raises(Cancelled):
        load_model(ComparisonSettings(model=ModelChoice.SCRIPTED), cancel=cancel)


def test_cache_reuses_the_same_choice_and_closes_on_change(tmp_path: Path) -> None:
    loads: list[ModelChoice] = []
    closed: list[str] = []

    def loader(settings: ComparisonSettings, progress: object, cancel: CancelToken) -> LoadedModel:
        loads.append(settings.model)
        model = scripted_model()
        model.close = lambda: closed.append(settings.model.value)
        return model

    cache = ModelCache(loader)
    token = CancelToken()
    first = cache.get(ComparisonSettings(model=ModelChoice.SCRIPTED), lambda *_: None, token)
    again = cache.get(
        ComparisonSettings(model=ModelChoice.SCRIPTED, task=Task.ORDER_LOOKUP),
        lambda *_: None,
        token,
    )
    assert again is first and loads == [ModelChoice.SCRIPTED]
    cache.get(
        ComparisonSettings(model=ModelChoice.DIRECTORY, model_dir=tmp_path),
        lambda *_: None,
        token,
    )
    assert closed == ["scripted"] and loads[-1] is ModelChoice.DIRECTORY
    cache.close()
    assert closed == ["scripted", "directory"]


def test_directory_without_config_is_a_setup_error(tmp_path: Path) -> None:
    pytest.importorskip("mlx_lm")
    settings = ComparisonSettings(model=ModelChoice.DIRECTORY, model_dir=tmp_path, engine="mlx")
    with pytest.raises(SetupError, match="not an MLX model directory"):
        load_model(settings)


def test_missing_directory_is_a_setup_error(tmp_path: Path) -> None:
    pytest.importorskip("mlx_lm")
    settings = ComparisonSettings(
        model=ModelChoice.DIRECTORY, model_dir=tmp_path / "gone", engine="mlx"
    )
    with pytest.raises(SetupError, match="not an MLX model directory"):
        load_model(settings)


@pytest.mark.mlx
def test_real_mlx_path_on_the_tiny_model_runs_the_whole_comparison(tmp_path: Path) -> None:
    """The real loader, chat format, MLX generation and grading, end to end. Random weights
    produce noise, so checks fail — and the run still completes and says so."""
    pytest.importorskip("mlx_lm")
    from picocontext.models.tiny import write_tiny_model

    directory = write_tiny_model(tmp_path / "tiny")
    settings = ComparisonSettings(
        task=Task.ORDER_LOOKUP,
        model=ModelChoice.DIRECTORY,
        model_dir=directory,
        engine="mlx",
        prefix_cache=False,
    )
    progress: list[str] = []
    model = load_model(settings, lambda label, _f: progress.append(label))
    try:
        assert isinstance(model.counter, TokenCounter)
        assert model.token_unit == TOKEN_UNIT and model.budget_scale == 1
        assert model.model_id == "tiny"
        assert any("prefix cache: False" in d or "prefixCache: False" in d for d in model.details)
        assert progress == ["Loading tiny with MLX…"]
        # One append-only turn keeps this fast (random weights never stop early); decisions
        # on the real path are covered by the core's model tests.
        small = settings.model_copy(update={"policies": ("append-only",)})
        result = run_comparison(small, model, PrintEvents(lambda _l: None))
        assert result.completed and len(result.outcomes) == 1
        run = result.outcomes[0].steps[0].run
        assert run is not None and run.final_prompt is not None
        assert "<|im_start|>" in run.final_prompt.rendered
        assert run.total_input_tokens == run.final_prompt.token_count
        assert 0 < run.total_generated_tokens <= result.budget.completion_output_tokens
    finally:
        model.close()
