"""Evaluation runner, configuration, statistics and the versioned JSON report (checklist 92-97)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext import (
    Cancelled,
    CancelToken,
    ModelResponse,
    Phase,
    PreparedPrompt,
    RunMode,
)
from picocontext.models import ByteCounter
from picocontext_diagnostics.backends import deterministic_backend, provenance
from picocontext_diagnostics.episodes.fixtures import Scenario, fixtures_dir, pressure_profile
from picocontext_diagnostics.episodes.notebook_backend import DeterministicNotebookBackend
from picocontext_diagnostics.errors import InvalidConfiguration
from picocontext_diagnostics.evaluation import (
    EvaluationConfig,
    EvaluationLimits,
    EvaluationReport,
    EvaluationRunner,
    pretty_json,
    rotation,
    summarize,
)
from picocontext_diagnostics.evaluation.proportions import (
    mcnemar_exact_p,
    paired_difference_interval,
    wilson_interval,
)
from picocontext_diagnostics.policies import (
    APPEND_ONLY,
    BUILTIN_POLICIES,
    EDITABLE,
    SUMMARIZE,
    Policy,
    resolve_policies,
)

WIDE = EvaluationLimits(context_window=32_768, turn_tokens=500_000, episode_tokens=2_000_000)


def runner_for(config: EvaluationConfig, backend: object | None = None) -> EvaluationRunner:
    handle = deterministic_backend()
    return EvaluationRunner(
        config,
        ByteCounter(),
        backend or DeterministicNotebookBackend(),  # type: ignore[arg-type]
        provenance(handle),
    )


# -- configuration (92) -----------------------------------------------------------------------


def test_defaults() -> None:
    config = EvaluationConfig()
    assert config.scenario is Scenario.RETENTION
    assert config.seeds == (17, 29) and config.repetitions == 3
    assert (config.step_count, config.noise_lines) == (4, 12)
    assert config.policies == ("append-only", "editable")
    limits = config.limits
    assert (
        limits.context_window,
        limits.turn_tokens,
        limits.episode_tokens,
        limits.decision_output_tokens,
        limits.completion_output_tokens,
        limits.decision_attempts,
    ) == (4_096, 24_000, 80_000, 1_024, 512, 4)
    budget = limits.run_budget()
    assert (budget.context_window, budget.total_tokens, budget.max_edit_attempts) == (
        4_096,
        24_000,
        4,
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seeds": []}, "seeds"),
        ({"seeds": [1, 1]}, "seeds must be unique"),
        ({"seeds": list(range(100_001))}, "seeds"),
        ({"seeds": [-1]}, "0...2^64-1"),
        ({"seeds": [2**64]}, "0...2^64-1"),
        ({"repetitions": 0}, "repetitions"),
        ({"repetitions": 1_001}, "repetitions"),
        ({"step_count": 0}, "step_count"),
        ({"step_count": -1}, "step_count"),
        ({"step_count": 2**63}, "step_count"),
        ({"noise_lines": 129}, "noise_lines"),
        ({"policies": []}, "policies"),
        ({"policies": ["editable", "editable"]}, "policies must be unique"),
        (
            {
                "seeds": [1, 2],
                "repetitions": 4,
                "step_count": 17,
                "policies": ["append-only", "editable", "navigated", "distilled"],
                "max_planned_steps": 512,
            },
            "above the guard max_planned_steps 512",
        ),
        ({"max_planned_steps": 0}, "max_planned_steps"),
        ({"limits": {"context_window": 32_769}}, "limits.context_window"),
        ({"limits": {"decision_attempts": 5}}, "limits.decision_attempts"),
        ({"limits": {"turn_tokens": 0}}, "limits.turn_tokens"),
        ({"limits": {"completion_output_tokens": 4_097}}, "limits.completion_output_tokens"),
        ({"colour": "teal"}, "colour"),
        ({"schema_version": 2}, "schema_version"),
        ({"repetitions": "3"}, "repetitions"),
    ],
)
def test_configuration_bounds_are_validated_with_clear_messages(
    change: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidConfiguration, match=re.escape(message)):
        EvaluationConfig.parse(json.dumps(change), "test.json")


def test_plan_of_exactly_the_guard_is_allowed_and_the_guard_can_be_raised() -> None:
    config = EvaluationConfig(
        seeds=(1, 2),
        repetitions=4,
        step_count=16,
        policies=("append-only", "editable", "navigated", "distilled"),
        max_planned_steps=512,
    )
    assert config.planned_steps == 512
    big = EvaluationConfig(
        seeds=tuple(range(500)), repetitions=10, step_count=4, max_planned_steps=100_000
    )
    assert big.planned_steps == 500 * 10 * 2 * 4
    with pytest.raises(ValueError, match="above the guard max_planned_steps 20,000"):
        EvaluationConfig(seeds=tuple(range(500)), repetitions=10, step_count=4)


def test_oversized_and_malformed_configuration_text() -> None:
    with pytest.raises(InvalidConfiguration, match="larger than"):
        EvaluationConfig.parse(" " * 1_000_001)
    with pytest.raises(InvalidConfiguration, match=r"test\.json"):
        EvaluationConfig.parse("{not json", "test.json")


def test_unknown_policies_are_rejected_before_any_call() -> None:
    backend = DeterministicNotebookBackend()
    with pytest.raises(InvalidConfiguration, match="unknown policy 'wandering'"):
        runner_for(EvaluationConfig(policies=("editable", "wandering")), backend)
    assert backend.calls == 0
    assert resolve_policies(["summarize"]) == (SUMMARIZE,)


ALONE = {"name": "navigated-alone", "kind": "navigated", "config": {"navigator": None}}


def test_a_variant_runs_beside_the_policy_it_configures() -> None:
    """Two settings of one policy in one run: the variant keeps its own name in the report
    and its settings (no prefetch) in every turn."""
    config = EvaluationConfig.parse(
        json.dumps(
            {
                "scenario": "state_updates",
                "seeds": [17],
                "repetitions": 1,
                "step_count": 4,
                "noise_lines": 48,
                "protect_requests": False,
                "policies": ["navigated", "navigated-alone"],
                "variants": [ALONE],
                "limits": {"context_window": 16_384, "turn_tokens": 96_000},
            }
        )
    )
    report = runner_for(config).run()
    by_name = {r.policy.name: r for r in report.results}
    assert set(by_name) == {"navigated", "navigated-alone"}
    assert by_name["navigated-alone"].policy.config == {"navigator": None}
    alone = by_name["navigated-alone"].steps
    helped = by_name["navigated"].steps
    assert not any(s.prefetch_steps for s in alone)
    assert any(s.prefetch_steps for s in helped)
    assert [p.policy for p in report.summary.policies] == ["navigated", "navigated-alone"]


@pytest.mark.parametrize(
    ("variants", "message"),
    [
        ([ALONE, ALONE], "variant names must be unique"),
        ([{**ALONE, "name": "navigated"}], "must differ from the built-in policies"),
        ([{**ALONE, "kind": "wandering"}], "wandering"),
        ([{**ALONE, "config": {"navigator": "nope"}}], "navigator must be one of"),
    ],
)
def test_bad_variants_are_refused_with_a_clear_message(
    variants: list[dict[str, object]], message: str
) -> None:
    with pytest.raises(InvalidConfiguration, match=message):
        EvaluationConfig.parse(json.dumps({"policies": ["editable"], "variants": variants}))


def test_an_unlisted_variant_name_is_an_unknown_policy() -> None:
    with pytest.raises(InvalidConfiguration, match="unknown policy 'navigated-alone'"):
        runner_for(EvaluationConfig(policies=("navigated-alone",)))


def test_policies_are_data() -> None:
    assert set(BUILTIN_POLICIES) == {
        "append-only",
        "editable",
        "summarize",
        "navigated",
        "distilled",
        "sliding-window",
        "compaction",
        "retrieval",
    }
    assert APPEND_ONLY.mode is RunMode.APPEND_ONLY and EDITABLE.mode is RunMode.EDITABLE
    with pytest.raises(ValueError):
        Policy(name="Bad Name", kind="editable")
    custom = Policy(name="editable-twin", kind="editable")
    registry = {**BUILTIN_POLICIES, custom.name: custom}
    config = EvaluationConfig(
        seeds=(3,), repetitions=1, policies=("editable", "editable-twin"), limits=WIDE
    )
    report = EvaluationRunner(
        config,
        ByteCounter(),
        DeterministicNotebookBackend(),
        provenance(deterministic_backend()),
        registry,
    ).run()
    assert [r.policy.name for r in report.results] == ["editable", "editable-twin"]
    assert report.passed


@pytest.mark.parametrize("name", ["retention", "state", "pressure"])
def test_bundled_profiles(name: str) -> None:
    from picocontext_diagnostics.evaluation import load_config

    config = load_config(str(fixtures_dir() / "evaluation" / f"{name}.json"))
    assert config.policies == ("append-only", "editable", "summarize")
    assert config.seeds == (17,) and config.repetitions == 3
    assert config.limits == EvaluationLimits()
    expected = {
        "retention": (Scenario.RETENTION, 4, 12),
        "state": (Scenario.STATE_UPDATES, 5, 12),
        "pressure": (Scenario.RETENTION, 8, pressure_profile().noise_lines),
    }[name]
    assert (config.scenario, config.step_count, config.noise_lines) == expected


# -- rotation, isolation and the report (93-95) -----------------------------------------------


def test_rotation_balances_order_and_results_follow_execution_order() -> None:
    config = EvaluationConfig(seeds=(17, 29), repetitions=2, step_count=1, limits=WIDE)
    report = runner_for(config).run()
    letters = [
        "A" if r.policy is APPEND_ONLY or r.policy.name == "append-only" else "E"
        for r in report.results
    ]
    assert letters == ["A", "E", "E", "A", "E", "A", "A", "E"]
    assert [r.order for r in report.results] == list(range(1, 9))
    assert [(r.seed, r.repetition) for r in report.results[:4]] == [
        (17, 0),
        (17, 0),
        (17, 1),
        (17, 1),
    ]
    assert rotation([APPEND_ONLY, EDITABLE, SUMMARIZE], 1, 1) == [SUMMARIZE, APPEND_ONLY, EDITABLE]


class CacheTracking(DeterministicNotebookBackend):
    """Logs cache resets between generation calls."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []

    def reset_cache(self) -> None:
        self.log.append("reset")

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        self.log.append("call")
        return super().generate(prompt, max_tokens, cancel)


