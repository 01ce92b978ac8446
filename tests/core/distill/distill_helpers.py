"""Helpers shared by the distillation tests (imported by name; conftest puts this folder on
sys.path because tests run with --import-mode=importlib)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from picocontext.distill import DistillConfig, Distiller, Embedder, Guard, Unit
from picocontext.distill.testing import ConstantEmbedder, FakeSummarizer

MakeDistiller = Callable[..., Distiller]


def note(unit_id: str, body: str, site: str = "", title: str = "", kind: str = "note") -> Unit:
    """The reference's fixture shape: a note with title+body text in a ``site`` scope."""
    text = f"{title} {body}".strip() if title else body
    return Unit(source_kind=kind, unit_id=unit_id, text=text, scopes=(("site", site),))


def build(
    root: Path,
    summarizer: FakeSummarizer | None = None,
    embedder: Embedder | None = None,
    guard: Guard | None = None,
    **config: Any,
) -> Distiller:
    config.setdefault("recipe_version", "v1")
    return Distiller.open(
        root,
        summarizer or FakeSummarizer(),
        embedder or ConstantEmbedder(),
        guard=guard,
        config=DistillConfig(**config),
    )


def seven_node_units() -> list[Unit]:
    """3 notes: n1, n2 in s1 and n3 in s2 -> 3 L0 + 2 scopes + 1 cluster + root = 7 nodes
    (with the constant embedder every SemHash is equal, so all three share one cluster)."""
    return [
        note("n1", "vibration high", "s1", title="Pump"),
        note("n2", "pressure nominal", "s1", title="Valve"),
        note("n3", "bearing worn", "s2", title="Motor"),
    ]
