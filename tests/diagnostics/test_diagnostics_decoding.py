"""Decoding modes in the diagnostics: the answer shape each step defines travels to the model
as a JSON schema, ``--decoding`` reaches the loader, and every report says which mode ran."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext import (
    CancelToken,
    ModelInput,
    ModelResponse,
    Phase,
    PreparedPrompt,
    RunBudget,
)
from picocontext.models import ByteCounter
from picocontext_diagnostics import cli
from picocontext_diagnostics.episodes.episode import (
    fixture_episode,
    generated_episode,
    request_shape,
)
from picocontext_diagnostics.episodes.episode_runner import EpisodeRunner
from picocontext_diagnostics.episodes.fixtures import Scenario, notebook_texts
from picocontext_diagnostics.episodes.grading import facts_answer_schema, parse_facts_answer
from picocontext_diagnostics.episodes.notebook_backend import DeterministicNotebookBackend
from picocontext_diagnostics.evaluation import EvaluationReport
from picocontext_diagnostics.policies import APPEND_ONLY, EDITABLE

jsonschema = pytest.importorskip("jsonschema")

KEY = st.text(alphabet="abcdefghij0123456789", min_size=1, max_size=6)
VALUE = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)


@settings(deadline=None)
@given(st.dictionaries(KEY, VALUE, max_size=6))
def test_the_schema_admits_exactly_the_answers_the_strict_parser_accepts(
    facts: dict[str, str],
) -> None:
    schema = facts_answer_schema(facts)
    answer = json.dumps({"facts": facts})
    assert parse_facts_answer(answer) == facts
    jsonschema.validate(json.loads(answer), schema)
    for wrong in (
        {"facts": {**facts, "zz-extra": "1"}},
        {"facts": dict(list(facts.items())[1:])} if facts else {"facts": 1},
        {"facts": facts, "note": "x"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)


@pytest.mark.parametrize("scenario", list(Scenario))
def test_each_step_schema_names_the_keys_its_request_shows(scenario: Scenario) -> None:
    for episode in (fixture_episode(scenario), generated_episode(scenario, seed=3, step_count=6)):
        for step in episode.steps:
            schema = json.loads(step.answer_schema_json)
            keys = schema["properties"]["facts"]["required"]
            assert keys == sorted(step.expected_facts)
            # the request shows exactly these keys: the model reads the shape it must write
            shape = request_shape(keys, notebook_texts().value_placeholder)
            assert shape in step.records[-1].body
            jsonschema.validate({"facts": step.expected_facts}, schema)


class Recording(DeterministicNotebookBackend):
    def __init__(self) -> None:
        super().__init__()
        self.inputs: list[ModelInput] = []

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        self.inputs.append(prompt.input)
        return super().generate(prompt, max_tokens, cancel)


@pytest.mark.parametrize("policy", [APPEND_ONLY, EDITABLE], ids=lambda p: p.name)
def test_the_runner_puts_each_steps_schema_on_its_answer_calls_only(policy: Any) -> None:
    episode = fixture_episode(Scenario.STATE_UPDATES)
    backend = Recording()
    budget = RunBudget(context_window=32_000, total_tokens=120_000, max_edit_attempts=4)
    report = EpisodeRunner(ByteCounter(), backend).run(episode, policy, budget)
    assert report.passed
    answers = [i for i in backend.inputs if i.phase is Phase.COMPLETION]
    assert len(answers) == len(episode.steps)
    for step, model_input in zip(episode.steps, answers, strict=True):
        assert model_input.answer_schema_json == step.answer_schema_json
    assert all(i.answer_schema_json is None for i in backend.inputs if i.phase is Phase.EDIT)
    # never rendered: the prompt is the same with or without it
    counter = ByteCounter()
    plain = answers[0].model_copy(update={"answer_schema_json": None})
    assert counter.prepare(plain).token_ids == counter.prepare(answers[0]).token_ids


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return cli.run(list(argv), out, err), out.getvalue(), err.getvalue()


def config(tmp_path: Path) -> str:
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "seeds": [5],
                "repetitions": 1,
                "step_count": 1,
                "limits": {
                    "context_window": 8_192,  # tokens: x4 bytes on the deterministic backend
                    "turn_tokens": 125_000,
                    "episode_tokens": 500_000,
                },
            }
        ),
        encoding="utf-8",
    )
    return str(path)


def test_deterministic_reports_say_decoding_is_not_applicable(tmp_path: Path) -> None:
    output = tmp_path / "r.json"
    code, out, _ = run_cli("--config", config(tmp_path), "--output", str(output))
    assert code == 0 and "decoding: not applicable" in out
    report = EvaluationReport.from_json(output.read_text(encoding="utf-8"))
    assert report.provenance.decoding == "not applicable"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backend", "mlx", "--decoding", "greedy"], "--decoding must be free or constrained"),
        (["--decoding", "free"], "--decoding applies only to --backend mlx"),
        (
            ["--backend", "mlx", "--decoding", "free", "--constrained", "on"],
            "--constrained is its deprecated spelling",
        ),
    ],
)
def test_bad_decoding_flags_are_usage_errors(argv: list[str], message: str) -> None:
    code, _, err = run_cli(*argv)
    assert code == 2 and message in err and len(err.splitlines()) == 1


class FakeModel(DeterministicNotebookBackend):
    def __init__(self, constrained: bool) -> None:
        super().__init__()
        self.counter = ByteCounter()
        self.constrained = constrained

    @property
    def decoding(self) -> str:
        return "constrained" if self.constrained else "free"

    def prepare(self, model_input: ModelInput) -> PreparedPrompt:
        return self.counter.prepare(model_input)

    def describe(self) -> dict[str, Any]:
        return {"model": "fake", "decoding": self.decoding, "prefixCache": True}

    def close(self) -> None:
        return None


@pytest.mark.parametrize(
    ("flags", "loader_gets", "decoding"),
    [
        (["--decoding", "constrained"], True, "constrained"),
        (["--decoding", "free"], False, "free"),
        (["--constrained", "on"], True, "constrained"),  # the deprecated spelling
        ([], None, "constrained"),  # the loader's default (constrained for embedded models)
    ],
)
def test_decoding_reaches_the_loader_and_every_report(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    loader_gets: bool | None,
    decoding: str,
) -> None:
    seen: list[bool | None] = []

    def load_model(**kwargs: Any) -> FakeModel:
        seen.append(kwargs.get("constrained"))
        on = kwargs.get("constrained")
        return FakeModel(True if on is None else bool(on))

    import picocontext.models as models

    monkeypatch.setattr(models, "load_model", load_model, raising=False)
    output = tmp_path / "m.json"
    code, out, _ = run_cli(
        "--backend", "mlx", *flags, "--config", config(tmp_path), "--output", str(output)
    )
    assert code in (0, 3) and seen == [loader_gets]
    assert f"decoding: {decoding})" in out
    report = EvaluationReport.from_json(output.read_text(encoding="utf-8"))
    assert report.provenance.decoding == decoding


def test_reports_written_before_decoding_modes_still_load() -> None:
    results = Path(__file__).parents[2] / "docs" / "results" / "smollm2-retention.json"
    if not results.is_file():
        pytest.skip("no published results in this checkout")
    report = EvaluationReport.from_json(results.read_text(encoding="utf-8"))
    assert report.provenance.decoding == "not recorded"