def test_every_episode_starts_with_a_cold_prefix_cache() -> None:
    """Same seed, same policy, next repetition: identical prompts must not be reused from the
    previous episode's cache, or later episodes would report less prefill work than they did."""
    config = EvaluationConfig(seeds=(17, 29), repetitions=2, step_count=2, limits=WIDE)
    backend = CacheTracking()
    report = runner_for(config, backend).run()
    episodes = len(report.results)
    assert backend.log.count("reset") == episodes == 8
    assert backend.log[0] == "reset"
    # one reset before each episode's calls, none in between
    runs = "".join("R" if entry == "reset" else "c" for entry in backend.log).split("R")[1:]
    assert len(runs) == episodes and all(runs)


class WarmTracking(CacheTracking):
    def warm_up(self) -> None:
        self.log.append("warm")


def test_the_engine_is_warmed_once_before_the_first_episode() -> None:
    """The first episode must not carry the engine's one-time costs (the grammar state, the
    first pass over the weights) that every later one is spared."""
    config = EvaluationConfig(seeds=(17,), repetitions=2, step_count=2, limits=WIDE)
    backend = WarmTracking()
    runner_for(config, backend).run()
    assert backend.log.count("warm") == 1 and backend.log[0] == "warm"
    assert backend.log[1] == "reset"  # then cold, like every episode


