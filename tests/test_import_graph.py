"""No import circles between the modules of the three packages.

A circle is hidden, not broken, by a lazy import: the two modules still need each other, a
reader cannot understand one without the other, and the import order decides whether a name
exists yet. So the graph is read from the source with ``ast``, not from ``sys.modules``, and
counts every import wherever it stands.

The rules, chosen so that an edge means "this module needs that module to be loaded":

- Every ``import`` and ``from … import`` is an edge, at module level, inside a function, a
  class, a ``try`` or under ``if TYPE_CHECKING:``; so is ``importlib.import_module("literal")``.
  Relative imports are resolved against the importing module's package.
- ``from a.b import c`` imports the submodule ``a.b.c`` when that module exists, otherwise the
  name ``c`` from ``a.b`` (its ``__init__``). ``import a.b.c`` imports ``a.b.c``.
- Python runs ``a/__init__.py`` before ``a.b``, but that implicit step is not an edge: counted,
  it would make every package that re-exports a child a circle with that child. So a
  package's ``__init__`` importing its own submodules is an ordinary, one-way edge and never a
  circle by itself.
- A module that imports a name from a package's ``__init__`` (``from picocontext import
  Record``, ``from . import name``) depends on that ``__init__`` and on everything it
  re-exports. When that leads back to the module, it is a circle and is reported: import the
  name from the module that defines it.
- Imports of anything outside the three packages are not edges. A name looked up through a
  string map (a registry entry, a facade's lazy ``__getattr__``) is not seen; those lookups
  are by design late-bound plug-ins.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    ROOT / "core" / "picocontext",
    ROOT / "diagnostics" / "picocontext_diagnostics",
    ROOT / "playground" / "picocontext_playground",
)

# Circles left in place, each as the import that closes it: (importer, imported), and why
# it stays. An entry whose two modules no longer need each other fails the test, so the list
# only shrinks.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Edge:
    """One import: who imports what, and where, so a failure points at the line."""

    source: str
    target: str
    path: Path
    line: int

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _modules() -> dict[str, Path]:
    """Every module of the three packages by dotted name (a package by its ``__init__``)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted(package.rglob("*.py")):
            parts = path.relative_to(package.parent).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _base(module: str, path: Path, level: int) -> str:
    """The package a relative import of ``level`` dots starts from."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return package


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is one of our modules, or None for a foreign one."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _from_targets(
    node: ast.ImportFrom, module: str, path: Path, modules: dict[str, Path]
) -> set[str]:
    """``from origin import a, b``: each name that is a submodule, else ``origin`` itself."""
    origin = node.module or ""
    if node.level:
        base = _base(module, path, node.level)
        origin = f"{base}.{origin}" if origin else base
    found: set[str] = set()
    for alias in node.names:
        if f"{origin}.{alias.name}" in modules:
            found.add(f"{origin}.{alias.name}")
        elif (target := _known(origin, modules)) is not None:
            found.add(target)
    return found


def _literal_import_module(node: ast.Call) -> str | None:
    """The module ``importlib.import_module("literal")`` names, if the call is one."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name != "import_module" or not node.args:
        return None
    first = node.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def _targets(node: ast.AST, module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules one AST node imports, resolved by the rules in the module docstring."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        return _from_targets(node, module, path, modules)
    elif isinstance(node, ast.Call) and (literal := _literal_import_module(node)) is not None:
        names = [literal]
    return {found for name in names if (found := _known(name, modules)) is not None}


def _edges() -> list[Edge]:
    """Every import between our modules, one edge per import site."""
    modules = _modules()
    edges: list[Edge] = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            for target in _targets(node, module, path, modules):
                if target != module:
                    edges.append(Edge(module, target, path, getattr(node, "lineno", 0)))
    return edges


def _graph(edges: list[Edge]) -> dict[str, dict[str, Edge]]:
    """Adjacency with the first import site of each (importer, imported) pair."""
    graph: dict[str, dict[str, Edge]] = {}
    for edge in sorted(edges, key=lambda e: (e.source, e.target, e.line)):
        graph.setdefault(edge.source, {}).setdefault(edge.target, edge)
        graph.setdefault(edge.target, {})
    return graph


def _components(graph: dict[str, dict[str, Edge]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def _shortest_cycle(graph: dict[str, dict[str, Edge]], component: list[str]) -> list[Edge]:
    """One shortest circle through the component's first module, as the imports that form it."""
    start, members = component[0], set(component)
    came: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for target, edge in graph[node].items():
                if target == start:
                    path = [edge]
                    while path[0].source != start:
                        path.insert(0, came[path[0].source])
                    return path
                if target in members and target not in came:
                    came[target] = edge
                    following.append(target)
        frontier = following
    raise AssertionError(f"no circle in component {component}")  # pragma: no cover


def _describe(cycle: list[Edge]) -> str:
    names = " -> ".join([cycle[0].source, *(edge.target for edge in cycle)])
    sites = "\n".join(f"    {e.source} imports {e.target} at {e.where()}" for e in cycle)
    return f"{names}\n{sites}"


SAMPLE = """
from typing import TYPE_CHECKING
from . import errors, Manifest
from ..records import Record
import picocontext.models.scripted
if TYPE_CHECKING:
    from picocontext.backend import ModelInput
def late():
    from picocontext_playground import window
    importlib.import_module("picocontext.cancel")
    import numpy
"""


def test_the_reader_follows_every_kind_of_import() -> None:
    """The rules of the module docstring, on a sample placed in ``picocontext.manifest.loader``:
    relative, lazy, ``TYPE_CHECKING``, submodule-or-name, ``import_module``, foreign."""
    modules = _modules()
    path = modules["picocontext.manifest.loader"]
    found = {
        target
        for node in ast.walk(ast.parse(SAMPLE))
        for target in _targets(node, "picocontext.manifest.loader", path, modules)
    }
    assert found == {
        "picocontext.manifest.errors",  # a submodule, by ``from . import``
        "picocontext.manifest",  # a name from the package's __init__
        "picocontext.records",
        "picocontext.models.scripted",
        "picocontext.backend",
        "picocontext_playground.window",
        "picocontext.cancel",
    }


def test_the_graph_covers_the_three_packages() -> None:
    """A guard on the scan itself: every package is read, with known one-way imports."""
    pairs = {(edge.source, edge.target) for edge in _edges()}
    assert ("picocontext.session", "picocontext.records") in pairs
    assert ("picocontext_playground.window", "picocontext_playground.policy_column") in pairs
    assert any(source.startswith("picocontext_diagnostics.") for source, _ in pairs)


def test_a_circle_is_found_and_named() -> None:
    """A guard on the search: a three-module circle beside a one-way import is the one found,
    named by its import sites."""
    here = Path(__file__)
    pairs = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
    graph = _graph([Edge(x, y, here, n) for n, (x, y) in enumerate(pairs, start=1)])
    components = _components(graph)
    assert components == [["a", "b", "c"]]
    described = _describe(_shortest_cycle(graph, components[0]))
    assert described.splitlines()[0] == "a -> b -> c -> a"
    assert "c imports a at tests/test_import_graph.py:3" in described


def test_no_import_circles() -> None:
    """Every dependency between our modules runs one way (allowed circles aside)."""
    edges = _edges()
    circular = {
        (a, b) for component in _components(_graph(edges)) for a in component for b in component
    }
    stale = sorted(pair for pair in ALLOWED if pair not in circular)
    assert stale == [], f"these allowed imports close no circle now; drop them: {stale}"
    graph = _graph([edge for edge in edges if (edge.source, edge.target) not in ALLOWED])
    cycles = [_describe(_shortest_cycle(graph, c)) for c in _components(graph)]
    message = "import circles (make each dependency run one way):\n" + "\n".join(cycles)
    assert cycles == [], message
