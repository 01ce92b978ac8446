"""picocontext_diagnostics — fixtures, graders, runners and benchmarks over the public core API.

* :mod:`.fixtures` — JSON fixtures (order lookup, notebook episodes, pressure profile).
* :mod:`.episodes` — fixed and seeded generated notebook episodes with their oracle.
* :mod:`.grading` — the notebook fold, exact-value framing and the strict answer parser.
* :mod:`.order_task` — the order lookup as a one-step episode, and a deterministic model
  that plays it by rule.
* :mod:`.notebook` — a deterministic notebook backend (an "ideal model" for tests and demos;
  in the tools phase of navigated/distilled policies a reader of what it is shown).
* :mod:`.policies` — policies as data; append-only, editable, summarize, navigated, distilled.
* :mod:`.runner` — the episode runner; :mod:`.evaluation` — batches, statistics, JSON reports.
* :mod:`.cli` — ``picocontext-eval``.
"""

from picocontext_diagnostics.episodes import (
    Episode,
    SplitMix64,
    Step,
    check_oracle,
    fixture_episode,
    generated_episode,
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
from picocontext_diagnostics.fixtures import (
    OrderLookup,
    Scenario,
    order_lookup,
    pressure_profile,
)
from picocontext_diagnostics.grading import (
    ContextCheck,
    answer_matches,
    exact_values,
    notebook_state,
    parse_facts_answer,
    retained_facts,
    value_is_framed,
)
from picocontext_diagnostics.notebook import DeterministicNotebookBackend
from picocontext_diagnostics.order_task import DeterministicOrderBackend, order_lookup_episode
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
from picocontext_diagnostics.runner import (
    DEFAULT_EPISODE_TOKENS,
    EpisodeReport,
    EpisodeRunner,
    StepReport,
    sequential_budget,
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
