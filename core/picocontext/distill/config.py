"""Settings and counters of a corpus: :class:`DistillConfig` (the knobs, recorded in every
recipe) and :class:`Counters` (the reference's eight metrics plus our I/O oracles).

Shared by the leaf pipeline (:mod:`picocontext.distill.distiller`) and the roll-up
(:mod:`picocontext.distill.rollup`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    pass

Tokenizer = Callable[[str], int]

METRIC_NAMES = {
    "summaries": "fabriq_distill_summaries_total",
    "shortcircuit": "fabriq_distill_shortcircuit_total",
    "nodes": "fabriq_distill_nodes_total",
    "guard_blocked": "fabriq_distill_guard_blocked_total",
    "failures": "fabriq_distill_failures_total",
    "splits": "fabriq_distill_splits_total",
    "dedup": "fabriq_distill_dedup_total",
    "intermediate_gc": "fabriq_distill_intermediate_gc_total",
}


def whitespace_tokens(text: str) -> int:
    """The default distiller tokenizer: whitespace-separated words."""
    return len(text.split())


class DistillConfig(BaseModel):
    """Knobs of one corpus; defaults are the reference's (spec §6)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    recipe_version: str = Field(
        default="", description="Explicit salt (e.g. 'v1'); empty = computed from the Recipe."
    )
    recipe_salt: str = ""
    sem_seed: int = 1
    cluster_bits: int = Field(default=12, ge=1, le=64)
    noise_floor: int = Field(default=2, ge=1)
    probe_radius: int = Field(default=0, ge=0)
    budget: int = Field(default=256, gt=0)
    input_budget: int = Field(default=6000, gt=0)
    max_fan_in: int = Field(default=32, ge=2)
    sub_bits: int = Field(default=4, ge=1, le=16)
    fail_open_guard: bool = False
    embed_batch: int = Field(default=200, gt=0)
    max_attempts: int = Field(default=3, ge=1)
    corpus: str = "default"
    split_key: Literal["id", "semhash"] = Field(
        default="id",
        description=(
            "What an overflowing group is partitioned on: 'id' (a hash of each child's id, so "
            "an edit never moves a child to another intermediate) or 'semhash' (the "
            "reference: children with similar summaries share an intermediate, but an edit "
            "that changes a child's SemHash moves it and re-summarises two paths)."
        ),
    )
    views: Literal["deferred", "eager"] = Field(
        default="deferred",
        description=(
            "'deferred': the root rolls up each leaf's primary parent only (its first declared "
            "scope, else its cluster, else the unclustered bucket); the other level-1 nodes "
            "(secondary scopes such as days, clusters of scoped leaves) are views whose "
            "ContentHashes a sweep keeps exact and whose summaries are written the first "
            "time digest/recall needs them. 'eager': the reference — every level-1 node is "
            "a child of the root and every summary is written in the sweep."
        ),
    )


class Counters:
    """In-process counters: the reference's 8 (``METRIC_NAMES``) plus I/O oracles."""

    FIELDS = (
        *METRIC_NAMES,
        "embed_calls",
        "embedded_texts",
        "negative_cache_hits",
        "links_refreshed",
        "deferred",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(self.FIELDS, 0)

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._values[name] += amount

    def get(self, name: str) -> int:
        with self._lock:
            return self._values[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)

    def prometheus(self) -> str:
        """Text exposition of the 8 reference counters."""
        snap = self.snapshot()
        lines = []
        for key, name in METRIC_NAMES.items():
            lines += [f"# TYPE {name} counter", f"{name} {snap[key]}"]
        return "\n".join(lines) + "\n"
