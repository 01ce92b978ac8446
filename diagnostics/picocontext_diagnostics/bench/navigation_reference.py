"""The reference builder of the stdlib navigation bench (``scripts/bench.sh navigation``):
askfaro-progressive-context 0.5.1, installed, run on the same folder, its manifests loaded
leniently, and each case's target mapped to the node id either builder gives it.

The reference is installed with ``pip install --no-deps --target`` into the user cache the
first time (it is a zero-dependency wheel). If it cannot be installed, its rows say why.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import ValidationError

from picocontext.build import path_id
from picocontext.manifest import Manifest, NavCase
from picocontext_diagnostics.bench.stdlib_docs import NAV_MODULES

REFERENCE = "askfaro-progressive-context==0.5.1"


def reference_dir() -> Path:
    return Path(platformdirs.user_cache_dir("picocontext")) / "reference" / "askfaro-0.5.1"


def ensure_reference() -> tuple[Path | None, str]:
    target = reference_dir()
    if (target / "askfaro_progressive_context" / "cli.py").is_file():
        return target, "cached"
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target"]
    proc = subprocess.run(
        [*cmd, str(target), REFERENCE], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        return None, f"could not install {REFERENCE}: {proc.stderr.strip()[-300:]}"
    return target, "installed"


def run_reference_build(corpus: Path, out: Path, ref: Path) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(ref)}
    code = "import sys; from askfaro_progressive_context.cli import main; sys.exit(main())"
    args = ["build", str(corpus), "--kind", "docs", "--budgets", "4k,32k", "--fake"]
    args += ["--out", str(out), "--source-id", "stdlib"]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"reference build failed: {proc.stderr.strip()[-500:]}")
    return time.perf_counter() - t0, proc.stdout


def load_lenient(path: Path) -> tuple[Manifest, list[str]]:
    """Load a manifest; when the reference wrote lines over the schema limit (its B2) or
    duplicate child refs (its B1), clip/dedupe them so it can still be scored, and say so."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    notes: list[str] = []
    try:
        return Manifest.model_validate(data), notes
    except ValidationError:
        pass
    for node in [data["root"], *data["nodes"].values()]:
        for key in ("what", "when"):
            if isinstance(node.get(key), str) and len(node[key]) > 160:
                node[key] = node[key][:160]
                notes.append(f"clipped an over-long {key}")
        if isinstance(node.get("children"), list):
            seen = list(dict.fromkeys(node["children"]))
            if len(seen) != len(node["children"]):
                notes.append("dropped duplicate child refs")
            node["children"] = seen
    return Manifest.model_validate(data), sorted(set(notes))


def reference_slug(text: str) -> str:
    """The reference's slugify: lowercase, runs of non-alphanumerics become one ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "node"


def ours_target(qual: str, module: str) -> str:
    return path_id([module, qual])


def module_of(qual: str) -> str:
    for name in sorted(NAV_MODULES, key=len, reverse=True):
        if qual.startswith(name + "."):
            return name
    return qual.split(".")[0]


def cases_for(manifest: Manifest, raw: list[NavCase], mapper: str) -> tuple[list[NavCase], int]:
    out = []
    missing = 0
    for c in raw:
        if mapper == "ours":
            tid = ours_target(c.target, module_of(c.target))
        else:
            tid = reference_slug(c.target)
        if tid in manifest.nodes:
            out.append(NavCase(query=c.query, target=tid))
        else:
            missing += 1
    return out, missing
