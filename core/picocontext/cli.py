"""``picocontext``: one command line, one argparse tree, commands found as plug-ins.

    picocontext [APP OPTIONS]          the playground: the window, or --smoke / --episode-smoke
    picocontext app [APP OPTIONS]      the same, spelled out
    picocontext eval [OPTIONS]         policies side by side on seeded episodes (diagnostics)
    picocontext pcx COMMAND ...        manifests: validate, show, eval, schema, build
    picocontext distill COMMAND ...    digest trees: sync, map, digest, resolve, recall, ...
    picocontext tables REPORT.json...  a markdown table of evaluation reports (diagnostics)

A command is a function ``register(subparsers)`` that adds one subparser and sets
``func(args) -> int`` as its default. Commands come from the entry-point group
``picocontext.commands``, where the built-ins are registered exactly like a third-party command
would be; a source checkout that was never installed has no entry points, so
:data:`BUILTIN_COMMANDS` names the same functions by string (a string, so this module imports
neither diagnostics nor the playground). The old script names (``picocontext-eval``, ``pcx``,
``picocontext-distill``) run one command of the same tree under their own name.

Every path ends in :func:`run_parser`'s handler: an error of the project becomes one line on
stderr, ``<command>: error: <what> — <what to do>`` (:func:`error_line`), and the error's
``exit_code``; any other exception is a bug, reported in one line that says how to see the
traceback (``--debug`` anywhere on the command line, or ``PICOCONTEXT_DEBUG=1``). Exit codes,
the same for every command: 0 done, 1 a failure while running, 2 a usage or input error
(bad flags, a file that cannot be read or is malformed, an unknown name), 3 the run finished
but a check failed (eval, the headless smoke, pcx gates), 70 a bug, 130 an interrupt.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import math
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any, NoReturn

from picocontext.errors import PicoContextError
from picocontext.progress import ProgressEcho

ENTRY_POINT_GROUP = "picocontext.commands"
DEBUG_FLAG = "--debug"
DEBUG_ENV = "PICOCONTEXT_DEBUG"
EXIT_USAGE = 2
_LEAF_PARSER = "_leaf_parser"
EXIT_BUG = 70
EXIT_INTERRUPTED = 130
# The command that runs when the first word is not a command (``picocontext --smoke``).
DEFAULT_COMMAND = "app"

# name -> "module:function"; the same values pyproject.toml registers as entry points.
BUILTIN_COMMANDS: dict[str, str] = {
    "app": "picocontext_playground.cli:register",
    "distill": "picocontext.distill.cli:register",
    "eval": "picocontext_diagnostics.cli:register",
    "pcx": "picocontext.manifest.cli:register",
    "tables": "picocontext_diagnostics.tables:register",
}

Registrar = Callable[[Any], object]

__all__ = [
    "BUILTIN_COMMANDS",
    "DEBUG_ENV",
    "DEBUG_FLAG",
    "DEFAULT_COMMAND",
    "ENTRY_POINT_GROUP",
    "EXIT_BUG",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "CommandParser",
    "ProgressEcho",
    "Registrar",
    "UsageError",
    "add_switch",
    "bounded",
    "build_parser",
    "distill_main",
    "entry_point_targets",
    "error_line",
    "eval_main",
    "find_commands",
    "load_registrar",
    "main",
    "on_off",
    "pcx_main",
    "plain_usage_message",
    "run_command",
    "run_parser",
    "split_debug",
    "standalone_parser",
    "usage_line",
]


class UsageError(PicoContextError):
    """A command line argparse refused; ``prog`` names the (sub)command it belongs to."""

    def __init__(self, message: str, prog: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.prog = prog
        self.exit_code = exit_code


_ARGUMENT = re.compile(r"^argument (?P<names>[^:]+): (?P<text>.*)$", re.DOTALL)


def plain_usage_message(message: str) -> str:
    """argparse's wording, said per word: ``unknown option --x``, ``--x needs a value``,
    ``--x takes no value``, ``unexpected argument 'y'``."""
    if message.startswith("unrecognized arguments: "):
        first = message.removeprefix("unrecognized arguments: ").split(" ")[0]
        if first.startswith("-"):
            return f"unknown option {first.partition('=')[0]}"
        return f"unexpected argument {first!r}"
    match = _ARGUMENT.match(message)
    if match is None:
        return message
    name, text = match["names"].split("/")[-1], match["text"]
    if text.startswith("expected one argument"):
        return f"{name} needs a value"
    if text.startswith("ignored explicit argument"):
        return f"{name} takes no value"
    return text if text.startswith(name) else f"{name}: {text}"


class CommandParser(argparse.ArgumentParser):
    """argparse whose errors are :class:`UsageError` (so the handler owns stderr and the exit
    code). ``usage_exit`` is the command's usage exit code; ``plain_errors`` words messages
    as :func:`plain_usage_message` does."""

    def __init__(
        self, *args: Any, usage_exit: int = EXIT_USAGE, plain_errors: bool = False, **kwargs: Any
    ) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.usage_exit = usage_exit
        self.plain_errors = plain_errors

    def error(self, message: str) -> NoReturn:
        text = plain_usage_message(message) if self.plain_errors else message
        raise UsageError(text, self.prog, self.usage_exit)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """Records the innermost parser that ran, so that words left over are reported by
        the (sub)command they were given to, in its words and with its exit code."""
        parsed, extras = super().parse_known_args(args, namespace)
        if self._subparsers is None:
            setattr(parsed, _LEAF_PARSER, self)
        return parsed, extras

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        leaf: CommandParser = getattr(parsed, _LEAF_PARSER, self)
        if extras:
            leaf.error(f"unrecognized arguments: {' '.join(extras)}")
        delattr(parsed, _LEAF_PARSER) if hasattr(parsed, _LEAF_PARSER) else None
        parsed.command_prog = leaf.prog
        return parsed


def on_off(text: str) -> bool:
    """argparse type of a decoding switch: ``on`` or ``off``."""
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"expected on or off, not {text!r}")
    return text == "on"


def bounded(
    low: float, high: float, *, whole: bool = False, label: str | None = None
) -> Callable[[str], Any]:
    """argparse type of every number a user types: a finite number (a whole one with
    ``whole``, kept exact) from ``low`` to ``high``, so ``nan``, ``inf`` or ``-1`` are refused
    in one line before any work starts. ``label`` names what is expected (``"seconds from 0
    to a year"``) where the bounds alone would not say it."""
    if label is None:
        kind = "a whole number" if whole else "a number"
        label = f"{kind} from {low:g} to {high:g}" if math.isfinite(high) else f"{kind} >= {low:g}"

    def parse(text: str) -> int | float:
        value: int | float
        try:
            value = int(text) if whole else float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"expected {label}, not {text!r}")
        return value

    return parse


