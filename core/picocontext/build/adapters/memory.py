"""``memory``: a folder (not recursive) of one-fact markdown files; ``MEMORY.md`` is skipped.

Frontmatter ``name``, ``description``, ``metadata.type``, ``metadata.namespace``. Files are
grouped by namespace (given, or inferred from the type) and then by type; ids are
``namespace/type/name``, so equal names in different groups never collide.
"""

from __future__ import annotations

from pathlib import Path

from picocontext.build.adapters._common import ROOT_ID, SourceScan, require_dir
from picocontext.build.errors import SourceError
from picocontext.build.frontmatter import as_text, first_heading, flat_meta, split_frontmatter
from picocontext.build.ir import IdRegistry, SourceNode, SourceTree, humanize, slug

_NAMESPACE_OF_TYPE = {
    **dict.fromkeys(("self", "agent", "identity", "persona"), "self"),
    **dict.fromkeys(("operational", "session", "scratch", "task"), "operational"),
}


def _meta_field(front: dict[str, object], key: str) -> str:
    meta = front.get("metadata")
    if isinstance(meta, dict):
        value = meta.get(key)
        if isinstance(value, str):
            return value.strip()
    value = front.get(key)
    return value.strip() if isinstance(value, str) else ""


def load_memory(path: Path, source_id: str) -> SourceTree:
    require_dir(path, "memory")
    # Not recursive: sub-folders are left out quietly, as they always were.
    scan = SourceScan(path, ignore=Path.is_dir)
    files = sorted(p for p in scan.entries(path) if p.suffix == ".md" and p.name != "MEMORY.md")
    if not files:
        raise SourceError(f"memory source {path} has no fact files (*.md other than MEMORY.md)")
    facts: list[tuple[str, str, SourceNode]] = []
    for f in files:
        text = scan.read_or_skip(f)
        if text is None:
            continue
        front, body = split_frontmatter(text, str(f))
        mtype = _meta_field(dict(front), "type") or "note"
        ns = _meta_field(dict(front), "namespace") or _NAMESPACE_OF_TYPE.get(
            mtype.lower(), "knowledge"
        )
        name = as_text(front.get("name")) or first_heading(body) or humanize(f.stem)
        node = SourceNode(
            id="",
            title=name.strip(),
            content=body,
            hint=" ".join(as_text(front.get("description")).split()),
            facets={"kind": "memory", "namespace": ns, "type": mtype},
            meta=flat_meta(front),
            origin=f.name,
        )
        facts.append((ns, mtype, node))
    ids = IdRegistry((ROOT_ID,))
    root = SourceNode(id=ROOT_ID, title=f"{source_id} memory", facets={"kind": "memory"})
    namespaces = sorted({ns for ns, _, _ in facts})
    for ns in namespaces:
        if len(namespaces) > 1:
            ns_node = SourceNode(
                id=ids.claim(slug(ns) + "/"),
                title=humanize(ns),
                facets={"kind": "memory-namespace", "namespace": ns},
                meta={"namespace": ns},
            )
            root.children.append(ns_node)
        else:
            ns_node = root
        for mtype in sorted({t for n, t, _ in facts if n == ns}):
            type_node = SourceNode(
                id=ids.claim(f"{slug(ns)}/{slug(mtype)}/"),
                title=humanize(mtype),
                facets={"kind": "memory-type", "namespace": ns, "type": mtype},
                meta={"namespace": ns, "type": mtype},
            )
            ns_node.children.append(type_node)
            for n, t, node in facts:
                if n == ns and t == mtype:
                    node.id = ids.claim(f"{slug(ns)}/{slug(mtype)}/{slug(node.title)}")
                    type_node.children.append(node)
    return SourceTree(source_id=source_id, kind="memory", root=root, skipped=scan.skipped)
