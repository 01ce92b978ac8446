"""The wheel carries the run-time data: every fixture, corpus and manifest file under
resources/ is matched by the package-data globs of ``picocontext_diagnostics.resources``
(setup.py maps that package to resources/), so a non-editable install finds them."""

from __future__ import annotations

import glob
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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
