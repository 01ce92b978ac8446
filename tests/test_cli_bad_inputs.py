"""Every subcommand x bad inputs (a missing file, a directory, ``/dev/zero``, malformed JSON,
unknown names, negative and huge numbers, where the subcommand takes such an argument): each
run prints exactly one line on stderr, ``<prog>: error: <what>`` with the (sub)command as
typed, and exits with the code of the one rule (``picocontext.cli``): 2 for a usage error or
bad input; ``pcx validate`` answers 1 for a file that is not a valid manifest.

The commands run in process through ``picocontext.cli.main`` (and ``run_command`` for the old
names ``pcx``, ``picocontext-eval`` and ``picocontext-distill``); every file is under the
test's folder, and the user data folder is pointed there too (``XDG_DATA_HOME``), so a
regression that ran a command for real would write nothing of the user's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from picocontext import cli

ROOT = Path(__file__).resolve().parents[1]
HOMELAB = ROOT / "resources" / "manifests" / "homelab"
MANIFEST = str(HOMELAB / "homelab.pcx.2k.json")
CASES = str(HOMELAB / "cases.json")
HUGE = "1" + "0" * 30

# A row: the words after ``picocontext`` ({name} placeholders filled per test), the exit
# code, and the prog the error line starts with (default: the words up to the first option
# or placeholder, ``picocontext`` in front).
Row = tuple[list[str], int]

# Placeholders: {missing} a path that does not exist, {dir} a folder, {zero} /dev/zero,
# {badjson} a file of malformed JSON, {text} a file that is UTF-8 text but not JSON,
# {docs} a folder with one document, {corpus} a synced corpus, {nocorpus} an empty folder,
# {out} an output folder not yet made, {report} an output file path, {file} a regular file,
# {zero_out} a link to /dev/zero (an output: a regression would replace the link, never the
# device).
BAD_FILES = ("missing", "dir", "zero", "badjson")

APP: dict[str, Row] = {
    "model-dir missing": (["app", "--smoke", "--model-dir", "{missing}"], 2),
    "model-dir a file": (["app", "--smoke", "--model-dir", "{file}"], 2),
    "model-dir dev-zero": (["app", "--smoke", "--model-dir", "{zero}"], 2),
    "report a folder": (["app", "--smoke", "--report", "{dir}"], 2),
    "report dev-zero": (["app", "--smoke", "--report", "{zero_out}"], 2),
    "report unknown format": (["app", "--smoke", "--report", "{dir}/r.pdf"], 2),
    "image not png": (["app", "--smoke", "--image", "{dir}/r.jpg"], 2),
    "image a folder": (["app", "--smoke", "--image", "{dir}"], 2),
    "unknown task": (["app", "--episode-smoke", "nosuch"], 2),
    "unknown policy": (["app", "--smoke", "--policies", "append-only,wandering"], 2),
    "empty policies": (["app", "--smoke", "--policies", ""], 2),
    "unknown backend": (["app", "--smoke", "--backend", "gpu"], 2),
    "unknown model": (["app", "--smoke", "--model", "nosuch"], 2),
    "unknown option": (["app", "--smoke", "--bogus"], 2),
    # No ``app``: the default command, still named ``picocontext app`` in its errors.
    "smoke without app": (["--smoke", "--image", "{dir}/r.jpg"], 2),
    "pressure without episode": (["--smoke", "--pressure"], 2),
}

EVAL: dict[str, Row] = {
    **{f"config {bad}": (["eval", "--config", f"{{{bad}}}"], 2) for bad in BAD_FILES},
    "config not JSON": (["eval", "--config", "{text}"], 2),
    "config wrong shape": (["eval", "--config", "{jsonlist}"], 2),
    "unknown profile": (["eval", "--profile", "nosuch"], 2),
    "unknown policy": (["eval", "--policies", "append-only,wandering"], 2),
    "unknown backend": (["eval", "--backend", "gpu"], 2),
    "bytes-per-token negative": (["eval", "--bytes-per-token", "-1"], 2),
    "bytes-per-token huge": (["eval", "--bytes-per-token", HUGE], 2),
    "workers negative": (["eval", "--workers", "-1"], 2),
    "workers huge": (["eval", "--workers", HUGE], 2),
    "output a folder": (["eval", "--profile", "retention", "--output", "{dir}"], 2),
    "output dev-zero": (["eval", "--profile", "retention", "--output", "{zero_out}"], 2),
    "output under a file": (["eval", "--profile", "retention", "--output", "{file}/r.json"], 2),
    "unknown option": (["eval", "--bogus"], 2),
}

# ``eval --conversation`` is being reworked elsewhere: only "non-zero, one line" is asserted.
CONVERSATION: dict[str, list[str]] = {
    **{bad: ["eval", "--conversation", f"{{{bad}}}", "--output", "{report}"] for bad in BAD_FILES},
    "questions negative": ["eval", "--conversation", "{badjson}", "--questions", "-1"],
    "window huge": ["eval", "--conversation", "{badjson}", "--window", HUGE],
}

TABLES: dict[str, Row] = {
    **{bad: (["tables", f"{{{bad}}}"], 2) for bad in BAD_FILES},
    "not a report": (["tables", "{jsonlist}"], 2),
    "no report": (["tables"], 2),
}


def _build(*extra: str) -> list[str]:
    return ["pcx", "build", "{docs}", "--kind", "docs", "--out", "{out}", *extra]


PCX: dict[str, Row] = {
    **{f"validate {bad}": (["pcx", "validate", f"{{{bad}}}"], 2) for bad in BAD_FILES[:3]},
    "validate malformed JSON": (["pcx", "validate", "{badjson}"], 1),  # not a valid manifest
    "validate not a manifest": (["pcx", "validate", "{jsonlist}"], 1),
    "validate max-depth negative": (["pcx", "validate", MANIFEST, "--max-depth", "-1"], 2),
    "validate max-nodes negative": (["pcx", "validate", MANIFEST, "--max-nodes", "-1"], 2),
    **{f"show {bad}": (["pcx", "show", f"{{{bad}}}"], 2) for bad in BAD_FILES},
    "show unknown node": (["pcx", "show", MANIFEST, "--open", "no.such.node"], 2),
    "show unknown mode": (["pcx", "show", MANIFEST, "--mode", "nosuch"], 2),
    "show budget negative": (["pcx", "show", MANIFEST, "--budget", "-1"], 2),
    **{f"eval manifest {bad}": (["pcx", "eval", f"{{{bad}}}", CASES], 2) for bad in BAD_FILES},
    **{f"eval cases {bad}": (["pcx", "eval", MANIFEST, f"{{{bad}}}"], 2) for bad in BAD_FILES},
    "eval cases wrong shape": (["pcx", "eval", MANIFEST, "{jsonlist}"], 2),
    "eval unknown target": (["pcx", "eval", MANIFEST, "{ghostcases}"], 2),
    "eval unknown navigator": (["pcx", "eval", MANIFEST, CASES, "--navigator", "nosuch"], 2),
    "eval llm without model": (["pcx", "eval", MANIFEST, CASES, "--navigator", "llm"], 2),
    "eval unknown model": (
        ["pcx", "eval", MANIFEST, CASES, "--navigator", "llm", "--model", "nosuch"],
        2,
    ),
    "eval budget negative": (["pcx", "eval", MANIFEST, CASES, "--budget", "-1"], 2),
    "eval budget below the baseline": (["pcx", "eval", MANIFEST, CASES, "--budget", "10"], 2),
    "eval reserve huge": (["pcx", "eval", MANIFEST, CASES, "--reserve", HUGE], 2),
    "eval max-hops negative": (["pcx", "eval", MANIFEST, CASES, "--max-hops", "-1"], 2),
    "eval min-success nan": (["pcx", "eval", MANIFEST, CASES, "--min-success", "nan"], 2),
    "eval leaves missing": (["pcx", "eval", MANIFEST, CASES, "--leaves", "{missing}"], 2),
    "eval leaves a file": (["pcx", "eval", MANIFEST, CASES, "--leaves", "{file}"], 2),
    **{f"schema check {bad}": (["pcx", "schema", "--check", f"{{{bad}}}"], 2) for bad in BAD_FILES},
    "build path missing": (["pcx", "build", "{missing}", "--kind", "docs", "--out", "{out}"], 2),
    "build path a file": (["pcx", "build", "{file}", "--kind", "docs", "--out", "{out}"], 2),
    "build path dev-zero": (["pcx", "build", "{zero}", "--kind", "docs", "--out", "{out}"], 2),
    "build unknown kind": (["pcx", "build", "{docs}", "--kind", "nosuch", "--out", "{out}"], 2),
    "build unknown preset": (_build("--preset", "nosuch"), 2),
    "build budget negative": (_build("--budgets", "-1"), 2),
    "build budget huge": (_build("--budgets", HUGE), 2),
    "build out a file": (["pcx", "build", "{docs}", "--kind", "docs", "--out", "{file}"], 2),
    "build out dev-zero": (["pcx", "build", "{docs}", "--kind", "docs", "--out", "{zero_out}"], 2),
    "build cache a folder": (_build("--incremental", "--cache", "{dir}"), 2),
    "build offline with model-dir": (_build("--model-dir", "{dir}"), 2),
    "build offline with model": (_build("--model", "nosuch"), 2),
    "build offline with endpoint": (_build("--endpoint", "http://127.0.0.1:1/v1"), 2),
    "build llm model-dir missing": (_build("--engine", "llm", "--model-dir", "{missing}"), 2),
    "build llm model-dir empty": (_build("--engine", "llm", "--model-dir", "{dir}"), 2),
    "build llm unknown model": (_build("--engine", "llm", "--model", "nosuch"), 2),
    "build max-collision negative": (_build("--max-collision", "-1"), 2),
    "build min-fidelity huge": (_build("--min-fidelity", HUGE), 2),
    "build max-repairs negative": (_build("--max-repairs", "-1"), 2),
    "unknown pcx command": (["pcx", "nosuch"], 2),
}


def _distill(*words: str, corpus: str = "{corpus}") -> list[str]:
    return ["distill", "--corpus", corpus, *words]


NO_CORPUS = "{nocorpus}"
DISTILL: dict[str, Row] = {
    "sync docs missing": (_distill("sync", "--docs", "{missing}", corpus=NO_CORPUS), 2),
    "sync docs a file": (_distill("sync", "--docs", "{file}", corpus=NO_CORPUS), 2),
    "sync docs dev-zero": (_distill("sync", "--docs", "{zero}", corpus=NO_CORPUS), 2),
    **{
        f"sync sessions {bad}": (_distill("sync", "--sessions", f"{{{bad}}}", corpus=NO_CORPUS), 2)
        for bad in BAD_FILES
    },
    "sync other sources": (_distill("sync", "--docs", "{dir}"), 2),
    "sync nothing to distil": (_distill("sync", corpus=NO_CORPUS), 2),
    "sync unknown summarizer": (_distill("sync", "--summarizer", "nosuch"), 2),
    "sync unknown embedder": (_distill("sync", "--embedder", "nosuch"), 2),
    "sync model without a model": (
        _distill("sync", "--docs", "{docs}", "--summarizer", "model", corpus=NO_CORPUS),
        2,
    ),
    "sync dims negative": (_distill("sync", "--docs", "{docs}", "--dims", "-1"), 2),
    "sync dims huge": (_distill("sync", "--docs", "{docs}", "--dims", HUGE), 2),
    "sync budget negative": (_distill("sync", "--docs", "{docs}", "--budget", "-1"), 2),
    "corpus a file": (_distill("stats", corpus="{file}"), 2),
    "corpus dev-zero": (_distill("stats", corpus="{zero}"), 2),
    "map no corpus": (_distill("map", corpus=NO_CORPUS), 2),
    **{f"map known {bad}": (_distill("map", "--known", f"{{{bad}}}"), 2) for bad in BAD_FILES},
    "map known wrong shape": (_distill("map", "--known", "{jsonlist}"), 2),
    "digest no corpus": (_distill("digest", "d:1", corpus=NO_CORPUS), 2),
    "digest unknown node": (_distill("digest", "no-such-node"), 2),
    "resolve no corpus": (_distill("resolve", "x", corpus=NO_CORPUS), 2),
    "resolve without a hash": (_distill("resolve"), 2),
    "recall no corpus": (_distill("recall", "kiln", corpus=NO_CORPUS), 2),
    "recall budget negative": (_distill("recall", "kiln", "--budget", "-1"), 2),
    "recall budget zero": (_distill("recall", "kiln", "--budget", "0"), 2),
    "recall unknown altitude": (_distill("recall", "kiln", "--altitude", "nosuch"), 2),
    "snapshot no corpus": (_distill("snapshot", corpus=NO_CORPUS), 2),
    "snapshot stray word": (_distill("snapshot", "x"), 2),
    "gc no corpus": (_distill("gc", corpus=NO_CORPUS), 2),
    "gc grace negative": (_distill("gc", "--grace", "-1"), 2),
    "gc grace huge": (_distill("gc", "--grace", HUGE), 2),
    "gc grace nan": (_distill("gc", "--grace", "nan"), 2),
    "stats no corpus": (_distill("stats", corpus=NO_CORPUS), 2),
    "watch no corpus": (_distill("watch", "--iterations", "1", corpus=NO_CORPUS), 2),
    "watch iterations negative": (_distill("watch", "--iterations", "-1"), 2),
    "watch interval negative": (_distill("watch", "--interval", "-1"), 2),
    "watch interval huge": (_distill("watch", "--interval", HUGE), 2),
    "watch debounce negative": (_distill("watch", "--debounce", "-1"), 2),
    "tools stray word": (_distill("tools", "x"), 2),
    "repair no corpus": (_distill("repair", corpus=NO_CORPUS), 2),
    "complete no corpus": (_distill("complete", corpus=NO_CORPUS), 2),
    "call no corpus": (_distill("call", "map", "{{}}", corpus=NO_CORPUS), 2),
    "call unknown tool": (_distill("call", "nosuch", "{{}}"), 2),
    "call malformed JSON": (_distill("call", "map", "{{"), 2),
    "call arguments not an object": (_distill("call", "map", "[1]"), 2),
    "call unknown node": (_distill("call", "digest", '{{"node_id": "no-such-node"}}'), 2),
    "call budget negative": (_distill("call", "recall", '{{"query": "kiln", "budget": -1}}'), 2),
    "unknown distill command": (_distill("nosuch"), 2),
}

TOP: dict[str, Row] = {
    "mistyped command": (["evl", "--profile", "retention"], 2),
    "mistyped distill": (["distil", "map"], 2),
}

ROWS: dict[str, Row] = {
    **{f"app {k}": v for k, v in APP.items()},
    **{f"eval {k}": v for k, v in EVAL.items()},
    **{f"tables {k}": v for k, v in TABLES.items()},
    **{f"pcx {k}": v for k, v in PCX.items()},
    **{f"distill {k}": v for k, v in DISTILL.items()},
    **{f"top {k}": v for k, v in TOP.items()},
}

SUBCOMMANDS = {
    ("app",),
    ("eval",),
    ("tables",),
    *(("pcx", name) for name in ("validate", "show", "eval", "schema", "build")),
    *(
        ("distill", name)
        for name in (
            "sync",
            "map",
            "digest",
            "resolve",
            "recall",
            "snapshot",
            "gc",
            "stats",
            "watch",
            "tools",
            "repair",
            "complete",
            "call",
        )
    ),
}


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("bad-inputs")
    docs = base / "docs"
    docs.mkdir()
    (docs / "kiln.md").write_text("# Kiln\n\nFire to cone 6 for stoneware.\n", encoding="utf-8")
    folder = base / "a-folder"
    folder.mkdir()
    (folder / "x.md").write_text("# X\n\nother text\n", encoding="utf-8")
    bad = base / "bad.json"
    bad.write_text('{"seeds": [17', encoding="utf-8")
    text = base / "notes.txt"
    text.write_text("just some words\n", encoding="utf-8")
    jsonlist = base / "list.json"
    jsonlist.write_text("[1, 2, 3]", encoding="utf-8")
    ghost = base / "ghost-cases.json"
    ghost.write_text(json.dumps([{"query": "q", "target": "ghost"}]), encoding="utf-8")
    a_file = base / "a-file"
    a_file.write_text("x", encoding="utf-8")
    zero_out = base / "zero-link"
    zero_out.symlink_to("/dev/zero")
    nocorpus = base / "no-corpus"
    nocorpus.mkdir()
    corpus = base / "corpus"
    code = cli.main(["distill", "--corpus", str(corpus), "sync", "--docs", str(docs)])
    assert code == 0
    return {
        "missing": str(base / "missing.json"),
        "dir": str(folder),
        "zero": "/dev/zero",
        "badjson": str(bad),
        "text": str(text),
        "jsonlist": str(jsonlist),
        "ghostcases": str(ghost),
        "docs": str(docs),
        "corpus": str(corpus),
        "nocorpus": str(nocorpus),
        "out": str(base / "out"),
        "report": str(base / "report.json"),
        "file": str(a_file),
        "zero_out": str(zero_out),
    }


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing a command writes by default lands in the user's folders."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PICOCONTEXT_DATA_DIR", str(tmp_path / "data"))
    for name in ("PICOCONTEXT_MODEL", "PICOCONTEXT_MODEL_DIR", "PICOCONTEXT_SMOKE_REPORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("PICOCONTEXT_SMOKE_IMAGE", raising=False)
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    monkeypatch.chdir(tmp_path)  # default outputs (out/...) under the test's folder


def _fill(words: list[str], places: dict[str, str]) -> list[str]:
    return [w.format(**places) for w in words]


# The rows whose error is said by a parser above the subcommand.
PROGS = {
    "top mistyped command": "picocontext",
    "top mistyped distill": "picocontext",
    "pcx unknown pcx command": "picocontext pcx",
    "distill unknown distill command": "picocontext distill",
}


def _prog(name: str, words: list[str]) -> str:
    """The (sub)command as typed; ``picocontext app`` when no command was (the default)."""
    if name in PROGS:
        return PROGS[name]
    if words[0] == "distill":
        return f"picocontext distill {words[3]}"
    if words[0] == "pcx":
        return f"picocontext pcx {words[1]}"
    if words[0].startswith("-"):
        return "picocontext app"
    return f"picocontext {words[0]}"


def _run(
    capsys: pytest.CaptureFixture[str], argv: list[str], main: Callable[[list[str]], int]
) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_every_subcommand_has_rows() -> None:
    covered: set[tuple[str, ...]] = set()
    for words, _ in ROWS.values():
        if words[0] == "distill":
            covered.add(("distill", words[3]))
        elif words[0] == "pcx":
            covered.add(("pcx", words[1]))
        elif words[0] in ("eval", "tables", "app"):
            covered.add((words[0],))
    assert SUBCOMMANDS - covered == set()
    assert set(cli.find_commands()) == {"app", "eval", "pcx", "distill", "tables"}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_a_bad_input_is_one_error_line_with_the_exit_code(
    name: str, places: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    words, code = ROWS[name]
    argv = _fill(words, places)
    got, _, err = _run(capsys, argv, cli.main)
    lines = err.splitlines()
    assert (got, len(lines)) == (code, 1), (argv, err)
    prog = _prog(name, words)
    assert lines[0].startswith(f"{prog}: error: "), (argv, err)
    assert "Traceback" not in err


@pytest.mark.parametrize("name", sorted(CONVERSATION))
def test_a_bad_conversation_is_one_line(
    name: str, places: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _fill(CONVERSATION[name], places)
    got, _, err = _run(capsys, argv, cli.main)
    assert got not in (0, cli.EXIT_BUG) and len(err.splitlines()) == 1, (argv, err)
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("command", "prog", "words"),
    [
        ("pcx", "pcx show", ["show", "{missing}"]),
        ("pcx", "pcx eval", ["eval", MANIFEST, CASES, "--navigator", "nosuch"]),
        ("eval", "picocontext-eval", ["--config", "{badjson}"]),
        ("eval", "picocontext-eval", ["--bogus"]),
        ("distill", "picocontext-distill map", ["--corpus", "{nocorpus}", "map"]),
        ("distill", "picocontext-distill gc", ["--corpus", "{corpus}", "gc", "--grace", "-1"]),
    ],
)
def test_the_old_names_say_their_own_name(
    command: str,
    prog: str,
    words: list[str],
    places: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = _fill(words, places)
    got, _, err = _run(capsys, argv, lambda a: cli.run_command(command, a, prog=prog.split()[0]))
    assert (got, len(err.splitlines())) == (2, 1), (argv, err)
    assert err.startswith(f"{prog}: error: "), err


def test_a_usage_error_points_at_the_help_of_its_command(
    places: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    for argv, prog in (
        (["eval", "--bogus"], "picocontext eval"),
        (["pcx", "show", MANIFEST, "--mode", "nosuch"], "picocontext pcx show"),
        (["distill", "gc", "--grace", "-1"], "picocontext distill gc"),
        (["app", "--smoke", "--bogus"], "picocontext app"),
    ):
        code, _, err = _run(capsys, argv, cli.main)
        assert code == 2 and err.rstrip().endswith(f" — see {prog} --help"), (argv, err)


def test_no_default_output_was_written(
    places: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A refused command writes nothing: no report, no journal, no corpus.
    for words, _ in list(EVAL.values())[:6] + list(DISTILL.values())[:4]:
        cli.main(_fill(words, places))
    capsys.readouterr()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written == []
    assert not os.listdir(places["nocorpus"])
