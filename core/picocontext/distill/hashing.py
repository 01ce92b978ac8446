"""ContentHash recipes (spec §1.2–1.5), the canonical value serializer and the two recipes.

ContentHash decides whether the summarizer runs: an L0 hash covers the recipe and the source
text, an internal hash covers the recipe and the multiset of child hashes. The *recipe* salts
both, so anything that would change a summary (model, prompts, budgets, guard policy,
serializer, adapters) must enter it; the *semantic recipe* covers only the embedder and SimHash
planes, so changing it re-embeds without re-summarising.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_FROZEN = ConfigDict(frozen=True, extra="forbid")

SERIALIZER_VERSION = "canon-1"
# Our deliberate divergences from the reference (spec §8.3); part of every computed recipe
# because each changes hashes or tree shape.
FIXES = "A,B,C,E,H,I,J,L,M"


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def source_field_hash(text: str) -> str:
    """SHA-256 hex of the raw (pre-guard) UTF-8 source text."""
    return _sha256_hex(text)


def l0_content_hash(recipe: str, source_hash: str) -> str:
    """SHA-256 hex of ``recipe + "\\0" + SourceFieldHash``; nothing else (ids, scopes) enters."""
    return _sha256_hex(recipe + "\x00" + source_hash)


def rollup_content_hash(recipe: str, child_hashes: Iterable[str]) -> str:
    """SHA-256 hex of the recipe and the *sorted multiset* of child hashes, NUL-joined."""
    return _sha256_hex("\x00".join([recipe, *sorted(child_hashes)]))


def membership_hash(recipe: str, parent_scope_ids: Iterable[str]) -> str:
    """Fix C: a leaf's declared scope membership, hashed apart from its content so a scope move
    refreshes links without re-summarising."""
    return _sha256_hex("\x00".join([recipe, "membership", *sorted(parent_scope_ids)]))


def summary_input_hash(
    recipe: str,
    level: int,
    kind: str,
    scope_name: str,
    scope_id: str,
    budget: int,
    children: Iterable[tuple[str, str, str, str]],
) -> str:
    """Everything an internal node's summary is made from: its own level, kind, scope and
    budget, and its children *in the order the summarizer sees them* as (id, kind,
    content_hash, summary_hash). ContentHash is the order-free multiset of child content
    hashes (spec §1.4), which two differently named, ordered or summarised child lists can
    share; the rollup short-circuits only when this hash matches too, so a reused summary is
    always the one a clean build would write."""
    payload: list[object] = [recipe, "summary-input", level, kind, scope_name, scope_id, budget]
    payload.append([list(child) for child in children])
    # JSON, not NUL-joining: ids are free text, and the encoding must stay unambiguous.
    return _sha256_hex(json.dumps(payload, ensure_ascii=False, separators=(",", ":")))


def canonical_value(value: Any) -> str:
    """One serializer for every path (fix G): strings verbatim, ints decimal, floats repr,
    booleans lowercase, datetimes RFC 3339 UTC, lists and dicts as canonical JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, _dt.datetime):
        moment: _dt.datetime = value if value.tzinfo else value.replace(tzinfo=_dt.UTC)
        return moment.astimezone(_dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, (list, tuple, dict)):
        encoded: str = json.dumps(
            value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str
        )
        return encoded
    return str(value)


def source_text(values: Mapping[str, Any], fields: Iterable[str]) -> str:
    """Present, non-null fields in declared order joined by one space (spec §1.1)."""
    parts = [canonical_value(values[name]) for name in fields if values.get(name) is not None]
    return " ".join(parts)


def scope_value(values: Mapping[str, Any], name: str) -> str:
    """``{name}_id`` first, then ``{name}``; non-string values go through the canonical
    serializer (fix F) instead of being ignored. Blank means no scope."""
    for key in (f"{name}_id", name):
        raw = values.get(key)
        if raw is None:
            continue
        text = canonical_value(raw).strip()
        if text:
            return text
    return ""


class Recipe(BaseModel):
    """Everything that changes a summary. ``version`` is the salt of every ContentHash."""

    model_config = _FROZEN

    summarizer_id: str = "unspecified"
    quantization: str = ""
    prompt_digest: str = ""
    budget: int = 256
    input_budget: int = 6000
    tokenizer: str = "whitespace-words"
    guard_version: str = "none"
    fail_open_guard: bool = False
    serializer_version: str = SERIALIZER_VERSION
    adapter_versions: tuple[str, ...] = ()
    fixes: str = FIXES
    salt: str = ""

    @property
    def version(self) -> str:
        payload = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return "r1-" + _sha256_hex(payload)[:16]


class SemanticRecipe(BaseModel):
    """The embedder and the SimHash planes: changing it re-embeds, never re-summarises."""

    model_config = _FROZEN

    embedder_id: str
    dims: int = Field(gt=0)
    generator: str = "numpy-pcg64-standard_normal-float32"
    seed: int = 1

    @property
    def version(self) -> str:
        payload = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return "s1-" + _sha256_hex(payload)[:16]


def prompt_digest(*templates: str) -> str:
    """A short hash of prompt templates, for :attr:`Recipe.prompt_digest`."""
    return _sha256_hex("\x00".join(templates))[:16]
