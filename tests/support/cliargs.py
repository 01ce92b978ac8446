"""Shared by the CLI file-argument tests: every path-like argument of a command, found in the
argparse tree, and one command line run in a fresh interpreter under a timeout."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from picocontext import cli

TIMEOUT = 90

_PATHLIKE_METAVAR = re.compile(r"PATH|FILE|DIR|\.JSON", re.IGNORECASE)
_PATHLIKE_NAME = {"manifest", "cases", "path", "reports", "leaves", "out", "output", "cache"}
_PATHLIKE_HELP = re.compile(r"\b(file|folder|directory|path)\b", re.IGNORECASE)


def _leaf_parsers(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield words, parser
        return
    for name, child in subs[0].choices.items():
        yield from _leaf_parsers(child, (*words, name))


def _looks_like_path(action: argparse.Action) -> bool:
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    return (
        action.type is Path
        or bool(_PATHLIKE_METAVAR.search(metavar))
        or action.dest in _PATHLIKE_NAME
        or bool(_PATHLIKE_HELP.search(action.help or ""))
    )


def path_arguments(commands: tuple[str, ...]) -> set[tuple[str, ...]]:
    """(command words..., option string or positional name) of every path-like argument."""
    tree = cli.build_parser(cli.find_commands())
    found: set[tuple[str, ...]] = set()
    for words, parser in _leaf_parsers(tree):
        if not words or words[0] not in commands:
            continue
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or action.nargs == 0:
                continue
            if _looks_like_path(action):
                name = max(action.option_strings, key=len) if action.option_strings else action.dest
                found.add((*words, name))
    return found


def run_row(argv: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    """One command line in a fresh interpreter, bounded by :data:`TIMEOUT`."""
    docs = tmp / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "a.md").write_text("# Alpha\n\nAlpha text about kilns.\n", encoding="utf-8")
    fill = {"docs": str(docs), "out": str(tmp / "out"), "report": str(tmp / "report.json")}
    words = [w.format(**fill) if "{" in w and "{bad}" not in w else w for w in argv]
    env = {k: v for k, v in os.environ.items() if k != cli.DEBUG_ENV}
    return subprocess.run(
        [sys.executable, "-m", "picocontext.cli", *words],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=tmp,
        env=env,
        check=False,
    )