class Recording(DeterministicNotebookBackend):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[PreparedPrompt] = []

    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        self.seen.append(prompt)
        return super().generate(prompt, max_tokens, cancel)


def test_report_exports_exactly_the_dispatched_calls_and_round_trips(tmp_path: Path) -> None:
    backend = Recording()
    config = EvaluationConfig(seeds=(17,), repetitions=2, step_count=3, limits=WIDE)
    report = runner_for(config, backend).run()
    exported = [c for r in report.results for s in r.steps for c in s.calls]
    assert len(exported) == len(backend.seen)
    for call, sent in zip(exported, backend.seen, strict=True):
        assert call.token_ids == sent.token_ids
        assert call.rendered_prompt == sent.rendered
        assert call.context == sent.input.context
        assert call.control_records == sent.input.control_records
        assert call.phase is sent.input.phase and call.edit_style is sent.input.edit_style
    text = report.to_json()
    data = json.loads(text)
    assert data["kind"] == "picocontext-evaluation" and data["schema_version"] == 1
    assert list(data) == sorted(data)
    assert EvaluationReport.from_json(text) == report
    assert "\\/" not in text
    step = data["results"][0]["steps"][0]
    assert isinstance(step["calls"][0]["token_ids"], list)
    assert step["incoming"][0]["id"] == "step-1-call"
    assert step["expected_facts"] == step["retained_facts"]
    # each token-id array sits on one line
    assert all(
        "token_ids" not in line or line.rstrip().endswith(("],", "]")) for line in text.splitlines()
    )