def add_switch(parser: argparse.ArgumentParser, name: str, help: str) -> None:
    """A decoding switch spelled the same in every command: ``--NAME`` (on), ``--NAME on``,
    ``--NAME off``; the default ``None`` means "the command's default"."""
    parser.add_argument(
        name, nargs="?", const=True, default=None, type=on_off, metavar="on|off", help=help
    )


class _Standalone:
    """Stands in for the subparsers of the tree when one command runs under its own name
    (``pcx``, ``picocontext-eval``): the command's parser becomes the top-level parser."""

    def __init__(self, prog: str) -> None:
        self.prog = prog
        self.parser: CommandParser | None = None

    def add_parser(self, name: str, **kwargs: Any) -> CommandParser:
        for key in ("help", "aliases"):
            kwargs.pop(key, None)
        self.parser = CommandParser(prog=self.prog, **kwargs)
        return self.parser


def _warn(text: str) -> None:
    sys.stderr.write(f"warning: {text}\n")


def load_registrar(target: str) -> Registrar | None:
    """``"module:function"`` -> the function; ``None`` (quietly) when the module's package is
    not installed, ``None`` with a warning when it is installed but broken."""
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
        registrar: Registrar = getattr(module, attribute)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            return None
        _warn(f"command plug-in {target} failed to import ({exc}); its commands are off")
        return None
    except Exception as exc:  # a plug-in's own bug must not take the other commands down
        _warn(f"command plug-in {target} failed to import ({exc}); its commands are off")
        return None
    return registrar


def entry_point_targets(group: str) -> dict[str, str]:
    """``name -> "module:function"`` of an entry-point group."""
    return {ep.name: ep.value for ep in metadata.entry_points(group=group)}


def find_commands(
    group: str = ENTRY_POINT_GROUP, builtins: dict[str, str] | None = None
) -> dict[str, Registrar]:
    """Every command's registrar: entry points first, then the built-in fallback list for
    names no entry point provides (an uninstalled checkout)."""
    targets = dict(BUILTIN_COMMANDS if builtins is None else builtins)
    targets.update(entry_point_targets(group))
    found: dict[str, Registrar] = {}
    for name in sorted(targets):
        registrar = load_registrar(targets[name])
        if registrar is not None:
            found[name] = registrar
    return found


