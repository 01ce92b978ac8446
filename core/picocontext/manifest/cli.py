"""``picocontext pcx`` (alias ``pcx``): the manifest command line.

Each ``pcx`` subcommand is a function ``register(subparsers)`` that adds its parser and sets
``func(args) -> int``: the protocol of every command of :mod:`picocontext.cli`. They come from
the entry-point group ``picocontext.pcx_commands``, where the built-ins (``validate``,
``eval``, ``show``, ``schema`` here, ``build`` from :mod:`picocontext.build.cli`) are
registered like any third-party subcommand, and, for a checkout that was never installed, from
:data:`BUILTIN_PCX_COMMANDS`. A plug-in that fails to import is reported and skipped.

Exit codes: 0 ok, 1 the input is invalid (validate), 2 usage or input errors, 3 a gate failed,
5 some items failed and the rest was done (``pcx eval``: a leaf file skipped, a case that could
not be evaluated; each is named on stderr and in ``--json``). A failed gate (3) wins over 5.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from picocontext.cli import (
    Registrar,
    UsageError,
    bounded,
    error_line,
    find_commands,
    run_command,
)
from picocontext.errors import PicoContextError
from picocontext.files import InputFileError, files_under, read_bounded, read_text_bounded
from picocontext.manifest.errors import ManifestError
from picocontext.manifest.schema import generate_schema, schema_errors, schema_text
from picocontext.manifest.validate import DEFAULT_LIMITS, Limits, load_manifest, validate_manifest

ENTRY_POINT_GROUP = "picocontext.pcx_commands"
BUILTIN_PCX_COMMANDS: dict[str, str] = {
    "build": "picocontext.build.cli:register",
    "eval": "picocontext.manifest.cli:register_eval",
    "schema": "picocontext.manifest.cli:register_schema",
    "show": "picocontext.manifest.cli:register_show",
    "validate": "picocontext.manifest.cli:register_validate",
}
SCHEMA_LIMIT = 1024 * 1024
LEAF_LIMIT = 16 * 1024 * 1024
EXIT_INVALID = 1
EXIT_ERROR = 2
EXIT_GATE = 3
EXIT_PARTIAL = 5

Command = Callable[[argparse.Namespace], int]


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")


def _prog(args: argparse.Namespace) -> str:
    """The (sub)command as the user typed it, for its error lines."""
    return str(getattr(args, "command_prog", "pcx"))


# argparse types: a whole number >= 0, and a finite number (``nan`` would make every
# comparison false).
_count = bounded(0, math.inf, whole=True)
_finite = bounded(-math.inf, math.inf, label="a finite number")


def _limits(args: argparse.Namespace) -> Limits:
    return Limits(max_depth=args.max_depth, max_nodes=args.max_nodes)


def register_validate(subparsers: Any) -> argparse.ArgumentParser:
    """``pcx validate``."""
    help = "check a manifest: schema, structure (ids, parents, cycles, orphans, links), limits"
    parser: argparse.ArgumentParser = subparsers.add_parser("validate", help=help, description=help)
    parser.add_argument("manifest", help="path to a .pcx.json file")
    parser.add_argument(
        "--schema",
        action="store_true",
        help="also check the raw JSON against the JSON Schema (needs jsonschema)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable report")
    parser.add_argument("--max-depth", type=_count, default=DEFAULT_LIMITS.max_depth)
    parser.add_argument("--max-nodes", type=_count, default=DEFAULT_LIMITS.max_nodes)
    parser.set_defaults(func=run_validate)
    return parser


def run_validate(args: argparse.Namespace) -> int:
    limits = _limits(args)
    path = Path(args.manifest)
    errors: list[str] = []
    warnings: list[str] = []
    try:
        raw = read_bounded(path, limits.max_bytes)
    except InputFileError as exc:
        if not path.is_file():  # missing, a directory, a device: not a manifest at all
            raise InputFileError(f"cannot read {exc.message}") from None
        errors.append(f"<document>: {exc.message}")
    else:
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
                    raise ManifestError(str(exc)) from None
                errors.extend(f"schema: {e}" for e in extra if f"schema: {e}" not in errors)
    if args.json:
        _out(
            json.dumps(
                {"path": str(path), "ok": not errors, "errors": errors, "warnings": warnings},
                indent=2,
            )
        )
    elif len(errors) == 1:  # one problem, one line
        _err(error_line(_prog(args), f"{path} is not a valid manifest: {errors[0]}"))
    elif errors:
        _err(error_line(_prog(args), f"{path} is not a valid manifest: {len(errors)} errors"))
        for e in errors:
            _err(f"  - {e}")
    else:
        _out(f"OK: {path} is a valid pcx 0.2 manifest")
    if warnings and not args.json:
        for w in warnings:
            _err(f"warn: {w}")
    return 1 if errors else 0


def register_schema(subparsers: Any) -> argparse.ArgumentParser:
    """``pcx schema``."""
    help = "print the pcx 0.2 JSON Schema generated from the models (or --check a file)"
    parser: argparse.ArgumentParser = subparsers.add_parser("schema", help=help, description=help)
    parser.add_argument("--check", metavar="FILE", help="fail if FILE differs from it")
    parser.set_defaults(func=run_schema)
    return parser


def run_schema(args: argparse.Namespace) -> int:
    if args.check:
        try:
            shipped = json.loads(read_text_bounded(args.check, SCHEMA_LIMIT))
        except (ValueError, RecursionError) as exc:
            raise InputFileError(f"{args.check} is not JSON: {exc}") from None
        if shipped != generate_schema():
            message = f"{args.check} is out of date — regenerate it with `pcx schema > FILE`"
            _err(error_line(_prog(args), message))
            return 1
        _out(f"OK: {args.check} matches the models")
        return 0
    sys.stdout.write(schema_text())
    return 0


def _load_leaves(directory: str | None) -> tuple[Any, list[str]]:
    """A resolver over ``DIR/<id>.<ext>`` files (``DIR/a/b.md`` is leaf ``a/b``), if a leaf
    directory is given, and the files it skipped (``path: reason``). The folder is a boundary
    (:func:`~picocontext.files.files_under`: no symlink out of it, no FIFO or device); a file
    that is not UTF-8 or too large is skipped and named, and the other leaves still load.
    Dot files (``.DS_Store``) are not leaves."""
    if directory is None:
        return None, []
    from picocontext.manifest.runtime import dict_resolver

    base = Path(directory)
    if not base.is_dir():
        raise InputFileError(f"--leaves {directory}: not a directory")
    walk = files_under(base, ignore=lambda p: p.name.startswith("."))
    leaves: dict[str, str] = {}
    skipped = list(walk.skipped)
    for path in walk.files:
        try:
            text = read_text_bounded(path, LEAF_LIMIT)
        except InputFileError as exc:
            skipped.append(exc.message)
            continue
        leaves[path.relative_to(base).with_suffix("").as_posix()] = text
    return dict_resolver(leaves), skipped


def _chat_token_warnings(manifest: Any) -> None:
    """Name, before a model navigates, each node its chat template will refuse to render."""
    from picocontext.manifest.validate import chat_token_errors

    for problem in chat_token_errors(manifest):
        _err(f"warning: {problem}")


# The model-free navigators by name, the model navigators, and the default: the best router
# of the navigation bench (docs/results: subtree-scan 0.66 @4k on held-out man pages, where
# keyword routes 0.08).
MODEL_FREE_NAVIGATORS = ("keyword", "subtree", "subtree-backout", "subtree-lateral", "subtree-scan")
MODEL_NAVIGATOR_NAMES = ("llm", "subtree-expand", "subtree-embed")
DEFAULT_NAVIGATOR = "subtree-scan"


def _navigator(args: argparse.Namespace, manifest: Any) -> Any:
    """The chosen navigator; a model navigator loads ``--model`` (saying so first: loading
    takes seconds to minutes and prints nothing else)."""
    from picocontext.manifest.routing import make_navigator

    name = args.navigator
    if name in MODEL_FREE_NAVIGATORS:
        return make_navigator(name)
    if not args.model:
        raise UsageError(
            f"--navigator {name} needs a local model — add --model NAME_OR_DIR (a known model "
            "name or a model directory)",
            _prog(args),
        )
    model = _load_navigator_model(args.model)
    if name == "llm":
        from picocontext.manifest.navigator import LLMNavigator

        return LLMNavigator(model)
    if name == "subtree-expand":
        from picocontext.manifest.expand import QueryExpander

        return make_navigator(name, expander=QueryExpander(model, hint=manifest.root.what))
    from picocontext.manifest.embedrank import CachedEmbedder, mean_pool

    if not hasattr(model, "hidden_states_batch"):
        raise ManifestError(
            f"--navigator subtree-embed needs hidden states, which {args.model} on this engine "
            "does not give — use an MLX model or --navigator subtree-scan"
        )

    def embed(texts: Sequence[str]) -> Any:
        return mean_pool(model.hidden_states_batch(list(texts)), model.hidden_size)

    return make_navigator(name, embedder=CachedEmbedder(embed, model_id=model.model_id))


def _load_navigator_model(name_or_dir: str) -> Any:
    from picocontext.errors import UnknownModel
    from picocontext.models.registry import MODELS, directory_engine, load_model

    if name_or_dir not in MODELS and not Path(name_or_dir).expanduser().is_dir():
        raise UnknownModel(
            f"unknown model {name_or_dir!r} — use a known model name ({', '.join(sorted(MODELS))}) "
            "or the path of a model directory that exists"
        )
    is_dir = Path(name_or_dir).expanduser().is_dir()
    if not is_dir or directory_engine(name_or_dir):  # a folder with no model: one error line
        _err(f"loading {name_or_dir} for the navigator (the first load can take a minute)…")
    if is_dir:
        return load_model(model_dir=name_or_dir)
    return load_model(name_or_dir)


def register_eval(subparsers: Any) -> argparse.ArgumentParser:
    """``pcx eval``."""
    help = "navigation-success @ budget with oracle and flat-list references"
    parser: argparse.ArgumentParser = subparsers.add_parser("eval", help=help, description=help)
    parser.add_argument("manifest")
    parser.add_argument("cases", help="JSON array of {query, target[, note, facet]}")
    parser.add_argument("--budget", type=_count, default=None, help="default: variant.budget")
    parser.add_argument("--reserve", type=_count, default=0)
    parser.add_argument("--max-hops", type=_count, default=8)
    parser.add_argument("--view-level", choices=("title", "brief", "full"), default="full")
    parser.add_argument(
        "--navigator",
        choices=(*MODEL_FREE_NAVIGATORS, *MODEL_NAVIGATOR_NAMES),
        default=DEFAULT_NAVIGATOR,
        help=f"how the index is walked (default: {DEFAULT_NAVIGATOR}, the best router of the "
        "navigation bench); llm, subtree-expand and subtree-embed run a local model (--model)",
    )
    parser.add_argument(
        "--model",
        metavar="NAME_OR_DIR",
        help="a known model name or a model directory, for the model navigators",
    )
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
        type=_finite,
        default=None,
        help="exit 3 when navigation_success is below this",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--max-depth", type=_count, default=DEFAULT_LIMITS.max_depth)
    parser.add_argument("--max-nodes", type=_count, default=DEFAULT_LIMITS.max_nodes)
    parser.set_defaults(func=run_eval)
    return parser


def run_eval(args: argparse.Namespace) -> int:
    from picocontext.manifest.eval import load_cases, run_eval
    from picocontext.manifest.session import DEFAULT_PROTOCOL

    manifest = load_manifest(Path(args.manifest), _limits(args))
    cases = load_cases(args.cases)
    resolver, skipped = _load_leaves(args.leaves)
    for line in skipped:
        _err(f"skipped: {line}")
    navigator = _navigator(args, manifest)
    if args.navigator == "llm":
        _chat_token_warnings(manifest)
    report = run_eval(
        manifest,
        cases,
        navigator,
        budget=args.budget,
        reserve=args.reserve,
        max_hops=args.max_hops,
        view_level=args.view_level,
        resolver=resolver,
        protocol=None if args.no_protocol else DEFAULT_PROTOCOL,
        use_facets=args.use_facets,
        use_related=args.use_related,
    )
    if args.json:
        _out(json.dumps({**report.to_dict(), "skipped": skipped}, indent=2))
    else:
        _out(report.summary(verbose=args.verbose))
    for case in report.cases:
        if case.error:
            _err(f"case not evaluated: {case.query!r} -> {case.target}: {case.error}")
        elif case.flat_error:
            _err(f"flat list not asked: {case.query!r} -> {case.target}: {case.flat_error}")
    if args.min_success is not None and report.navigation_success < args.min_success:
        _err(f"gate: navigation_success {report.navigation_success:.3f} < {args.min_success}")
        return EXIT_GATE
    if skipped or report.failed_items:
        _err(
            f"partial: {len(skipped)} leaf file(s) skipped, {report.failed_items} item(s) "
            f"not evaluated; the rest is reported (exit {EXIT_PARTIAL})"
        )
        return EXIT_PARTIAL
    return 0


def register_show(subparsers: Any) -> argparse.ArgumentParser:
    """``pcx show``."""
    help = "print the first view a model gets (the index) and its token cost"
    parser: argparse.ArgumentParser = subparsers.add_parser("show", help=help, description=help)
    parser.add_argument("manifest")
    parser.add_argument("--mode", choices=("local", "remote"), default="local")
    parser.add_argument("--budget", type=_count, default=None)
    parser.add_argument("--reserve", type=_count, default=0)
    parser.add_argument(
        "--open",
        action="append",
        default=[],
        metavar="ID",
        help="open these nodes in order first",
    )
    parser.add_argument("--max-depth", type=_count, default=DEFAULT_LIMITS.max_depth)
    parser.add_argument("--max-nodes", type=_count, default=DEFAULT_LIMITS.max_nodes)
    parser.set_defaults(func=run_show)
    return parser


def run_show(args: argparse.Namespace) -> int:
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


def pcx_commands(builtins: dict[str, str] | None = None) -> dict[str, Registrar]:
    """The registrars of every ``pcx`` subcommand (entry points, then the built-in list)."""
    return find_commands(ENTRY_POINT_GROUP, BUILTIN_PCX_COMMANDS if builtins is None else builtins)


def register(
    subparsers: Any, commands: dict[str, Registrar] | None = None
) -> argparse.ArgumentParser:
    """``picocontext pcx``: adds the ``pcx`` parser and one subparser per subcommand."""
    description = "Progressive-context (pcx 0.2) manifests: validate, inspect, eval, build."
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "pcx",
        help="pcx 0.2 manifests: validate, show, eval, schema, build",
        description=description,
    )
    sub = parser.add_subparsers(dest="pcx_command", metavar="COMMAND", required=True)
    for name, registrar in sorted((pcx_commands() if commands is None else commands).items()):
        try:
            registrar(sub)
        except argparse.ArgumentError as exc:
            _err(f"warning: the pcx plug-in {name} could not register: {exc}")
    for child in set(sub.choices.values()):
        func = child.get_default("func")
        if func is not None:
            child.set_defaults(func=_guarded(func))
    return parser


def _guarded(func: Command) -> Command:
    """``pcx``'s errors in the tree's format: bad input (a file that cannot be read, a
    manifest or case file that is not valid, an unknown name) exits 2, any other failure 1;
    ``pcx validate`` answers "not valid" itself, with 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            result = func(args)
        except PicoContextError as exc:
            _err(error_line(_prog(args), exc.message))
            return exc.exit_code
        return result if isinstance(result, int) else 0

    return run


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m picocontext.manifest.cli``: the ``pcx`` command under its old name."""
    return run_command("pcx", argv, prog="pcx", registrar=register)


if __name__ == "__main__":
    raise SystemExit(main())