def test_pretty_json_is_collision_free() -> None:
    data = {"token_ids": [1, 2], "other": {"token_ids": [3]}, "text": '"token_ids"'}
    assert json.loads(pretty_json(data)) == data


def test_results_are_isolated_and_policies_see_the_same_episode() -> None:
    config = EvaluationConfig(seeds=(5,), repetitions=2, step_count=2, limits=WIDE)
    report = runner_for(config).run()
    first = report.results[0]
    assert first.original is not None  # the runner keeps traces unless told otherwise
    for result in report.results:
        assert result.original is not None
        assert result.original.records[:2] == first.original.records[:2]
        assert [s.incoming for s in result.steps] == [s.incoming for s in first.steps]
        assert result.steps[0].run_start is not None and result.steps[0].run_start.revision == 1
    assert all(r.context_window == 32_768 for r in report.results)


def test_environment_prompt_tokens_and_pressure() -> None:
    config = EvaluationConfig(seeds=(5,), repetitions=1, step_count=3, limits=WIDE)
    runner = runner_for(config)
    (episode,) = runner.episodes()
    expected = runner.environment_tokens(episode)[0]
    assert expected is not None
    report = runner.run()
    for result in report.results:
        assert result.environment_prompt_tokens == expected
        assert result.environment_pressure == pytest.approx(expected / 32_768)
    total_dispatched = sum(c.token_count for r in report.results for s in r.steps for c in s.calls)
    assert total_dispatched == sum(r.input_tokens for r in report.results)


def test_budget_failure_keeps_incoming_records_and_the_other_policy_continues() -> None:
    limits = EvaluationLimits(context_window=10_000, turn_tokens=500_000, episode_tokens=2_000_000)
    config = EvaluationConfig(
        seeds=(17,), repetitions=1, step_count=4, noise_lines=50, limits=limits
    )
    report = runner_for(config).run()
    append, editable = report.results
    assert append.policy.name == "append-only" and not append.passed
    assert append.failure is not None and "context window" in append.failure
    failed = append.steps[-1]
    assert failed.calls == () and failed.revised is not None
    assert all(record in failed.revised.records for record in failed.incoming)
    assert len(append.steps) < append.planned_steps
    assert editable.passed and len(editable.steps) == 4
    assert not report.passed
    (comparison,) = report.summary.comparisons
    assert (comparison.only_a_passed, comparison.only_b_passed) == (0, 1)


def test_summarize_policy_consolidates_and_charges_every_decision() -> None:
    config = EvaluationConfig(
        seeds=(17,),
        repetitions=3,
        step_count=3,
        policies=("append-only", "editable", "summarize"),
        limits=WIDE,
    )
    report = runner_for(config).run()
    assert len(report.results) == 9 and report.passed
    assert [r.policy.name for r in report.results[:3]] == ["append-only", "editable", "summarize"]
    assert [r.policy.name for r in report.results[3:6]] == ["editable", "summarize", "append-only"]
    for result in report.results:
        if result.policy.name != "summarize":
            continue
        for step in result.steps:
            decisions = [c for c in step.calls if c.phase is Phase.EDIT]
            assert len(decisions) == 1 and step.edit_calls + step.keep_calls == 1
            completion = step.calls[-1]
            assert completion.context is not None
            bodies = [r for r in completion.context.records if not r.protected and r.body]
            assert len(bodies) == 1
            assert step.input_tokens == sum(c.token_count for c in step.calls)
        assert result.original is not None
        assert result.revised.ids == result.original.ids  # metadata and records unchanged


