"""The Guard seam: what may reach the summarizer (ingest) and what may leave it (emit).

A guard expresses redaction and blocking only through :class:`GuardResult`; an exception means
"the guard is unavailable" and the fail-closed (default) or fail-open policy decides.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from picocontext.distill.data import GuardInput, GuardResult


@runtime_checkable
class Guard(Protocol):
    @property
    def version(self) -> str:
        """Policy version; part of the recipe and of the negative-cache key."""
        ...

    def guard(self, request: GuardInput) -> GuardResult: ...


def apply_guard(guard: Guard | None, request: GuardInput, fail_open: bool) -> GuardResult:
    """Resolve a guard call to a result; never raises (spec §2.13)."""
    if guard is None:
        return GuardResult(text=request.text)
    try:
        result = guard.guard(request)
    except Exception as exc:  # a plugin failed: the policy decides, never the exception
        if fail_open:
            return GuardResult(text=request.text)
        return GuardResult(blocked=True, reason=f"guard error (fail-closed): {exc}")
    if result.blocked:
        return result
    if not result.text:
        return GuardResult(text=request.text, reason=result.reason)
    return result


def guard_version(guard: Guard | None) -> str:
    return "none" if guard is None else guard.version


_EMAIL = r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
_KEYS = (
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    r"\b(?:sk|pk|rk)-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_]{16,}",
    r"\bAKIA[0-9A-Z]{16}\b",
    r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",
    r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
    r"\bhf_[A-Za-z0-9]{30,}\b",
)
_ASSIGNED_SECRET = r"(?i)\b(api[_-]?key|secret|token|password|passwd)(\s*[:=]\s*)[^\s,;'\"]{6,}"
_PHONE = r"(?<![\w+])\+?\(?\d[\d\s().-]{6,}\d(?!\w)"


def _phone_like(match: re.Match[str]) -> bool:
    digits = sum(ch.isdigit() for ch in match.group(0))
    return 9 <= digits <= 15


def _conditional(
    label: str, accept: Callable[[re.Match[str]], bool]
) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        return label if accept(match) else match.group(0)

    return replace


class RegexGuard:
    """Default guard: redacts e-mail addresses, API keys/secrets and phone numbers; blocks text
    matching any ``block`` pattern. Deterministic, local, no model."""

    def __init__(self, block: Sequence[str] = (), extra_redactions: Sequence[str] = ()) -> None:
        self._block = [re.compile(p) for p in block]
        self._rules: list[tuple[re.Pattern[str], str, Callable[[re.Match[str]], bool] | None]] = [
            *((re.compile(p), "[KEY]", None) for p in _KEYS),
            (re.compile(_ASSIGNED_SECRET), r"\1\2[KEY]", None),
            (re.compile(_EMAIL), "[EMAIL]", None),
            (re.compile(_PHONE), "[PHONE]", _phone_like),
            *((re.compile(p), "[REDACTED]", None) for p in extra_redactions),
        ]
        spec = "\x00".join(
            [*block, "|", *_KEYS, _ASSIGNED_SECRET, _EMAIL, _PHONE, "|", *extra_redactions]
        )
        self._version = "regex-1:" + hashlib.sha256(spec.encode()).hexdigest()[:12]

    @property
    def version(self) -> str:
        return self._version

    def redact(self, text: str) -> str:
        for pattern, label, accept in self._rules:
            if accept is None:
                text = pattern.sub(label, text)
            else:
                text = pattern.sub(_conditional(label, accept), text)
        return text

    def guard(self, request: GuardInput) -> GuardResult:
        for pattern in self._block:
            if pattern.search(request.text):
                return GuardResult(blocked=True, reason=f"matched block pattern {pattern.pattern}")
        return GuardResult(text=self.redact(request.text))
