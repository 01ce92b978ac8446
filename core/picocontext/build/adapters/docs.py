"""``docs``: a directory tree of markdown files, mirrored as branches (folders) and leaves.

Ids are the relative path: ``guide/install`` for ``guide/install.md`` and ``guide/`` for the
folder, so ``a/index.md`` and ``b/index.md`` both survive and a folder ``a/`` never collides
with ``a.md`` (B1). Titles come from frontmatter ``title``, else the first H1, else the file
name; frontmatter ``description`` is the hint, and every frontmatter field enters the
incremental key.
"""

from __future__ import annotations

from pathlib import Path

from picocontext.build.adapters._common import (
    ROOT_ID,
    SourceScan,
    folder_node,
    require_dir,
)
from picocontext.build.errors import SourceError
from picocontext.build.frontmatter import (
    as_list,
    as_text,
    first_heading,
    flat_meta,
    split_frontmatter,
)
from picocontext.build.ir import IdRegistry, SourceNode, SourceTree, humanize, path_id

DOC_SUFFIXES = (".md", ".mdx", ".markdown")


def doc_leaf(
    scan: SourceScan, path: Path, rel: list[str], ids: IdRegistry, top: str
) -> SourceNode | None:
    text = scan.read_or_skip(path)
    if text is None:
        return None
    front, body = split_frontmatter(text, str(path))
    stem = path.name.rsplit(".", 1)[0]
    title = as_text(front.get("title")) or first_heading(body) or humanize(stem)
    return SourceNode(
        id=ids.claim(path_id([*rel[:-1], stem])),
        title=title.strip(),
        content=body,
        format="md",
        hint=as_text(front.get("description")),
        keywords=as_list(front.get("keywords") or front.get("tags")),
        facets={"kind": "doc", "folder": top, "filetype": path.suffix.lstrip(".").lower()},
        meta=flat_meta(front),
        origin="/".join(rel),
    )


def load_docs(path: Path, source_id: str) -> SourceTree:
    require_dir(path, "docs")
    scan = SourceScan(path)
    ids = IdRegistry((ROOT_ID,))
    root = SourceNode(id=ROOT_ID, title=source_id, facets={"kind": "docs"})
    # Iterative walk: (folder, node, relative parts)
    stack: list[tuple[Path, SourceNode, list[str]]] = [(path, root, [])]
    order: list[tuple[SourceNode, SourceNode]] = []
    while stack:
        folder, node, rel = stack.pop()
        pending_dirs: list[tuple[Path, SourceNode, list[str]]] = []
        for entry in scan.entries(folder):
            parts = [*rel, entry.name]
            top = parts[0] if len(parts) > 1 else "."
            if scan.is_dir(entry):
                child = folder_node(ids, parts, "doc-folder")
                node.children.append(child)
                order.append((node, child))
                pending_dirs.append((entry, child, parts))
            elif entry.suffix.lower() in DOC_SUFFIXES:
                leaf = doc_leaf(scan, entry, parts, ids, top)
                if leaf is not None:
                    node.children.append(leaf)
        stack.extend(reversed(pending_dirs))
    # Drop folders with no documents (deepest first, so emptiness propagates up).
    for parent, child in reversed(order):
        if not child.children:
            parent.children.remove(child)
    if not root.children:
        raise SourceError(f"docs source {path} has no {'/'.join(DOC_SUFFIXES)} files")
    return SourceTree(source_id=source_id, kind="docs", root=root, skipped=scan.skipped)
