"""``scripts/bench.sh manifest``: load + validate + 1,000 NavSession operations on a generated
10,000-node manifest, ours against the peer (askfaro-progressive-context from PyPI, installed
into a cached virtualenv) in one run, with the ratio per operation.

Both sides run the same op script in their own interpreter (a subprocess each, alternating
ours/peer run by run), so neither benefits from the other's warm caches or a quiet moment on a
shared machine. Times are the median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import venv
from pathlib import Path
from typing import Any

import platformdirs

PEER_PACKAGE = "askfaro-progressive-context"
PEER_VERSION = "0.5.1"


class PeerUnavailable(RuntimeError):
    """The peer could not be installed (offline, or PyPI refused)."""


def peer_venv(cache: Path | None = None, timeout: float = 300.0) -> Path:
    """A virtualenv with the peer (and jsonschema for its ``--schema``), created once and
    reused from the user cache. Returns its python executable."""
    root = cache or Path(platformdirs.user_cache_dir("picocontext")) / "peer-venvs"
    env_dir = root / f"askfaro-{PEER_VERSION}"
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    marker = env_dir / ".complete"
    if marker.is_file() and python.is_file():
        return python
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    cmd = [
        str(python),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        f"{PEER_PACKAGE}=={PEER_VERSION}",
        "jsonschema",
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise PeerUnavailable(f"pip install {PEER_PACKAGE} timed out") from exc
    if done.returncode != 0:
        raise PeerUnavailable(f"pip install {PEER_PACKAGE} failed: {done.stderr.strip()[-400:]}")
    marker.write_text("ok\n")
    return python


def peer_sdist(cache: Path | None = None, timeout: float = 120.0) -> Path:
    """The peer's source distribution, unpacked (it carries the example manifest and cases)."""
    import tarfile

    root = cache or Path(platformdirs.user_cache_dir("picocontext")) / "peer-sdist"
    target = root / f"askfaro_progressive_context-{PEER_VERSION}"
    if (target / "examples").is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--no-binary",
        ":all:",
        f"{PEER_PACKAGE}=={PEER_VERSION}",
        "-d",
        str(root),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise PeerUnavailable(f"pip download failed: {done.stderr.strip()[-400:]}")
    archive = next(root.glob("askfaro_progressive_context-*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    return target


def generate(n_tier1: int = 20, n_tier2: int = 20, n_leaves: int = 24) -> dict[str, Any]:
    """A deterministic three-level manifest: 20 x 20 x 24 leaves + 420 branches = 10,020."""
    words = ["alpha", "beta", "gamma", "delta", "kappa", "omega", "sigma", "theta", "zeta"]
    nodes: dict[str, dict[str, Any]] = {}
    root_children = []
    for i in range(n_tier1):
        t1 = f"s{i}"
        root_children.append(t1)
        kids1 = []
        for j in range(n_tier2):
            t2 = f"{t1}.g{j}"
            kids1.append(t2)
            kids2 = []
            for k in range(n_leaves):
                leaf = f"{t2}.l{k}"
                kids2.append(leaf)
                w = words[(i + j + k) % len(words)]
                nodes[leaf] = {
                    "tier": 3,
                    "title": f"Leaf {i}/{j}/{k}",
                    "what": f"Reference entry {k} about {w} settings of group {j}.",
                    "when": f"The task needs the {w} value for section {i}.",
                    "keywords": [w, f"s{i}", f"g{j}"],
                    "tokens": 120 + k,
                    "payload": {"ref": f"node://{leaf}", "format": "md"},
                    "facets": {"kind": "ref" if k % 2 else "howto"},
                }
            nodes[t2] = {
                "tier": 2,
                "title": f"Group {i}/{j}",
                "what": f"Twenty-four entries of group {j} in section {i}.",
                "when": f"Work on group {j} of section {i}.",
                "children": kids2,
            }
        nodes[t1] = {
            "tier": 1,
            "title": f"Section {i}",
            "what": f"Section {i} of the corpus.",
            "when": f"Anything filed under section {i}.",
            "children": kids1,
        }
    return {
        "pcx_version": "0.2",
        "source": {"id": "bench", "kind": "docs", "content_hash": "sha256:bench"},
        "variant": {"budget": 10_000_000},
        "root": {
            "id": "r",
            "title": "Bench",
            "what": "Generated corpus.",
            "when": "Benchmarking.",
            "children": root_children,
        },
        "nodes": nodes,
    }


def op_script(n_ops: int = 1000) -> list[list[Any]]:
    """index, open section, open group, look at two leaves, open leaf, close leaf, close
    section -- repeated over different sections until ``n_ops`` operations. Closing a section
    is timed apart: ours reclaims the reveal and everything under it, the peer's close of a
    branch is a no-op that returns 0, so the two do different work."""
    ops: list[list[Any]] = []
    c = 0
    while len(ops) < n_ops:
        i, j, k = c % 20, (c * 7) % 20, (c * 5) % 24
        t1, t2 = f"s{i}", f"s{i}.g{j}"
        leaf, other = f"{t2}.l{k}", f"{t2}.l{(k + 1) % 24}"
        ops.extend(
            [
                ["index"],
                ["open", t1],
                ["open", t2],
                ["look", [leaf, other]],
                ["open", leaf],
                ["close", leaf],
                ["close_branch", t1],
            ]
        )
        c += 1
    return ops[:n_ops]


# One driver, run by both interpreters; only the import block differs.
_DRIVER = r"""
import json, statistics, sys, time
side, path, ops_path, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ops = json.load(open(ops_path))
raw = open(path, "rb").read()
if side == "ours":
    from picocontext.manifest.validate import check_structure
    from picocontext.manifest.model import Manifest
    from picocontext.manifest.session import NavSession
    def load(): return Manifest.model_validate_json(raw)
    def validate(m): return check_structure(m, warnings=False)[0]  # errors only, like theirs
    def session(m): return NavSession(m, "local", protocol=None)
else:
    from askfaro_progressive_context import Manifest, NavSession
    from askfaro_progressive_context.validate import structural_errors
    parsed = json.loads(raw)  # its validator reads the raw dict; give it one, untimed
    def load(): return Manifest.from_dict(json.loads(raw))
    def validate(m): return structural_errors(parsed)
    def session(m): return NavSession(m, mode="local")
res = {"load": [], "validate": [], "ops": {}}
for _ in range(repeat):
    t = time.perf_counter(); m = load(); res["load"].append(time.perf_counter() - t)
    t = time.perf_counter(); errs = validate(m); res["validate"].append(time.perf_counter() - t)
    assert not errs, errs[:3]
    s = session(m)
    per = {}
    for op in ops:
        t = time.perf_counter()
        if op[0] == "index": s.index()
        elif op[0] == "open": s.open(op[1])
        elif op[0] == "look": s.look(op[1])
        else: s.close(op[1])
        per.setdefault(op[0], 0.0)
        per[op[0]] += time.perf_counter() - t
    for k, v in per.items():
        res["ops"].setdefault(k, []).append(v)
out = {"load": statistics.median(res["load"]), "validate": statistics.median(res["validate"]),
       "ops": {k: statistics.median(v) for k, v in res["ops"].items()}}
out["ops_total"] = sum(out["ops"].values())
print(json.dumps(out))
"""


def _run_side(python: str, side: str, manifest: Path, ops: Path, repeat: int) -> dict[str, Any]:
    done = subprocess.run(
        [python, "-c", _DRIVER, side, str(manifest), str(ops), str(repeat)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{side} driver failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _median_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    import statistics

    out: dict[str, Any] = {
        "load": statistics.median(r["load"] for r in runs),
        "validate": statistics.median(r["validate"] for r in runs),
        "ops": {op: statistics.median(r["ops"][op] for r in runs) for op in runs[0]["ops"]},
    }
    out["ops_total"] = statistics.median(r["ops_total"] for r in runs)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench manifest", description=__doc__)
    parser.add_argument("--output", type=Path, default=Path("out/bench/manifest.json"))
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--ops", type=int, default=1000)
    args = parser.parse_args(argv)
    try:
        peer = str(peer_venv())
    except PeerUnavailable as exc:
        print(f"peer unavailable, running ours only: {exc}", file=sys.stderr)
        peer = ""
    with tempfile.TemporaryDirectory() as tmp:
        mpath, opath = Path(tmp) / "bench.pcx.json", Path(tmp) / "ops.json"
        doc = generate()
        mpath.write_text(json.dumps(doc))
        opath.write_text(json.dumps(op_script(args.ops)))
        # Alternate the two sides run by run, so a busy machine slows both alike.
        ours_runs: list[dict[str, Any]] = []
        peer_runs: list[dict[str, Any]] = []
        for _ in range(args.repeat):
            ours_runs.append(_run_side(sys.executable, "ours", mpath, opath, 1))
            if peer:
                peer_runs.append(_run_side(peer, "peer", mpath, opath, 1))
        ours = _median_runs(ours_runs)
        theirs = _median_runs(peer_runs) if peer_runs else None
    for side in (ours, theirs):
        if side is not None:
            side["load+validate"] = side["load"] + side["validate"]
    rows = [("load", "load"), ("validate", "validate"), ("load+validate", "load+validate")]
    report: dict[str, Any] = {
        "nodes": len(doc["nodes"]) + 1,
        "ops": args.ops,
        "repeat": args.repeat,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "ours": ours,
        "peer": theirs,
        "peer_version": PEER_VERSION if theirs else None,
    }
    print(
        f"manifest bench: {report['nodes']} nodes, {args.ops} NavSession ops, "
        f"median of {args.repeat}"
    )
    print(f"{'operation':<14}{'ours ms':>10}{'peer ms':>10}{'peer/ours':>11}")
    ratios: dict[str, float] = {}
    flat = [(name, ours[key], theirs[key] if theirs else None) for name, key in rows]
    for op in sorted(ours["ops"]):
        flat.append((f"op:{op}", ours["ops"][op], theirs["ops"].get(op) if theirs else None))
    flat.append(("ops total", ours["ops_total"], theirs["ops_total"] if theirs else None))
    for name, a, bval in flat:
        ratio = (bval / a) if (bval is not None and a > 0) else None
        if ratio is not None:
            ratios[name] = round(ratio, 3)
        peer_ms = f"{bval * 1000:10.2f}" if bval is not None else f"{'-':>10}"
        shown = f"{ratio:11.2f}" if ratio is not None else f"{'-':>11}"
        print(f"{name:<14}{a * 1000:10.2f}{peer_ms}{shown}")
    report["ratio_peer_over_ours"] = ratios
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
