"""``files``: any folder of markdown, text, reStructuredText and Python sources.

Structure is inferred where the source has none (the peer's unbuilt "Phase 3"):

* a long markdown/rst file with two or more top-level sections becomes a branch of section
  leaves (facet ``section``);
* a Python module becomes a branch of its docstrings: the module's, then one leaf per public
  function and class (signature plus docstring);
* a folder with more entries than ``max_width`` is clustered into topical groups
  (:mod:`picocontext.build.cluster`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

from picocontext.build.adapters._common import (
    ROOT_ID,
    SourceScan,
    folder_node,
    read_text,
    require_dir,
)
from picocontext.build.cluster import group_children
from picocontext.build.errors import SourceError
from picocontext.build.frontmatter import (
    as_list,
    as_text,
    first_heading,
    flat_meta,
    split_frontmatter,
)
from picocontext.build.ir import IdRegistry, SourceNode, SourceTree, humanize, path_id, slug
from picocontext.build.signals import IdfSnapshot, Signals, node_text

TEXT_SUFFIXES = {".md": "md", ".markdown": "md", ".mdx": "md", ".txt": "txt", ".rst": "rst"}
CODE_SUFFIXES = {".py": "py"}
SPLIT_MIN_CHARS = 1000
DEFAULT_MAX_WIDTH = 12

_FENCE = re.compile(r"^(```|~~~)")
_MD_HEAD = re.compile(r"^(#{1,3})\s+(.+?)\s*#*\s*$")
_RST_RULE = re.compile(r"^([=\-~^\"'`#*+])\1{2,}\s*$")


def markdown_sections(body: str) -> list[tuple[str, str]]:
    """(heading, text) per top-level section; the preamble before the first one is kept
    with it. Returns [] when there are fewer than two sections."""
    lines = body.splitlines()
    heads: list[tuple[int, int, str]] = []
    fenced = False
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else _MD_HEAD.match(line)
        if m:
            heads.append((i, len(m.group(1)), m.group(2)))
    for level in (1, 2, 3):
        at = [(i, t) for i, lv, t in heads if lv == level]
        if len(at) >= 2:
            break
    else:
        return []
    return _cut_sections(lines, at)


def _cut_sections(lines: list[str], at: list[tuple[int, str]]) -> list[tuple[str, str]]:
    """Split ``lines`` at the heading lines ``at`` (line index, title); the first section also
    keeps whatever precedes its heading."""
    out = []
    for k, (i, title) in enumerate(at):
        start = 0 if k == 0 else i
        end = at[k + 1][0] if k + 1 < len(at) else len(lines)
        out.append((title, "\n".join(lines[start:end]).strip()))
    return out


def rst_sections(body: str) -> list[tuple[str, str]]:
    lines = body.splitlines()
    marks: list[tuple[int, str, str]] = []
    for i in range(len(lines) - 1):
        title, rule = lines[i].strip(), lines[i + 1]
        m = _RST_RULE.match(rule)
        if title and m and len(rule.strip()) >= len(title) and not _RST_RULE.match(lines[i]):
            marks.append((i, m.group(1), title))
    if not marks:
        return []
    chars = [c for _, c, _ in marks]
    for c in dict.fromkeys(chars):
        at = [(i, t) for i, ch, t in marks if ch == c]
        if len(at) >= 2:
            break
    else:
        return []
    return _cut_sections(lines, at)


def rst_title(body: str) -> str | None:
    """The first underlined (or over- and underlined) heading of an rst document."""
    lines = body.splitlines()
    for i in range(len(lines) - 1):
        title, rule = lines[i].strip(), lines[i + 1]
        if title and _RST_RULE.match(rule) and not _RST_RULE.match(lines[i]):
            return title
    return None


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str:
    if isinstance(node, ast.ClassDef):
        bases = ", ".join(ast.unparse(b) for b in node.bases)
        return f"class {node.name}({bases})" if bases else f"class {node.name}"
    return f"def {node.name}({ast.unparse(node.args)})"


def python_docs(source: str, where: str) -> tuple[str, list[tuple[str, str]]]:
    """(module docstring, [(name, signature + docstring)]) for public top-level defs."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        raise SourceError(f"{where}: cannot parse Python ({exc})") from exc
    items: list[tuple[str, str]] = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node) or ""
        text = _signature(node)
        if isinstance(node, ast.ClassDef):
            methods = [
                f"  {_signature(m)}: {(ast.get_docstring(m) or '').splitlines()[0]}"
                for m in node.body
                if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)
                and not m.name.startswith("_")
                and ast.get_docstring(m)
            ]
            if methods:
                doc = doc + "\n\nMethods:\n" + "\n".join(methods)
        if doc.strip():
            items.append((node.name, f"{text}\n\n{doc}".strip()))
    return ast.get_docstring(tree) or "", items