def test_cancellation_stops_the_batch() -> None:
    token = CancelToken()
    config = EvaluationConfig(seeds=(1,), repetitions=2, step_count=1, limits=WIDE)
    seen: list[object] = []

    def on_result(result: object) -> None:
        seen.append(result)
        token.cancel()

    with pytest.raises(Cancelled):
        runner_for(config).run(on_result=on_result, cancel=token)
    assert len(seen) == 1


# -- statistics -------------------------------------------------------------------------------


def test_wilson_interval_known_values() -> None:
    low, high = wilson_interval(8, 10)
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)
    assert wilson_interval(0, 10)[0] == 0.0 and round(wilson_interval(0, 10)[1], 4) == 0.2775
    assert wilson_interval(10, 10)[1] == 1.0 and round(wilson_interval(10, 10)[0], 4) == 0.7225
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_mcnemar_exact() -> None:
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(0, 6) == pytest.approx(2 / 64)
    assert mcnemar_exact_p(1, 5) == pytest.approx(2 * 7 / 64)
    assert mcnemar_exact_p(5, 5) == 1.0


def test_paired_difference_interval() -> None:
    low, high = paired_difference_interval(5, 0, 0, 5)
    assert low < 0 < high and math.isclose(low, -high)
    low, high = paired_difference_interval(0, 20, 0, 0)
    assert 0 < low <= 1 == high
    a = paired_difference_interval(3, 4, 1, 2)
    b = paired_difference_interval(3, 1, 4, 2)
    assert a[0] == pytest.approx(-b[1]) and a[1] == pytest.approx(-b[0])
    assert a[0] <= (4 - 1) / 10 <= a[1]
    assert paired_difference_interval(0, 0, 0, 0) == (-1.0, 1.0)


def test_summary_counts_unreached_steps_as_failures() -> None:
    limits = EvaluationLimits(context_window=10_000, turn_tokens=500_000, episode_tokens=2_000_000)
    config = EvaluationConfig(
        seeds=(17,), repetitions=1, step_count=4, noise_lines=50, limits=limits
    )
    report = runner_for(config).run()
    append = report.summary.policies[0]
    assert append.policy == "append-only"
    assert append.retained_steps.trials == 4 and append.retained_steps.successes < 4
    assert append.episodes.successes == 0 and append.episodes.rate == 0.0
    again = summarize(report.results, ["append-only", "editable"])
    assert again == report.summary


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
_config_like = st.fixed_dictionaries(
    {},
    optional={
        "scenario": st.sampled_from(["retention", "state_updates", "other", 3]),
        "seeds": st.lists(st.integers(min_value=-2, max_value=2**64), max_size=18),
        "repetitions": st.integers(min_value=-1, max_value=6) | st.text(max_size=2),
        "step_count": st.integers(min_value=-1, max_value=40),
        "noise_lines": st.integers(min_value=-1, max_value=130),
        "policies": st.lists(
            st.sampled_from(["append-only", "editable", "summarize", "x"]), max_size=4
        ),
        "limits": st.dictionaries(
            st.sampled_from(["context_window", "turn_tokens", "decision_attempts", "bogus"]),
            st.integers(min_value=-1, max_value=40_000),
        ),
    },
)


@settings(max_examples=200, deadline=None)
@given(st.one_of(_config_like, _json_values))
def test_configuration_parser_either_accepts_a_bounded_plan_or_says_why(data: object) -> None:
    try:
        config = EvaluationConfig.parse(json.dumps(data))
    except InvalidConfiguration as exc:
        assert exc.message
        return
    assert 1 <= config.planned_steps <= config.max_planned_steps
    assert len(set(config.seeds)) == len(config.seeds) and config.policies
