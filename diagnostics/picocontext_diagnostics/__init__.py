"""picocontext_diagnostics — fixtures, graders, runners and benchmarks over the public core API.

* :mod:`.episodes` — notebook episodes and the order lookup: fixtures, the episode streams,
  graders, deterministic backends and the episode runner.
* :mod:`.conversations` — conversations: the file format, the LoCoMo converter, the extractive
  backend, the conversation runner and ``picocontext eval --conversation``.
* :mod:`.evaluation` — batches of episodes, statistics, JSON reports.
* :mod:`.policies` — policies as data; append-only, editable, summarize, navigated, distilled.
* :mod:`.backends` — the backends an evaluation runs on, and their provenance.
* :mod:`.decision_probes` — bring-your-own decision probes, judged by outcome.
* :mod:`.verdict` — who won a side-by-side run; :mod:`.parallel` — episodes on a worker pool.
* :mod:`.cli` — ``picocontext eval``; :mod:`.tables` — ``picocontext tables``;
  :mod:`.bench` — ``scripts/bench.sh`` benchmarks.
"""

from picocontext_diagnostics.episodes.episode import (
    Episode,
    SplitMix64,
    Step,
    check_oracle,
    fixture_episode,
    generated_episode,
)
from picocontext_diagnostics.episodes.episode_runner import (
    DEFAULT_EPISODE_TOKENS,
    EpisodeReport,
    EpisodeRunner,
    StepReport,
    sequential_budget,
)
from picocontext_diagnostics.episodes.fixtures import (
    OrderLookup,
    Scenario,
    order_lookup,
    pressure_profile,
)
from picocontext_diagnostics.episodes.grading import (
    ContextCheck,
    answer_matches,
    exact_values,
    notebook_state,
    parse_facts_answer,
    retained_facts,
    value_is_framed,
)
from picocontext_diagnostics.episodes.notebook_backend import DeterministicNotebookBackend
from picocontext_diagnostics.episodes.order_task import (
    DeterministicOrderBackend,
    order_lookup_episode,
)
from picocontext_diagnostics.errors import (
    AnswerFormatError,
    BackendSetupError,
    DiagnosticsError,
    FixtureError,
    InvalidConfiguration,
    InvalidEpisode,
)
from picocontext_diagnostics.evaluation import (
    EvaluationConfig,
    EvaluationLimits,
    EvaluationReport,
    EvaluationResult,
    EvaluationRunner,
    Provenance,
)
from picocontext_diagnostics.policies import (
    APPEND_ONLY,
    BUILTIN_POLICIES,
    DISTILLED,
    EDITABLE,
    FOUR_POLICIES,
    NAVIGATED,
    SUMMARIZE,
    Policy,
    PolicyRun,
    TurnRunner,
    create_policy_object,
    run_turn,
)

__all__ = [
    "APPEND_ONLY",
    "BUILTIN_POLICIES",
    "DEFAULT_EPISODE_TOKENS",
    "DISTILLED",
    "EDITABLE",
    "FOUR_POLICIES",
    "NAVIGATED",
    "SUMMARIZE",
    "AnswerFormatError",
    "BackendSetupError",
    "ContextCheck",
    "DeterministicNotebookBackend",
    "DeterministicOrderBackend",
    "DiagnosticsError",
    "Episode",
    "EpisodeReport",
    "EpisodeRunner",
    "EvaluationConfig",
    "EvaluationLimits",
    "EvaluationReport",
    "EvaluationResult",
    "EvaluationRunner",
    "FixtureError",
    "InvalidConfiguration",
    "InvalidEpisode",
    "OrderLookup",
    "Policy",
    "PolicyRun",
    "Provenance",
    "Scenario",
    "SplitMix64",
    "Step",
    "StepReport",
    "TurnRunner",
    "answer_matches",
    "check_oracle",
    "create_policy_object",
    "exact_values",
    "fixture_episode",
    "generated_episode",
    "notebook_state",
    "order_lookup",
    "order_lookup_episode",
    "parse_facts_answer",
    "pressure_profile",
    "retained_facts",
    "run_turn",
    "sequential_budget",
    "value_is_framed",
]
