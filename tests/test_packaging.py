"""The package layout holds: core imports without the optional extras, layering is kept."""

from __future__ import annotations

import glob
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


_BLOCK_EXTRAS = """
import importlib.abc, sys
class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'mlx', 'mlx_lm', 'PySide6', 'huggingface_hub', 'tokenizers',
                                  'transformers', 'llguidance', 'xgrammar', 'outlines_core'}:
            raise ImportError(f'{name} is not installed (simulated venv without extras)')
        return None
sys.meta_path.insert(0, _Absent())
"""


def test_core_works_in_an_environment_without_the_mlx_and_gui_extras() -> None:
    # Simulate a venv without the extras: any import of an extra's module fails.
    code = _BLOCK_EXTRAS + (
        "import pkgutil, picocontext\n"
        "names = [m.name for m in pkgutil.walk_packages(picocontext.__path__, 'picocontext.')]\n"
        "import importlib\n"
        "for name in names:\n"
        "    if not name.endswith('.__main__'):\n"
        "        importlib.import_module(name)\n"
        "print(len(names))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_core_imports_without_mlx_or_qt() -> None:
    code = (
        "import sys, picocontext, picocontext.models;"
        "bad = [m for m in ('mlx', 'mlx_lm', 'PySide6', 'huggingface_hub') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_core_never_imports_diagnostics_playground_or_qt() -> None:
    offenders = []
    for path in (ROOT / "core").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for banned in ("picocontext_diagnostics", "picocontext_playground", "PySide6"):
            if f"import {banned}" in text or f"from {banned}" in text:
                offenders.append(f"{path.relative_to(ROOT)}: {banned}")
    assert offenders == []


def test_only_playground_imports_qt() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for folder in ("core", "diagnostics")
        for p in (ROOT / folder).rglob("*.py")
        if "PySide6" in p.read_text(encoding="utf-8")
    ]
    assert offenders == []


# The wheel carries the run-time data: every fixture, corpus and manifest file under resources/
# is matched by the package-data globs of ``picocontext_diagnostics.resources`` (setup.py maps
# that package to resources/), so a non-editable install finds them.
DATA = "picocontext_diagnostics.resources"


def test_every_runtime_data_file_is_shipped() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"][DATA]
    resources = ROOT / "resources"
    shipped: set[str] = set()
    for pattern in patterns:
        shipped.update(glob.glob(pattern, root_dir=resources, recursive=True))
    needed = {
        str(p.relative_to(resources))
        for folder in ("fixtures", "corpora", "manifests", "schemas")
        for p in (resources / folder).rglob("*")
        if p.is_file()
    }
    assert needed, "resources/ is empty?"
    assert sorted(needed - shipped) == []
    assert f'DATA = "{DATA}"' in (ROOT / "setup.py").read_text(encoding="utf-8")


PACKAGES = {
    "core": "picocontext",
    "diagnostics": "picocontext_diagnostics",
    "playground": "picocontext_playground",
}


def test_each_code_folder_holds_one_package_named_like_its_import() -> None:
    for folder, package in PACKAGES.items():
        children = sorted(p.name for p in (ROOT / folder).iterdir() if p.name != "__pycache__")
        assert children == [package], f"{folder}/ holds {children}"
        assert (ROOT / folder / package / "__init__.py").is_file()


def test_every_first_party_import_resolves_to_a_folder_of_the_same_name() -> None:
    import ast

    roots = {package: ROOT / folder for folder, package in PACKAGES.items()}
    missing = []
    for path in sorted(ROOT.glob("*/**/*.py")):
        # build/ and dist/ are setuptools output (``pip wheel`` above writes build/lib and never
        # deletes a module that has since moved), not sources.
        if ".venv" in path.parts or path.relative_to(ROOT).parts[0] in {"build", "dist"}:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                top = name.split(".")[0]
                if top not in roots:
                    continue
                target = roots[top].joinpath(*name.split("."))
                if not (target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()):
                    missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert missing == []


def test_the_wheel_ships_every_module_and_data_file(tmp_path: Path) -> None:
    # A wheel built from this checkout holds each package's modules under its import name
    # and resources/ under picocontext_diagnostics/resources.
    import zipfile

    command = [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q"]
    built = subprocess.run(
        [*command, "--no-build-isolation", "-w", str(tmp_path)], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {
        str(p.relative_to(ROOT / folder))
        for folder in PACKAGES
        for p in (ROOT / folder).rglob("*")
        if p.is_file() and p.suffix in {".py", ".typed"} and "__pycache__" not in p.parts
    }
    wanted |= {
        "picocontext_diagnostics/resources/" + str(p.relative_to(ROOT / "resources"))
        for p in (ROOT / "resources").rglob("*")
        if p.is_file()
    }
    assert sorted(wanted - names) == []


# The facades diagnostics and the playground may import core names from: the root package and
# its subpackages' __init__ modules, plus the command-plug-in API. A name must be public
# (in that facade's __all__); deep modules and private names are core's own business.
CORE_FACADES = (
    "picocontext",
    "picocontext.build",
    "picocontext.cli",
    "picocontext.distill",
    "picocontext.manifest",
    "picocontext.models",
    "picocontext.policies",
)


def _core_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "picocontext":
                found.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "picocontext":
                    found.append((node.lineno, alias.name, []))
    return found


def test_diagnostics_and_playground_use_only_public_core_facades() -> None:
    import importlib

    public = {name: set(importlib.import_module(name).__all__) for name in CORE_FACADES}
    offenders = []
    for folder in ("diagnostics", "playground"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, module, names in _core_imports(path):
                where = f"{path.relative_to(ROOT)}:{line}: {module}"
                if module not in public:
                    offenders.append(f"{where} is not a facade")
                    continue
                hidden = [n for n in names if n != "*" and n not in public[module]]
                if hidden:
                    offenders.append(f"{where}: {', '.join(hidden)} not in its __all__")
    assert offenders == []