def build_parser(commands: dict[str, Registrar], prog: str = "picocontext") -> CommandParser:
    """The whole tree: one subparser per command."""
    parser = CommandParser(
        prog=prog,
        description="Context engineering for small local language models.",
        epilog=(
            f"Without a command, the options go to `{prog} {DEFAULT_COMMAND}` (the playground). "
            f"{DEBUG_FLAG} anywhere shows the traceback of a bug."
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    for name in sorted(commands):
        commands[name](sub)
    return parser


def split_debug(argv: Sequence[str]) -> tuple[list[str], bool]:
    """``argv`` without ``--debug`` (before any ``--``), and whether it was there."""
    items = list(argv)
    end = items.index("--") if "--" in items else len(items)
    head = [item for item in items[:end] if item != DEBUG_FLAG]
    debug = len(head) != end or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    return head + items[end:], debug


def run_parser(parser: argparse.ArgumentParser, argv: Sequence[str], debug: bool = False) -> int:
    """Parse and run ``args.func``; the one place errors become exit codes."""
    prog = parser.prog
    try:
        args = parser.parse_args(list(argv))
        prog = getattr(args, "command_prog", prog)
        func = getattr(args, "func", None)
        if func is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        result = func(args)
        return result if isinstance(result, int) else 0
    except UsageError as exc:
        _say(usage_line(exc))
        return exc.exit_code
    except PicoContextError as exc:
        _say(error_line(prog, exc.message))
        return exc.exit_code
    except KeyboardInterrupt:
        _say(f"{prog}: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (``| head``)
        return 0
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except Exception as exc:
        return _bug(parser.prog, exc, debug)


def error_line(prog: str, message: str) -> str:
    """The one error format of every command: ``<prog>: error: <what> — <what to do>``
    (the message carries the second half when there is something to do)."""
    return f"{prog}: error: {' '.join(message.split())}"


def usage_line(exc: UsageError) -> str:
    """A refused command line, in the error format, pointing at the command's help."""
    if " — " in exc.message:
        return error_line(exc.prog, exc.message)
    return error_line(exc.prog, f"{exc.message} — see {exc.prog} --help")


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _bug(prog: str, exc: BaseException, debug: bool) -> int:
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    else:
        first = (str(exc).splitlines() or [""])[0][:200]
        _say(
            f"{prog}: internal error (a bug): {type(exc).__name__}: {first}; run again with "
            f"{DEBUG_FLAG} for the traceback"
        )
    return EXIT_BUG


def _with_default_command(argv: list[str], commands: dict[str, Registrar]) -> list[str]:
    """``picocontext`` and ``picocontext --smoke ...`` mean ``picocontext app ...``."""
    if DEFAULT_COMMAND not in commands:
        return argv
    if not argv:
        return [DEFAULT_COMMAND]
    first = argv[0]
    if first in commands or first in ("-h", "--help"):
        return argv
    if not first.startswith("-"):
        # The playground takes no positional words: a bare word is a mistyped command, said
        # so in the tree's name rather than blamed on ``app``.
        raise UsageError(_unknown_command(first, commands), "picocontext")
    return [DEFAULT_COMMAND, *argv]


def _unknown_command(word: str, commands: dict[str, Registrar]) -> str:
    close = difflib.get_close_matches(word, sorted(commands), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown command {word!r} — {hint}commands: {', '.join(sorted(commands))}"


def main(argv: Sequence[str] | None = None) -> int:
    """``picocontext``: the whole tree."""
    items, debug = split_debug(sys.argv[1:] if argv is None else argv)
    commands = find_commands()
    try:
        items = _with_default_command(items, commands)
    except UsageError as exc:
        _say(usage_line(exc))
        return exc.exit_code
    return run_parser(build_parser(commands), items, debug)


def standalone_parser(registrar: Registrar, prog: str) -> CommandParser:
    """The parser ``registrar`` adds, made the top-level parser named ``prog``."""
    single = _Standalone(prog)
    registrar(single)
    if single.parser is None:
        raise UsageError("the command plug-in added no parser", prog, EXIT_BUG)
    return single.parser


def run_command(
    name: str,
    argv: Sequence[str] | None = None,
    prog: str | None = None,
    registrar: Registrar | None = None,
) -> int:
    """One command of the tree under its own name (the old scripts, ``python -m``)."""
    items, debug = split_debug(sys.argv[1:] if argv is None else argv)
    register = registrar or find_commands().get(name)
    if register is None:
        _say(f"picocontext: the {name} command is not installed")
        return EXIT_USAGE
    return run_parser(standalone_parser(register, prog or f"picocontext {name}"), items, debug)


def eval_main() -> int:
    """``picocontext-eval``."""
    return run_command("eval", prog="picocontext-eval")


def distill_main() -> int:
    """``picocontext-distill``."""
    return run_command("distill", prog="picocontext-distill")


def pcx_main() -> int:
    """``pcx``."""
    return run_command("pcx", prog="pcx")


if __name__ == "__main__":
    raise SystemExit(main())
