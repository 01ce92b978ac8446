"""Adapters: one per source kind, each turning a path into a :class:`SourceTree`.

Every adapter namespaces ids by where a thing lives and allocates them through one
:class:`~picocontext.build.ir.IdRegistry`, so nothing is overwritten (B1), and emits
``facets`` (kind, folder, file type, namespace, category, section ...) for filtering.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from picocontext.build.adapters.docs import load_docs
from picocontext.build.adapters.files import load_files
from picocontext.build.adapters.memory import load_memory
from picocontext.build.adapters.skills import load_skills
from picocontext.build.adapters.tools import load_tools
from picocontext.build.errors import ConfigError
from picocontext.build.ir import SourceTree

Adapter = Callable[[Path, str], SourceTree]

ADAPTERS: dict[str, Adapter] = {
    "tools": load_tools,
    "docs": load_docs,
    "skills": load_skills,
    "memory": load_memory,
    "files": load_files,
}


def load_source(path: Path, kind: str, source_id: str) -> SourceTree:
    try:
        adapter = ADAPTERS[kind]
    except KeyError:
        raise ConfigError(f"Unknown source kind {kind!r}; use one of {sorted(ADAPTERS)}.") from None
    return adapter(path, source_id)


__all__ = ["ADAPTERS", "Adapter", "load_source"]