def _text_file(
    text: str, entry: Path, parts: list[str], ids: IdRegistry, top: str
) -> SourceNode | None:
    ftype = TEXT_SUFFIXES[entry.suffix.lower()]
    front, body = split_frontmatter(text, str(entry)) if ftype == "md" else ({}, text)
    if not body.strip():
        return None
    stem = entry.name.rsplit(".", 1)[0]
    title = as_text(front.get("title")) or (first_heading(body) if ftype == "md" else None)
    if title is None and ftype == "rst":
        title = rst_title(body)
    facets = {"kind": "file", "folder": top, "filetype": ftype}
    node = SourceNode(
        id=ids.claim(path_id([*parts[:-1], stem])),
        title=(title or humanize(stem)).strip(),
        content=body,
        format=ftype,
        hint=as_text(front.get("description")),
        keywords=as_list(front.get("keywords") or front.get("tags")),
        facets=facets,
        meta=flat_meta(front),
        origin="/".join(parts),
    )
    if len(body) < SPLIT_MIN_CHARS or ftype == "txt":
        return node
    sections = markdown_sections(body) if ftype == "md" else rst_sections(body)
    if len(sections) < 2:
        return node
    node.id = ids.claim(node.id + "/")
    node.content = ""
    for title_s, text_s in sections:
        node.children.append(
            SourceNode(
                id=ids.claim(f"{node.id}{slug(title_s)}"),
                title=title_s,
                content=text_s,
                format=ftype,
                facets={**facets, "section": title_s[:60]},
                origin=f"{'/'.join(parts)}#{slug(title_s)}",
            )
        )
    return node


def _python_file(
    text: str, entry: Path, parts: list[str], ids: IdRegistry, top: str
) -> SourceNode | None:
    module_doc, items = python_docs(text, str(entry))
    stem = entry.name[:-3]
    facets = {"kind": "file", "folder": top, "filetype": "py"}
    mod_title = stem if stem != "__init__" else (parts[-2] if len(parts) > 1 else "package")
    if not items:
        if not module_doc.strip():
            return None
        return SourceNode(
            id=ids.claim(path_id([*parts[:-1], entry.name])),
            title=mod_title,
            content=module_doc,
            format="txt",
            facets=facets,
            origin="/".join(parts),
        )
    branch = SourceNode(
        id=ids.claim(path_id([*parts[:-1], entry.name]) + "/"),
        title=mod_title,
        hint=module_doc.strip().split("\n\n")[0][:300],
        facets={**facets, "kind": "module"},
        origin="/".join(parts),
    )
    if module_doc.strip():
        branch.children.append(
            SourceNode(
                id=ids.claim(branch.id + "@module"),
                title=f"{mod_title} (module overview)",
                content=module_doc,
                format="txt",
                facets={**facets, "section": "module"},
                origin="/".join(parts),
            )
        )
    for name, text in items:
        branch.children.append(
            SourceNode(
                id=ids.claim(branch.id + slug(name)),
                title=f"{mod_title}.{name}",
                content=text,
                format="txt",
                facets={**facets, "section": name},
                origin=f"{'/'.join(parts)}#{name}",
            )
        )
    return branch


def load_files(path: Path, source_id: str, max_width: int = DEFAULT_MAX_WIDTH) -> SourceTree:
    ids = IdRegistry((ROOT_ID,))
    root = SourceNode(id=ROOT_ID, title=source_id, facets={"kind": "files"})
    warnings: list[str] = []
    scan: SourceScan | None = None
    if path.is_file():
        folder_entries: list[tuple[Path, SourceNode, list[str]]] = []
        single = _load_entry(read_text, path, [path.name], ids, ".", warnings)
        if single is None:
            raise SourceError(f"{path}: no readable text or docstrings")
        root.children.append(single)
    else:
        require_dir(path, "files")
        scan = SourceScan(path)
        folder_entries = [(path, root, [])]
    folders: list[SourceNode] = []
    while scan is not None and folder_entries:
        folder, node, rel = folder_entries.pop()
        subdirs = []
        for entry in scan.entries(folder):
            parts = [*rel, entry.name]
            top = parts[0] if len(parts) > 1 else "."
            if scan.is_dir(entry):
                child = folder_node(ids, parts, "folder")
                node.children.append(child)
                folders.append(child)
                subdirs.append((entry, child, parts))
                continue
            loaded = _load_entry(scan.read, entry, parts, ids, top, warnings)
            if loaded is not None:
                node.children.append(loaded)
        folder_entries.extend(reversed(subdirs))
    _prune_empty(root)
    if not root.children:
        raise SourceError(f"files source {path} has no readable .md/.txt/.rst/.py content")
    leaves = [n for n in root.walk() if n.is_leaf]
    signals = Signals(IdfSnapshot.from_texts(node_text(n) for n in leaves))
    for node in list(root.walk()):
        if len(node.children) > max_width:
            group_children(node, max_width, signals, ids)
    skipped = scan.skipped if scan is not None else []
    return SourceTree(
        source_id=source_id, kind="files", root=root, warnings=warnings, skipped=skipped
    )


def _load_entry(
    read: Callable[[Path], str],
    entry: Path,
    parts: list[str],
    ids: IdRegistry,
    top: str,
    warnings: list[str],
) -> SourceNode | None:
    suffix = entry.suffix.lower()
    try:
        if suffix in TEXT_SUFFIXES:
            return _text_file(read(entry), entry, parts, ids, top)
        if suffix in CODE_SUFFIXES:
            return _python_file(read(entry), entry, parts, ids, top)
    except SourceError as exc:
        warnings.append(f"skipped {'/'.join(parts)}: {exc.message}")
    return None


def _prune_empty(root: SourceNode) -> None:
    order = [n for n in root.walk() if not n.is_leaf or n is root]
    for node in reversed(order):
        node.children = [
            c for c in node.children if not (c.facets.get("kind") == "folder" and not c.children)
        ]
