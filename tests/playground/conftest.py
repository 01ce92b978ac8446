"""Playground tests run offscreen and fast: no display, the scripted model, tiny delays."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Must happen before the first QApplication exists.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtWidgets import QApplication

from picocontext import CancelToken
from picocontext_playground.model_loader import LoadedModel, ModelCache, scripted_model
from picocontext_playground.qtenv import configure
from picocontext_playground.settings import ComparisonSettings


@pytest.fixture
def qt_app(qapp: QApplication) -> QApplication:
    """pytest-qt's application, with the playground's fonts."""
    configure(qapp)
    return qapp


def slow_cache(delay: float) -> ModelCache:
    """A cache whose loader gives the scripted model ``delay`` seconds per generation."""

    def loader(settings: ComparisonSettings, progress: object, cancel: CancelToken) -> LoadedModel:
        return scripted_model(delay=delay)

    return ModelCache(loader)


@pytest.fixture
def slow_model_cache() -> Iterator[ModelCache]:
    cache = slow_cache(0.05)
    yield cache
    cache.close()


@pytest.fixture(autouse=True)
def private_data_folder(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run journals its finished policies in the user data folder
    (picocontext_playground.resume): each test gets its own, so no test resumes another's run
    and nothing is left in the real one."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("data")))
