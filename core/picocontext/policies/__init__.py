"""Context policies: append-only, editable, navigated (pcx) and distilled (digest tree)."""

from picocontext.policies.base import AppendOnlyPolicy, ContextPolicy, EditablePolicy
from picocontext.policies.distilled import DistilledPolicy
from picocontext.policies.navigated import NavigatedPolicy

__all__ = [
    "AppendOnlyPolicy",
    "ContextPolicy",
    "DistilledPolicy",
    "EditablePolicy",
    "NavigatedPolicy",
]
