"""``tools``: a JSON file of tool schemas, grouped by namespace.

Accepted shapes: a list of ``{name, description, parameters}`` (each possibly wrapped in
``{"function": {...}}``), ``{"tools": [...]}``, or ``{name: schema}``. The namespace is the
part of the name before the first ``.``, ``/``, ``:`` or ``__``. Leaf ids keep the tool's own
name (lowercased), so ``x.y`` and ``x_y`` stay distinct; anything that still collides is
suffixed by the registry.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from picocontext.build.adapters._common import ROOT_ID, read_text
from picocontext.build.errors import SourceError
from picocontext.build.ir import IdRegistry, SourceNode, SourceTree, humanize, slug

_NS = re.compile(r"\.|/|:|__")


def _entries(data: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(data, dict) and isinstance(data.get("tools"), list):
        data = data["tools"]
    out: list[dict[str, Any]] = []
    if isinstance(data, list):
        for i, item in enumerate(data):
            if not isinstance(item, dict):
                raise SourceError(f"{where}: tool #{i} is not an object")
            inner = item.get("function")
            fn: dict[str, Any] = inner if isinstance(inner, dict) else item
            name = fn.get("name")
            if not isinstance(name, str) or not name.strip():
                raise SourceError(f"{where}: tool #{i} has no 'name'")
            out.append({**fn, "name": name.strip()})
    elif isinstance(data, dict):
        for name, schema in data.items():
            if not isinstance(schema, dict):
                raise SourceError(f"{where}: tool {name!r} must map to an object")
            out.append({**schema, "name": name})
    else:
        raise SourceError(
            f"{where}: expected a list of tools, {{'tools': [...]}} or {{name: schema}}"
        )
    return out


def load_tools(path: Path, source_id: str) -> SourceTree:
    if not path.is_file():
        raise SourceError(f"tools source {path} must be a JSON file")
    try:
        data = json.loads(read_text(path))
    except ValueError as exc:
        raise SourceError(f"{path}: not valid JSON ({exc})") from exc
    tools = _entries(data, str(path))
    if not tools:
        raise SourceError(f"{path}: no tools found")
    groups: dict[str, list[dict[str, Any]]] = {}
    for tool in tools:
        parts = _NS.split(tool["name"], maxsplit=1)
        ns = parts[0] if len(parts) == 2 and parts[0] else ""
        groups.setdefault(ns, []).append(tool)
    ids = IdRegistry((ROOT_ID,))
    root = SourceNode(id=ROOT_ID, title=f"{source_id} tools", facets={"kind": "tools"})
    flat = len(groups) == 1 and "" in groups
    for ns in sorted(groups, key=lambda n: (n == "", n)):
        if flat or not ns:
            parent = root
        else:
            parent = SourceNode(
                id=ids.claim(slug(ns) + "/"),
                title=ns,
                facets={"kind": "tool-group", "namespace": ns},
                meta={"namespace": ns},
            )
            root.children.append(parent)
        for tool in sorted(groups[ns], key=lambda t: str(t["name"])):
            name = str(tool["name"])
            desc = tool.get("description")
            hint = desc.strip() if isinstance(desc, str) else ""
            pieces = [p for p in re.split(r"[._/:\-]+|__", name) if p]
            parent.children.append(
                SourceNode(
                    id=ids.claim(slug(name)),
                    title=name,
                    content=json.dumps(tool, indent=2, sort_keys=True, ensure_ascii=False),
                    format="json",
                    hint=hint,
                    keywords=[humanize(p).lower() for p in pieces],
                    facets={"kind": "tool", "namespace": ns or "(none)"},
                    meta={"name": name},
                    origin=f"{path.name}#{name}",
                )
            )
    return SourceTree(source_id=source_id, kind="tools", root=root)
