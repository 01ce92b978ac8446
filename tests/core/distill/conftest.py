"""Fixtures for the distillation tests: corpora in tmp dirs with deterministic fakes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from picocontext.distill import Distiller
from picocontext.distill.testing import MakeDistiller, build


@pytest.fixture
def make_distiller(tmp_path: Path) -> MakeDistiller:
    counter = iter(range(1000))

    def make(**kwargs: Any) -> Distiller:
        return build(tmp_path / f"corpus{next(counter)}", **kwargs)

    return make
