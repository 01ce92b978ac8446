"""A model the navigation bench cannot load is one line on stderr, never a traceback."""

from __future__ import annotations

import pytest

from picocontext_diagnostics.bench.navigation import run


@pytest.mark.parametrize("option", ["--expand-model", "--embed-model", "--llm-model"])
def test_an_unknown_model_is_one_clear_line(
    option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["--corpus", "pytest-docs", option, "no-such-model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-model" in err[0] and "use a known model name" in err[0]
