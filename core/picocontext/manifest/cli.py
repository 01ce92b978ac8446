"""``pcx``: the manifest command line.

Subcommands are plug-ins, in one of two shapes: a module-level ``COMMANDS`` sequence of objects
with ``name``, ``help``, ``configure(parser)`` and ``run(args) -> int`` (:class:`Subcommand`),
or an argparse-style ``register(subparsers)`` function that adds its parser and sets a
``func`` default (``func(args) -> int``). ``pcx`` collects them from :data:`COMMAND_MODULES`
(the built-ins here and the compiler's ``picocontext.build`` modules -- a missing module is
skipped) and from the ``picocontext.pcx_commands`` entry-point group, so ``pcx build`` plugs
in without editing this file.

Exit codes: 0 ok, 1 the input is invalid (validate), 2 usage or input errors, 3 a gate failed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from picocontext.errors import PicoContextError
from picocontext.manifest.errors import ManifestError, ManifestInvalid
from picocontext.manifest.schema import generate_schema, schema_errors, schema_text
from picocontext.manifest.validate import DEFAULT_LIMITS, Limits, load_manifest, validate_manifest

COMMAND_MODULES: tuple[str, ...] = (
    "picocontext.manifest.cli",
    "picocontext.build.pcx_command",
    "picocontext.build.cli",
)
ENTRY_POINT_GROUP = "picocontext.pcx_commands"


class Subcommand(Protocol):
    name: str
    help: str

    def configure(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")


def _read_json(path: str) -> Any:
    try:
        return json.loads(Path(path).read_bytes())
    except OSError as exc:
        raise ManifestError(f"Cannot read {path}: {exc.strerror or exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise ManifestInvalid([f"<document>: not JSON: {exc}"], path) from exc


def _limits(args: argparse.Namespace) -> Limits:
    return Limits(max_depth=args.max_depth, max_nodes=args.max_nodes)


class ValidateCommand:
    name = "validate"
    help = "check a manifest: schema, structure (ids, parents, cycles, orphans, links), limits"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("manifest", help="path to a .pcx.json file")
        parser.add_argument(
            "--schema",
            action="store_true",
            help="also check the raw JSON against the JSON Schema (needs jsonschema)",
        )
        parser.add_argument("--json", action="store_true", help="machine-readable report")
        parser.add_argument("--max-depth", type=int, default=DEFAULT_LIMITS.max_depth)
        parser.add_argument("--max-nodes", type=int, default=DEFAULT_LIMITS.max_nodes)

    def run(self, args: argparse.Namespace) -> int:
        limits = _limits(args)
        path = Path(args.manifest)
        try:
            size = path.stat().st_size
        except OSError as exc:
            _err(f"error: cannot read {path}: {exc.strerror or exc}")
            return 2
        errors: list[str] = []
        warnings: list[str] = []
        if size > limits.max_bytes:
            errors.append(f"<document>: {size} bytes exceed the limit of {limits.max_bytes}")
        else:
            raw = path.read_bytes()
            report = validate_manifest(raw, limits)
            errors.extend(report.errors)
            warnings.extend(report.warnings)
            if args.schema:
                try:
                    document = json.loads(raw)
                except (ValueError, RecursionError):
                    document = None
                if document is not None:
                    try:
                        extra = schema_errors(document)
                    except RuntimeError as exc:
                        _err(f"error: {exc}")
                        return 2
                    errors.extend(f"schema: {e}" for e in extra if f"schema: {e}" not in errors)
        if args.json:
            _out(
                json.dumps(
                    {"path": str(path), "ok": not errors, "errors": errors, "warnings": warnings},
                    indent=2,
                )
            )
        elif errors:
            _err(f"INVALID: {path}: {len(errors)} error(s)")
            for e in errors:
                _err(f"  - {e}")
        else:
            _out(f"OK: {path} is a valid pcx 0.2 manifest")
        if warnings and not args.json:
            for w in warnings:
                _err(f"warn: {w}")
        return 1 if errors else 0


class SchemaCommand:
    name = "schema"
    help = "print the pcx 0.2 JSON Schema generated from the models (or --check a file)"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--check", metavar="FILE", help="fail if FILE differs from it")

    def run(self, args: argparse.Namespace) -> int:
        if args.check:
            try:
                shipped = json.loads(Path(args.check).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                _err(f"error: cannot read {args.check}: {exc}")
                return 2
            if shipped != generate_schema():
                _err(f"{args.check} is out of date; regenerate it with `pcx schema > FILE`")
                return 1
            _out(f"OK: {args.check} matches the models")
            return 0
        sys.stdout.write(schema_text())
        return 0


def _load_leaves(directory: str | None) -> Any:
    """A resolver over ``DIR/<id>.*`` files, if a leaf directory is given."""
    if directory is None:
        return None
    from picocontext.manifest.runtime import dict_resolver

    base = Path(directory)
    if not base.is_dir():
        raise ManifestError(f"--leaves {directory}: not a directory")
    leaves = {p.stem: p.read_text(encoding="utf-8") for p in base.iterdir() if p.is_file()}
    return dict_resolver(leaves)


def _navigator(args: argparse.Namespace) -> Any:
    from picocontext.manifest.navigator import KeywordNavigator, LLMNavigator

    if args.navigator == "keyword":
        return KeywordNavigator()
    if not args.model:
        raise ManifestError("--navigator llm needs --model DIR (an MLX model directory)")
    from picocontext.models.mlx_backend import MLXModel

    return LLMNavigator(MLXModel.load(args.model))


class EvalCommand:
    name = "eval"
    help = "navigation-success @ budget with oracle and flat-list references"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("manifest")
        parser.add_argument("cases", help="JSON array of {query, target[, note, facet]}")
        parser.add_argument("--budget", type=int, default=None, help="default: variant.budget")
        parser.add_argument("--reserve", type=int, default=0)
        parser.add_argument("--max-hops", type=int, default=8)
        parser.add_argument("--view-level", choices=("title", "brief", "full"), default="full")
        parser.add_argument("--navigator", choices=("keyword", "llm"), default="keyword")
        parser.add_argument("--model", help="MLX model directory for --navigator llm")
        parser.add_argument("--leaves", help="directory of leaf files named <id>.<ext>")
        parser.add_argument("--use-facets", action="store_true")
        parser.add_argument("--use-related", action="store_true")
        parser.add_argument(
            "--no-protocol",
            action="store_true",
            help="do not charge the protocol text (peer-comparable numbers)",
        )
        parser.add_argument(
            "--min-success",
            type=float,
            default=None,
            help="exit 3 when navigation_success is below this",
        )
        parser.add_argument("--json", action="store_true")
        parser.add_argument("-v", "--verbose", action="store_true")
        parser.add_argument("--max-depth", type=int, default=DEFAULT_LIMITS.max_depth)
        parser.add_argument("--max-nodes", type=int, default=DEFAULT_LIMITS.max_nodes)

    def run(self, args: argparse.Namespace) -> int:
        from picocontext.manifest.eval import load_cases, run_eval
        from picocontext.manifest.session import DEFAULT_PROTOCOL

        manifest = load_manifest(Path(args.manifest), _limits(args))
        cases = load_cases(args.cases)
        report = run_eval(
            manifest,
            cases,
            _navigator(args),
            budget=args.budget,
            reserve=args.reserve,
            max_hops=args.max_hops,
            view_level=args.view_level,
            resolver=_load_leaves(args.leaves),
            protocol=None if args.no_protocol else DEFAULT_PROTOCOL,
            use_facets=args.use_facets,
            use_related=args.use_related,
        )
        if args.json:
            _out(json.dumps(report.to_dict(), indent=2))
        else:
            _out(report.summary(verbose=args.verbose))
        if args.min_success is not None and report.navigation_success < args.min_success:
            _err(f"gate: navigation_success {report.navigation_success:.3f} < {args.min_success}")
            return 3
        return 0


class ShowCommand:
    name = "show"
    help = "print the first view a model gets (the index) and its token cost"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("manifest")
        parser.add_argument("--mode", choices=("local", "remote"), default="local")
        parser.add_argument("--budget", type=int, default=None)
        parser.add_argument("--reserve", type=int, default=0)
        parser.add_argument(
            "--open",
            action="append",
            default=[],
            metavar="ID",
            help="open these nodes in order first",
        )
        parser.add_argument("--max-depth", type=int, default=DEFAULT_LIMITS.max_depth)
        parser.add_argument("--max-nodes", type=int, default=DEFAULT_LIMITS.max_nodes)

    def run(self, args: argparse.Namespace) -> int:
        from picocontext.manifest.session import NavSession

        manifest = load_manifest(Path(args.manifest), _limits(args))
        session = NavSession(manifest, args.mode, budget=args.budget, reserve=args.reserve)
        for nid in args.open:
            session.open(nid)
        _out(session.index())
        _out(
            f"-- spent {session.spent} / {session.runtime.effective_budget} tokens "
            f"({session.runtime.counter.name}); shown {session.shown_tokens}"
        )
        return 0


COMMANDS: tuple[Subcommand, ...] = (
    ValidateCommand(),
    EvalCommand(),
    ShowCommand(),
    SchemaCommand(),
)


Registrar = Callable[[Any], object]


def load_plugins(
    modules: Sequence[str] = COMMAND_MODULES,
) -> tuple[dict[str, Subcommand], list[Registrar]]:
    """Subcommands by name, plus argparse-style ``register(subparsers)`` functions from modules
    that export no ``COMMANDS``. A module that does not exist (yet) is skipped quietly; one that
    exists but fails to import is reported on stderr and skipped, so a broken plug-in never
    takes ``pcx validate`` down with it."""
    found: dict[str, Subcommand] = {}
    registrars: list[Registrar] = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and name.startswith(exc.name):
                continue
            _err(f"warning: pcx plug-in {name} failed to import ({exc}); its commands are off")
            continue
        except Exception as exc:  # a plug-in's own bug: report, keep the CLI usable
            _err(f"warning: pcx plug-in {name} failed to import ({exc}); its commands are off")
            continue
        commands = getattr(module, "COMMANDS", None)
        if commands is not None:
            for cmd in commands:
                found.setdefault(cmd.name, cmd)
            continue
        register = getattr(module, "register", None)
        if callable(register) and register not in registrars:
            registrars.append(register)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        cmd = ep.load()
        found.setdefault(cmd.name, cmd)
    return found, registrars


def load_commands(modules: Sequence[str] = COMMAND_MODULES) -> dict[str, Subcommand]:
    return load_plugins(modules)[0]


def build_parser(
    commands: dict[str, Subcommand], registrars: Sequence[Registrar] = ()
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pcx", description="Progressive-context (pcx 0.2) manifests: validate, inspect, eval."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in sorted(commands):
        cmd = commands[name]
        p = sub.add_parser(name, help=cmd.help, description=cmd.help)
        cmd.configure(p)
        p.set_defaults(_command=cmd)
    for register in registrars:
        try:
            register(sub)  # sets its own ``func`` default
        except argparse.ArgumentError as exc:
            _err(f"warning: a pcx plug-in could not register: {exc}")
    return parser


def main(argv: Sequence[str] | None = None, modules: Sequence[str] | None = None) -> int:
    commands, registrars = load_plugins(COMMAND_MODULES if modules is None else modules)
    parser = build_parser(commands, registrars)
    args = parser.parse_args(argv)
    cmd: Subcommand | None = getattr(args, "_command", None)
    try:
        if cmd is not None:
            return cmd.run(args)
        result = args.func(args)
        return result if isinstance(result, int) else 0
    except ManifestInvalid as exc:
        _err(f"INVALID: {exc.message}")
        return 1
    except PicoContextError as exc:
        _err(f"error: {exc.message}")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
