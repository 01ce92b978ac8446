"""Fixtures for the distillation tests: corpora in tmp dirs with deterministic fakes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from distill_helpers import MakeDistiller, build

from picocontext.distill import Distiller


@pytest.fixture
def make_distiller(tmp_path: Path) -> MakeDistiller:
    counter = iter(range(1000))

    def make(**kwargs: Any) -> Distiller:
        return build(tmp_path / f"corpus{next(counter)}", **kwargs)

    return make
