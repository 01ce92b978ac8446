"""Context policies: append-only, editable, navigated (pcx) and distilled (digest tree)."""

from picocontext.policies.base import AppendOnlyPolicy, ContextPolicy, EditablePolicy

__all__ = ["AppendOnlyPolicy", "ContextPolicy", "EditablePolicy"]
