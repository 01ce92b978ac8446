"""One error hierarchy for the core, with stable messages a user can act on.

The descriptions of :class:`ContextError` cases are part of the protocol: reports carry them as
``failure`` strings and callers match on them, so they never change casually.
"""

from __future__ import annotations

from typing import Any


class PicoContextError(Exception):
    """Base of every error raised by :mod:`picocontext`. ``exit_code`` is what a command
    exits with when this error ends it: 1 a failure while running, 2 (for the errors that
    mean bad input: an unreadable file, a malformed document, an unknown name) a usage
    error, the same rule for every command (``picocontext.cli``)."""

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def _key(self) -> tuple[Any, ...]:
        return (type(self), self.message)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PicoContextError):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


class ContextError(PicoContextError):
    """A rejected context, edit, append, budget or decision. Leaves state untouched."""

    @property
    def description(self) -> str:
        return self.message


class InvalidContext(ContextError):
    def __init__(self, reason: str) -> None:
        super().__init__(f"Invalid context or edit: {reason}")
        self.reason = reason


class ScopeMismatch(ContextError):
    def __init__(self) -> None:
        super().__init__("The user, conversation or branch scope does not match.")


class StaleRevision(ContextError):
    def __init__(self, expected: int, received: int) -> None:
        super().__init__(f"Stale revision {received}; expected {expected}.")
        self.expected = expected
        self.received = received


class ProtectedRecord(ContextError):
    def __init__(self, record_id: str) -> None:
        super().__init__(f"Record {record_id} is protected.")
        self.record_id = record_id


class UnknownRecord(ContextError):
    def __init__(self, record_id: str) -> None:
        super().__init__(f"Unknown record {record_id}.")
        self.record_id = record_id


class DuplicateOperation(ContextError):
    def __init__(self, record_id: str) -> None:
        super().__init__(f"More than one operation targets {record_id}.")
        self.record_id = record_id


class IncompleteToolGroup(ContextError):
    def __init__(self) -> None:
        super().__init__("Delete an assistant tool call and all its results together.")


class Busy(ContextError):
    def __init__(self) -> None:
        super().__init__("A context operation is already in progress.")


class BudgetExceeded(ContextError):
    def __init__(self, reason: str) -> None:
        super().__init__(f"Token budget exceeded: {reason}")
        self.reason = reason


class EditLimit(ContextError):
    def __init__(self) -> None:
        super().__init__("The bounded edit/recovery limit was reached.")


class ModelDidNotEdit(ContextError):
    def __init__(self) -> None:
        super().__init__("The model did not call edit_context or keep_context.")


class Cancelled(PicoContextError):
    """The caller cancelled the operation. Never turned into a report failure."""

    def __init__(self, message: str = "The operation was cancelled.") -> None:
        super().__init__(message)


class StorageError(PicoContextError):
    """A persistence store could not load or save. Nothing was published."""


class ModelError(PicoContextError):
    """A model could not be resolved, loaded or run (message names the model and the fix)."""


class UnknownModel(ModelError):
    """A model name that no registry entry has, or a path that is not a model: bad input."""

    exit_code = 2


class ConfigError(PicoContextError):
    """A setting is invalid (the message names the setting and the valid values). The pcx
    compiler and distillation raise it for their options."""

    exit_code = 2


class SourceError(PicoContextError):
    """An input source (a file, folder or session store) cannot be read or does not have the
    shape its reader expects. The pcx compiler and distillation raise it for their sources."""

    exit_code = 2
