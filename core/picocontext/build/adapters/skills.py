"""``skills``: markdown files (searched recursively) with frontmatter ``name``,
``description``, ``when``/``when_to_use``, ``category`` and ``keywords``.

With two or more categories each gets a tier-1 branch. The description is the hint; the
author's ``when`` stays a separate field (in ``meta``) instead of being glued onto the hint
with a newline, which broke the peer's llms.txt bullets (B16).
"""

from __future__ import annotations

from pathlib import Path

from picocontext.build.adapters._common import ROOT_ID, SourceScan, dot_name, require_dir
from picocontext.build.errors import SourceError
from picocontext.build.frontmatter import (
    as_list,
    as_text,
    first_heading,
    flat_meta,
    split_frontmatter,
)
from picocontext.build.ir import IdRegistry, SourceNode, SourceTree, humanize, slug


def load_skills(path: Path, source_id: str) -> SourceTree:
    require_dir(path, "skills")
    scan = SourceScan(path, ignore=dot_name)
    files = sorted(
        (p for p in scan.files if p.suffix == ".md"),
        key=lambda p: p.relative_to(path).as_posix(),
    )
    if not files:
        raise SourceError(f"skills source {path} has no .md files")
    parsed = []
    for f in files:
        text = scan.read_or_skip(f)
        if text is None:
            continue
        front, body = split_frontmatter(text, str(f))
        name = as_text(front.get("name")) or first_heading(body) or humanize(f.stem)
        category = as_text(front.get("category")).strip()
        parsed.append((f, front, body, name.strip(), category))
    categories = sorted({c for *_, c in parsed if c})
    ids = IdRegistry((ROOT_ID,))
    root = SourceNode(id=ROOT_ID, title=f"{source_id} skills", facets={"kind": "skills"})
    branches: dict[str, SourceNode] = {}
    if len(categories) >= 2:
        for cat in categories:
            branches[cat] = SourceNode(
                id=ids.claim(slug(cat) + "/"),
                title=humanize(cat),
                facets={"kind": "skill-category", "category": cat},
                meta={"category": cat},
            )
            root.children.append(branches[cat])
    for f, front, body, name, category in parsed:
        parent = branches.get(category, root)
        prefix = parent.id if parent is not root else ""
        when = as_text(front.get("when") or front.get("when_to_use"))
        meta = flat_meta(front)
        if when:
            meta["when"] = when
        parent.children.append(
            SourceNode(
                id=ids.claim(prefix + slug(name)),
                title=name,
                content=body,
                hint=" ".join(as_text(front.get("description")).split()),
                keywords=as_list(front.get("keywords")),
                facets={"kind": "skill", "category": category or "(none)"},
                meta=meta,
                origin=f.relative_to(path).as_posix(),
            )
        )
    return SourceTree(source_id=source_id, kind="skills", root=root, skipped=scan.skipped)
