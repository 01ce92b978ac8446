"""``pcx build``: compile a source into budgeted pcx manifests.

Registered into ``picocontext pcx`` through :func:`register` (entry-point group
``picocontext.pcx_commands``); also runnable alone as ``python -m picocontext.build``. Exit
codes: 0 ok, 1 the engine or its model failed, 2 bad input or configuration, 3 a quality gate
failed, 4 a variant failed its self-check (schema, structure, baseline or oracle
reachability). Nothing is written unless every variant passed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from picocontext.build.adapters import ADAPTERS
from picocontext.build.compiler import (
    BuildOptions,
    BuildResult,
    Progress,
    budget_label,
    compile_source,
    write_outputs,
)
from picocontext.build.describe import DescriptorCache
from picocontext.build.engines.base import DescriptorEngine
from picocontext.build.engines.llm import LLMEngine
from picocontext.build.engines.offline import OfflineEngine
from picocontext.build.errors import ConfigError, GateFailed, SelfCheckFailed
from picocontext.cli import bounded, error_line, run_command
from picocontext.errors import PicoContextError
from picocontext.files import check_output_file, check_output_folder

_BUDGET = re.compile(r"^\s*(\d+)\s*([kK]?)\s*$")
MAX_BUDGET = 10_000_000

DEFAULTS: dict[str, Any] = {
    "budgets": "4k,32k",
    "collision_threshold": 0.5,
    "max_contrast_rounds": 2,
    "max_collision": None,
    "fidelity": "lexical",
    "min_fidelity": None,
    "max_repairs": 1,
    "synthesis": False,
    "flatten": False,
    "cross_links": False,
}

# preset -> {option: (value, why)}
PRESETS: dict[str, dict[str, tuple[Any, str]]] = {
    "docs-heavy": {
        "budgets": ("4k,32k", "a small window and a roomy one, the two sizes docs are read at"),
        "synthesis": (True, "branch lines written from the content below, not from child lines"),
        "flatten": (True, "folders with a single entry only add a hop"),
        "cross_links": (True, "docs cross-reference each other; see-also links carry that"),
    },
    "tool-routing": {
        "budgets": ("4k,32k", "routing has to work in a small window first"),
        "collision_threshold": (0.4, "tool lines must be told apart more strictly than docs"),
        "max_collision": (0.6, "fail the build when two tools still read alike"),
    },
    "low-budget": {
        "budgets": ("4k", "only the small window"),
        "flatten": (True, "every hop costs tokens a small window does not have"),
    },
}


def parse_budgets(text: str) -> tuple[int, ...]:
    """``"4k,32k,31000"`` -> (4096, 32768, 31000); anything else is a :class:`ConfigError`
    that says which item is wrong (the peer crashed on ``4.5k``, B15)."""
    if not text or not text.strip():
        raise ConfigError("--budgets is empty; give sizes like 4k,32k or 4096")
    out: list[int] = []
    for item in text.split(","):
        m = _BUDGET.match(item)
        if m is None:
            raise ConfigError(
                f"--budgets: {item.strip()!r} is not a budget; use whole numbers of tokens, "
                "optionally with k for x1024 (4k = 4096), e.g. 4k,32k"
            )
        value = int(m.group(1)) * (1024 if m.group(2) else 1)
        if value < 1 or value > MAX_BUDGET:
            raise ConfigError(f"--budgets: {item.strip()!r} must be between 1 and {MAX_BUDGET}")
        if value not in out:
            out.append(value)
    return tuple(out)


def apply_preset(args: argparse.Namespace, err: TextIO) -> None:
    """Fill options the user did not give (``None``) from the preset, then the defaults. An
    explicit flag always wins, even when it equals the default (B21)."""
    preset = PRESETS.get(args.preset) if args.preset else None
    if args.preset and preset is None:
        raise ConfigError(f"Unknown preset {args.preset!r}; use one of {sorted(PRESETS)}")
    for name, default in DEFAULTS.items():
        if getattr(args, name) is not None:
            if preset and name in preset:
                err.write(f"preset {args.preset}: keeping your --{name.replace('_', '-')}\n")
            continue
        if preset and name in preset:
            value, why = preset[name]
            setattr(args, name, value)
            err.write(f"preset {args.preset}: {name.replace('_', '-')}={value} ({why})\n")
        else:
            setattr(args, name, default)


class BarProgress(Progress):
    """A one-line progress bar on stderr (redrawn in place on a terminal)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.label = ""
        self.total = 1
        self.done = 0
        self.t0 = time.perf_counter()
        self._last = 0.0

    def start(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, max(total, 1), 0
        self.t0 = time.perf_counter()
        self._draw(force=True)

    def advance(self, n: int = 1) -> None:
        self.done += n
        self._draw()

    def _draw(self, force: bool = False, end: str = "") -> None:
        now = time.perf_counter()
        if not force and not end and now - self._last < 0.1:
            return
        self._last = now
        self.done = min(self.done, self.total)
        frac = self.done / self.total
        bar = "#" * int(frac * 24)
        line = (
            f"building {self.label:>14} [{bar:<24}] {self.done}/{self.total} nodes "
            f"{now - self.t0:5.1f}s"
        )
        if self.tty:
            self.stream.write("\r" + line + end)
            self.stream.flush()
        elif end:
            self.stream.write(line + end)

    def finish(self) -> None:
        self.done = max(self.done, self.total)
        self._draw(end="\n")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", type=Path, help="source file or folder")
    p.add_argument("--kind", required=True, choices=sorted(ADAPTERS), help="source adapter")
    p.add_argument("--budgets", default=None, help="token budgets, e.g. 4k,32k (k = x1024)")
    p.add_argument("--preset", default=None, choices=sorted(PRESETS))
    p.add_argument("--out", type=Path, default=Path("dist"), help="output folder")
    p.add_argument("--source-id", default=None, help="id of the source (default: its name)")
    eng = p.add_argument_group("descriptor engine")
    eng.add_argument("--engine", choices=("offline", "llm"), default=None)
    eng.add_argument("--fake", action="store_true", help="same as --engine offline")
    eng.add_argument("--model-dir", type=Path, default=None, help="local MLX model folder")
    eng.add_argument("--endpoint", default=None, help="OpenAI-compatible base URL")
    eng.add_argument("--model", default=None, help="model id at --endpoint, or a local model name")
    eng.add_argument("--api-key-env", default="OPENAI_API_KEY")
    eng.add_argument("--synthesis", action=argparse.BooleanOptionalAction, default=None)
    q = p.add_argument_group("quality")
    q.add_argument("--collision-threshold", type=bounded(0, 1), default=None)
    q.add_argument("--max-contrast-rounds", type=bounded(1, math.inf, whole=True), default=None)
    q.add_argument(
        "--max-collision", type=bounded(0, 1), default=None, help="gate: fail above this"
    )
    q.add_argument("--fidelity", choices=("lexical", "engine"), default=None)
    q.add_argument(
        "--min-fidelity", type=bounded(1, 5), default=None, help="gate: fail below (1-5)"
    )
    q.add_argument("--max-repairs", type=bounded(0, math.inf, whole=True), default=None)
    s = p.add_argument_group("shape")
    s.add_argument("--flatten", action=argparse.BooleanOptionalAction, default=None)
    s.add_argument("--cross-links", action=argparse.BooleanOptionalAction, default=None)
    s.add_argument("--incremental", action="store_true", help="reuse the previous build's cache")
    s.add_argument("--cache", type=Path, default=None, help="cache file (default under --out)")
    p.add_argument("--json", action="store_true", help="print the build stats as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``build`` to the ``pcx`` subcommands; the handler is ``args.func(args)``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "build", help="compile a source into budgeted pcx manifests", description=__doc__
    )
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def _prog(args: argparse.Namespace) -> str:
    return str(getattr(args, "command_prog", "pcx build"))


def _say(text: str) -> None:
    sys.stderr.write(text if text.endswith("\n") else text + "\n")


def make_engine(args: argparse.Namespace) -> DescriptorEngine:
    engine = "offline" if args.fake else (args.engine or "offline")
    if args.fake and args.engine == "llm":
        raise ConfigError("--fake and --engine llm contradict each other")
    if engine == "offline":
        options = (("--model-dir", args.model_dir), ("--model", args.model))
        given = [flag for flag, value in (*options, ("--endpoint", args.endpoint)) if value]
        if given:
            verb, them = ("apply", "them") if len(given) > 1 else ("applies", "it")
            raise ConfigError(
                f"{' and '.join(given)} only {verb} to --engine llm — add --engine llm, or drop "
                f"{them} for the offline engine"
            )
        if args.synthesis:
            sys.stderr.write("note: --synthesis needs the llm engine; ignored offline\n")
        return OfflineEngine()
    if args.endpoint:
        from picocontext.build.engines.openai_compat import OpenAICompatChat

        if not args.model:
            raise ConfigError("--endpoint needs --model (the model id at that endpoint)")
        key = os.environ.get(args.api_key_env, "")
        model: Any = OpenAICompatChat(args.endpoint, args.model, key)
    else:
        # A local model: --model NAME from the registry, --model-dir DIR, or the default
        # engine's default model (picocontext.models.default_model_name). Imported lazily.
        from picocontext.models.registry import MODELS, directory_engine, load_model

        # Said only before a real load: a path or name refused at once stays one error line.
        if directory_engine(args.model_dir) if args.model_dir else args.model in (None, *MODELS):
            what = args.model_dir or args.model or "the default model"
            _say(f"loading {what} for --engine llm (the first load can take a minute)…")
        model = load_model(args.model, model_dir=args.model_dir, log=_say)
        for note in getattr(model, "notes", ()) or ():
            sys.stderr.write(f"note: {note}\n")
    return LLMEngine(model, synthesis=bool(args.synthesis))


def _report(result: BuildResult, written: list[Path], out: TextIO) -> None:
    s = result.stats
    out.write(
        f"built {s.source_id} ({s.kind}): {s.nodes} nodes, {s.leaves} leaves, "
        f"{s.full_tokens} tokens in full; {s.seconds:.2f}s\n"
    )
    calls = ", ".join(f"{k} {v}" for k, v in sorted(s.engine_calls.items())) or "none"
    out.write(f"engine calls: {calls}; cache {s.cache_hits} hits / {s.cache_misses} misses\n")
    for v in result.variants:
        out.write(
            f"  {budget_label(v.budget):>6}: baseline {v.manifest_tokens} tokens, {v.nodes} "
            f"nodes, depth {v.depth}, widest {v.max_width}, {v.verbosity} lines, "
            f"{v.clusters} clusters, {v.pages} paged, oracle {v.oracle_reachable:.0%} "
            f"(worst path {v.max_oracle_tokens} tokens)\n"
        )
    out.write(
        f"worst sibling similarity {s.max_sibling_similarity:.2f} "
        f"({s.colliding_groups} colliding groups); fidelity {s.fidelity_mean:.2f}/5 "
        f"({s.fidelity_flagged} flagged); vacuous {s.vacuity_flagged}; "
        f"cross-links {s.cross_links}\n"
    )
    for path in written:
        out.write(f"wrote {path}\n")


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        apply_preset(args, err)
        budgets = parse_budgets(args.budgets)
        options = BuildOptions(
            budgets=budgets,
            collision_threshold=args.collision_threshold,
            max_contrast_rounds=args.max_contrast_rounds,
            max_repairs=args.max_repairs,
            max_collision=args.max_collision,
            min_fidelity=args.min_fidelity,
            fidelity=args.fidelity,
            cross_links=args.cross_links,
            flatten=args.flatten,
        )
        if not args.path.exists():
            raise ConfigError(f"source {args.path} does not exist")
        # Before the engine is loaded and the source compiled: where the outputs go.
        check_output_folder(args.out)
        if args.cache is not None:
            check_output_file(args.cache)
        engine = make_engine(args)
        sid = args.source_id or (
            args.path.stem if args.path.is_file() else args.path.resolve().name
        )
        cache_path = args.cache or (args.out / ".pcx-cache" / f"{sid}.json")
        cache = DescriptorCache.load(cache_path) if args.incremental else None
        if args.incremental and cache is None:
            err.write(f"note: no usable cache at {cache_path}; doing a full build\n")
        progress = Progress() if args.quiet else BarProgress(err)
        result = compile_source(
            args.path,
            args.kind,
            engine,
            options,
            source_id=sid,
            cache=cache,
            incremental=args.incremental,
            progress=progress,
        )
        for w in result.stats.warnings:
            err.write(f"warn: {w}\n")
        for s in result.stats.skipped:
            err.write(f"skipped: {s}\n")
        written = write_outputs(result, args.out, cache_path)
    except GateFailed as exc:
        err.write(error_line(_prog(args), exc.message) + "\n")
        return 3
    except SelfCheckFailed as exc:
        err.write(error_line(_prog(args), exc.message) + "\n")
        return 4
    except PicoContextError as exc:  # bad input 2, a model that failed to load or run 1
        err.write(error_line(_prog(args), exc.message) + "\n")
        return exc.exit_code
    except ValueError as exc:  # pydantic validation of options
        err.write(error_line(_prog(args), f"bad option: {exc}") + "\n")
        return 2
    if args.json:
        out.write(json.dumps(result.stats.model_dump(mode="json"), indent=2) + "\n")
    else:
        _report(result, written, out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m picocontext.build``: ``pcx build`` on its own."""
    return run_command("build", argv, prog="pcx build", registrar=register)
