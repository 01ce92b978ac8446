"""The playground command's --decoding: constrained by default for embedded models, free
for others, the deprecated --constrained still works, and the settings line says which."""

from __future__ import annotations

import pytest

from picocontext_playground import cli
from picocontext_playground.settings import ComparisonSettings, ModelChoice


def parse(*argv: str) -> ComparisonSettings:
    return cli.settings_from_args(cli.build_parser().parse_args(list(argv)))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cli.MODEL_DIR_ENV, raising=False)


@pytest.mark.parametrize(
    ("argv", "constrained"),
    [
        (["--model", "smollm2-135m"], True),  # embedded: constrained by default
        (["--model", "qwen3-1.7b-4bit"], False),  # hub model: free by default
        (["--model", "smollm2-135m", "--decoding", "free"], False),
        (["--model", "qwen3-1.7b-4bit", "--decoding", "constrained"], True),
        (["--model", "qwen3-1.7b-4bit", "--constrained"], True),  # deprecated spelling
        (["--backend", "scripted"], False),
    ],
)
def test_decoding_defaults_and_flags(argv: list[str], constrained: bool) -> None:
    settings = parse("--episode-smoke", "retention", *argv)
    assert settings.constrained is constrained
    if settings.model is not ModelChoice.SCRIPTED:
        word = "constrained" if constrained else "free"
        assert f"decoding: {word}" in settings.describe()


def test_contradicting_decoding_flags_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["--smoke", "--decoding", "free", "--constrained"]) == 2
    assert "--constrained contradicts --decoding free" in capsys.readouterr().err
    assert cli.run(["--smoke", "--decoding", "greedy"]) == 2
    assert "invalid choice" in capsys.readouterr().err
