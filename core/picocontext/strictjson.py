"""Strict JSON for input the runtime must not guess about: model tool arguments, manifests.

The standard parser keeps the last of two equal keys and reads ``NaN`` and ``Infinity``, which
are not JSON; either would let a payload mean something other than what a reader sees, so
both are refused here, by name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, NoReturn


class DuplicateKey(ValueError):
    """A JSON object with a repeated key (raised by :func:`unique_keys`)."""

    def __init__(self, key: str) -> None:
        super().__init__(
            f"duplicate key {key[:80]!r} in one JSON object (a parser would silently keep "
            "only the last value); remove or rename one"
        )
        self.key = key


def _first_repeat(keys: Iterator[str]) -> str:
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            return key
        seen.add(key)
    return ""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for :func:`json.loads`: an object with a repeated key is refused
    with :class:`DuplicateKey`, naming the key."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise DuplicateKey(_first_repeat(k for k, _ in pairs))
    return obj


def reject_constant(name: str) -> NoReturn:
    """``parse_constant`` for :func:`json.loads`: ``NaN``, ``Infinity`` and ``-Infinity``."""
    raise ValueError(f"{name} is not JSON")


def strict_loads(text: str | bytes) -> Any:
    """:func:`json.loads` refusing repeated keys and the non-JSON constants (a ValueError,
    or RecursionError for absurd nesting, as the standard parser raises)."""
    return json.loads(text, object_pairs_hook=unique_keys, parse_constant=reject_constant)
