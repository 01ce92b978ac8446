"""Reports compared apart from their timings: runs that did the same work differ only there."""

from __future__ import annotations

from typing import Any


def timeless(value: Any) -> Any:
    """``value`` (parsed JSON) without any field naming elapsed time or a creation date."""
    if isinstance(value, dict):
        return {
            k: timeless(v) for k, v in value.items() if "elapsed" not in k and k != "created_at"
        }
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value
