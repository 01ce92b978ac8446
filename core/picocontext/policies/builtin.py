"""The built-in policies, in the order runners list them.

This list is what the ``builtin`` entry point of the ``picocontext.policies`` group names
(see ``pyproject.toml``); a new built-in policy is one module that defines its
:class:`~picocontext.policies.registry.PolicySpec` plus one line here.
"""

from __future__ import annotations

from typing import Any

from picocontext.policies import (
    compaction,
    distilled,
    navigated,
    retrieval,
    simple,
    sliding_window,
)
from picocontext.policies.registry import PolicySpec

BUILTIN_POLICIES: tuple[PolicySpec[Any], ...] = (
    simple.APPEND_ONLY,
    simple.EDITABLE,
    simple.SUMMARIZE,
    navigated.SPEC,
    distilled.SPEC,
    sliding_window.SPEC,
    compaction.SPEC,
    retrieval.SPEC,
)
