"""Extract the Python standard library's own docstrings into a markdown folder: a corpus that
nobody here wrote and that is always available offline (the benchmarks' source).

One file per public top-level function or class (``<module>/<module>.<name>.md``, with the
signature and the docstring; a class lists its public methods), plus a ``<module>.module.md``
overview when the module has a docstring. Sources are parsed with :mod:`ast`, never
imported, so extraction has no side effects. Qualified file names keep every id unique for
the reference builder too, whose docs adapter ids files by their stem alone.

Run alone: ``python -m picocontext_diagnostics.bench.stdlib_docs OUT [--methods] [MODULE...]``.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

# Modules a user of Python asks about every day (the navigation benchmark's corpus).
NAV_MODULES = (
    "argparse",
    "base64",
    "bisect",
    "calendar",
    "collections",
    "contextlib",
    "csv",
    "datetime",
    "difflib",
    "fnmatch",
    "functools",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "inspect",
    "itertools",
    "json",
    "logging",
    "operator",
    "os",
    "pathlib",
    "pickle",
    "random",
    "re",
    "secrets",
    "shlex",
    "shutil",
    "statistics",
    "string",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "time",
    "urllib.parse",
    "uuid",
    "zipfile",
)

# More modules for the >= 1,000-document build benchmark (with methods as their own files).
BUILD_EXTRA = (
    "email.message",
    "email.utils",
    "ftplib",
    "http.client",
    "http.cookies",
    "imaplib",
    "ipaddress",
    "mailbox",
    "smtplib",
    "socket",
    "ssl",
    "configparser",
    "decimal",
    "fractions",
    "typing",
    "enum",
    "dataclasses",
    "unittest.case",
    "asyncio.events",
    "asyncio.tasks",
    "asyncio.streams",
    "xml.dom.minidom",
    "pydoc",
    "pdb",
    "trace",
    "zipfile",
    "locale",
    "gettext",
    "codecs",
    "io",
    "optparse",
    "turtle",
    "ast",
    "dis",
    "tokenize",
    "sqlite3",
    "wave",
    "sched",
    "queue",
    "selectors",
)


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, qual: str) -> str:
    if isinstance(node, ast.ClassDef):
        bases = ", ".join(ast.unparse(b) for b in node.bases)
        return f"class {qual}({bases})" if bases else f"class {qual}"
    return f"{qual}({ast.unparse(node.args)})"


def _doc_file(sig: str, qual: str, doc: str) -> str:
    return f"# {qual}\n\n```\n{sig}\n```\n\n{doc.strip()}\n"


def _source_of(name: str) -> Path | None:
    """The module's .py file; frozen modules (``os`` since 3.11) are found in the stdlib."""
    spec = importlib.util.find_spec(name)
    origin = spec.origin if spec else None
    if origin and origin.endswith(".py"):
        return Path(origin)
    base = Path(sysconfig.get_paths()["stdlib"]) / name.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def module_docs(name: str, methods: bool = False) -> dict[str, str]:
    """relative path -> markdown for one module ({} when it has no Python source)."""
    origin = _source_of(name)
    if origin is None:
        return {}
    tree = ast.parse(origin.read_text(encoding="utf-8"))
    folder = name
    out: dict[str, str] = {}
    mod_doc = ast.get_docstring(tree)
    if mod_doc:
        out[f"{folder}/{name}.module.md"] = f"# {name}\n\n{mod_doc.strip()}\n"
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node)
        qual = f"{name}.{node.name}"
        if isinstance(node, ast.ClassDef):
            members = [
                m
                for m in node.body
                if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)
                and not m.name.startswith("_")
                and ast.get_docstring(m)
            ]
            if members:
                lines = [
                    f"- `{m.name}`: {(ast.get_docstring(m) or '').strip().splitlines()[0]}"
                    for m in members
                ]
                doc = (doc or "") + "\n\nMethods:\n\n" + "\n".join(lines)
            if methods:
                for m in members:
                    mq = f"{qual}.{m.name}"
                    out[f"{folder}/{mq}.md"] = _doc_file(
                        _signature(m, mq), mq, ast.get_docstring(m) or ""
                    )
        if doc and doc.strip():
            out[f"{folder}/{qual}.md"] = _doc_file(_signature(node, qual), qual, doc)
    return out


def write_corpus(out: Path, modules: Sequence[str], methods: bool = False) -> int:
    """Write the corpus under ``out``; returns the number of documents."""
    n = 0
    for name in dict.fromkeys(modules):
        for rel, text in module_docs(name, methods).items():
            path = out / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            n += 1
    return n


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("out", type=Path)
    p.add_argument("--methods", action="store_true", help="one file per public method too")
    p.add_argument("modules", nargs="*", default=list(NAV_MODULES))
    args = p.parse_args(argv)
    n = write_corpus(args.out, args.modules, args.methods)
    sys.stdout.write(f"wrote {n} documents under {args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
