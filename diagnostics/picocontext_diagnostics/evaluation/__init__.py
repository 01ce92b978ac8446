"""Evaluations: policies × seeds × repetitions on generated episodes, with a JSON report.

* :mod:`.config` — what to run (:class:`EvaluationConfig`, :class:`EvaluationLimits`);
* :mod:`.report` — the versioned report schema and its JSON writer;
* :mod:`.proportions` — the interval and test arithmetic for pass rates (Wilson, Newcombe,
  exact McNemar);
* :mod:`.stats` — pass rates, intervals and paired comparisons (:func:`summarize`);
* :mod:`.runner` — :class:`EvaluationRunner`, which runs a configuration.
"""

from picocontext_diagnostics.evaluation.config import (
    EvaluationConfig,
    EvaluationLimits,
    load_config,
)
from picocontext_diagnostics.evaluation.report import (
    SCHEMA,
    SCHEMA_VERSION,
    CallTrace,
    EvaluationReport,
    EvaluationResult,
    EvaluationStep,
    EvaluationSummary,
    PairedComparison,
    PolicySummary,
    Provenance,
    Rate,
    pretty_json,
)
from picocontext_diagnostics.evaluation.runner import (
    EvaluationRunner,
    ResultCallback,
    evaluation_scope,
    rotation,
)
from picocontext_diagnostics.evaluation.stats import summarize

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "CallTrace",
    "EvaluationConfig",
    "EvaluationLimits",
    "EvaluationReport",
    "EvaluationResult",
    "EvaluationRunner",
    "EvaluationStep",
    "EvaluationSummary",
    "PairedComparison",
    "PolicySummary",
    "Provenance",
    "Rate",
    "ResultCallback",
    "evaluation_scope",
    "load_config",
    "pretty_json",
    "rotation",
    "summarize",
]
