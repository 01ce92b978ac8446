"""Context policies and their registry.

Built in: append-only, editable, summarize, navigated (pcx), distilled (digest tree), and the
strategies people use instead: sliding window, compaction and retrieval. Every policy is
registered as a name, a config model and a factory (:mod:`.registry`); runners look policies
up with :func:`policy_registry` and run each through :meth:`ContextPolicy.turn`.
"""

from picocontext.policies.base import AppendOnlyPolicy, ContextPolicy, EditablePolicy
from picocontext.policies.compaction import (
    SUMMARY_GUIDANCE,
    SUMMARY_MARK,
    Compaction,
    CompactionPolicy,
    CompactionSettings,
)
from picocontext.policies.distilled import DistilledConfig, DistilledPolicy, DistilledTurn
from picocontext.policies.navigated import INDEX_HEADER as NAVIGATED_INDEX_HEADER
from picocontext.policies.navigated import NavigatedConfig, NavigatedPolicy, NavigatedTurn
from picocontext.policies.registry import (
    ENTRY_POINT_GROUP,
    NoConfig,
    PolicyContext,
    PolicyError,
    PolicyRegistry,
    PolicySpec,
    UnknownPolicy,
    load_registry,
    policy_registry,
)
from picocontext.policies.retrieval import RetrievalPolicy, RetrievalSettings
from picocontext.policies.sliding_window import SlidingWindowPolicy, SlidingWindowSettings

__all__ = [
    "ENTRY_POINT_GROUP",
    "NAVIGATED_INDEX_HEADER",
    "SUMMARY_GUIDANCE",
    "SUMMARY_MARK",
    "AppendOnlyPolicy",
    "Compaction",
    "CompactionPolicy",
    "CompactionSettings",
    "ContextPolicy",
    "DistilledConfig",
    "DistilledPolicy",
    "DistilledTurn",
    "EditablePolicy",
    "NavigatedConfig",
    "NavigatedPolicy",
    "NavigatedTurn",
    "NoConfig",
    "PolicyContext",
    "PolicyError",
    "PolicyRegistry",
    "PolicySpec",
    "RetrievalPolicy",
    "RetrievalSettings",
    "SlidingWindowPolicy",
    "SlidingWindowSettings",
    "UnknownPolicy",
    "load_registry",
    "policy_registry",
]
