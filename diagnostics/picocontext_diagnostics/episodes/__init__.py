"""Episodes: multi-step tasks a policy plays one turn at a time, graded on its live context.

* :mod:`.fixtures` — fixture files under ``resources/fixtures/`` (order lookup, notebook
  episodes, pressure profile) and their loading;
* :mod:`.episode` — fixed and seeded generated notebook episodes with their oracle;
* :mod:`.grading` — the notebook fold, exact-value framing and the strict answer parser;
* :mod:`.notebook_backend` — a deterministic notebook backend (an "ideal model" for tests and
  demos; in the tools phase of navigated/distilled policies a reader of what it is shown);
* :mod:`.order_task` — the order lookup as a one-step episode, and a deterministic model that
  plays it by rule;
* :mod:`.episode_runner` — :class:`EpisodeRunner`, one session per episode.
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

__all__ = [
    "DEFAULT_EPISODE_TOKENS",
    "ContextCheck",
    "DeterministicNotebookBackend",
    "DeterministicOrderBackend",
    "Episode",
    "EpisodeReport",
    "EpisodeRunner",
    "OrderLookup",
    "Scenario",
    "SplitMix64",
    "Step",
    "StepReport",
    "answer_matches",
    "check_oracle",
    "exact_values",
    "fixture_episode",
    "generated_episode",
    "notebook_state",
    "order_lookup",
    "order_lookup_episode",
    "parse_facts_answer",
    "pressure_profile",
    "retained_facts",
    "sequential_budget",
    "value_is_framed",
]
