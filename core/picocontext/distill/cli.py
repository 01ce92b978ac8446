"""``picocontext distill`` (alias ``picocontext-distill``): build, sync and query a digest tree.

A corpus is a directory (default: the platform data dir ``picocontext/distill/default``). The
first ``sync`` records its sources and settings there, so later commands need no options.

    picocontext-distill --corpus DIR sync --docs docs/            # build or update
    picocontext-distill --corpus DIR map --prune-unchanged --known known.json
    picocontext-distill --corpus DIR digest digest:2:tenant
    picocontext-distill --corpus DIR resolve <hash>
    picocontext-distill --corpus DIR recall "what was decided" --budget 400
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from picocontext.cli import bounded, error_line, run_command
from picocontext.distill.agent import DigestTools, distill_tool_schemas, render_outline
from picocontext.distill.config import whitespace_tokens
from picocontext.distill.data import Altitude, SyncReport
from picocontext.distill.distiller import Distiller
from picocontext.distill.errors import ConfigError, NoCorpus, SourceConflict
from picocontext.distill.opening import (
    CONFIG_KEY,
    ModelSlot,
    OpenedCorpus,
    embedder_for,
    load_config,
    model_directory,
    open_distiller,
)
from picocontext.distill.sources import SourceAdapter
from picocontext.distill.store import NodeStore
from picocontext.errors import PicoContextError
from picocontext.files import InputFileError, read_text_bounded

# Numbers a user types are checked when parsed: a negative grace, interval or count has no
# meaning, and an int() or float() that accepted it would make the command do something else.
_MAX_SECONDS = 365 * 24 * 3600.0
MAX_DIMS = 65_536


# The argparse types of the numbers above (picocontext.cli.bounded).
_seconds = bounded(0, _MAX_SECONDS, label="seconds from 0 to a year")
_positive = bounded(1, math.inf, whole=True, label="a positive whole number")
_dims = bounded(1, MAX_DIMS, whole=True)
_count = bounded(0, math.inf, whole=True)


def default_corpus() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("picocontext")) / "distill" / "default"


def register(subparsers: Any) -> argparse.ArgumentParser:
    """``picocontext distill``: the parser, one subparser per subcommand, each with its
    ``func``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "distill",
        help="distil documents and conversations into a Merkle tree of summaries",
        description="Distil documents and conversations into a Merkle tree of summaries.",
    )
    parser.add_argument("--corpus", type=Path, default=None, help="corpus directory")
    sub = parser.add_subparsers(dest="distill_command", metavar="COMMAND", required=True)
    _add_commands(sub)
    for child in set(sub.choices.values()):
        child.set_defaults(func=_guarded(child.get_default("func")))
    return parser


def _add_commands(sub: Any) -> None:

    sync = sub.add_parser("sync", help="build or update the tree from its sources")
    sync.add_argument("--docs", action="append", default=[], help="a document folder")
    sync.add_argument("--sessions", action="append", default=[], help="a session SQLite file")
    sync.add_argument("--summarizer", choices=["fake", "model"], default=None)
    sync.add_argument(
        "--model",
        default=None,
        help="a known model name (for example smollm2-135m) or an MLX model directory, for "
        "--summarizer model and --embedder model",
    )
    sync.add_argument(
        "--embedder",
        choices=["lexical", "model"],
        default=None,
        help="lexical hashing (default, no model) or mean-pooled hidden states of --model",
    )
    sync.add_argument("--guard", choices=["regex", "none"], default=None)
    # The lexical vectors are dense: a width beyond 65,536 only fails later, for want of memory.
    sync.add_argument("--dims", type=_dims, default=None, help="lexical embedder width")
    sync.add_argument(
        "--budget",
        type=_positive,
        default=None,
        help="words per internal (rollup) summary, default 256 (a small model on a CPU is "
        "faster with ~60); leaves keep their source's budget: 128 for documents, 96 for turns",
    )
    sync.add_argument("--recipe", default=None, help="explicit recipe salt")
    sync.add_argument(
        "--replace",
        action="store_true",
        help="rebuild a corpus that holds other sources from the given ones (a corpus has "
        "one source at a time; without this a sync of different sources is refused)",
    )
    sync.add_argument("--json", action="store_true")
    sync.set_defaults(func=_sync)

    m = sub.add_parser("map", help="outline of the tree, optionally diffed")
    m.add_argument("--scope", default="")
    m.add_argument("--known", type=Path, default=None, help="JSON file from `snapshot`")
    m.add_argument("--prune-unchanged", action="store_true")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=_map)

    d = sub.add_parser("digest", help="a node's summary and its children")
    d.add_argument("node_id")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=_digest)

    r = sub.add_parser("resolve", help="find nodes by ContentHash or SemHash")
    r.add_argument("hash")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=_resolve)

    rc = sub.add_parser("recall", help="altitude-aware recall under a token budget")
    rc.add_argument("query")
    rc.add_argument("--budget", type=_positive, default=1500)
    rc.add_argument("--altitude", choices=[a.name.lower() for a in Altitude], default="auto")
    rc.add_argument("--scope", default="")
    rc.add_argument("--json", action="store_true")
    rc.set_defaults(func=_recall)

    snap = sub.add_parser(
        "snapshot", help="print nodeId -> contentHash (remember it for map --known)"
    )
    snap.set_defaults(func=_snapshot)
    g = sub.add_parser("gc", help="remove unreferenced summary blobs")
    g.add_argument("--grace", type=_seconds, default=3600.0, help="seconds (default 3600)")
    g.set_defaults(func=_gc)
    st = sub.add_parser("stats", help="node counts, pending marks, recipes")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=_stats)
    w = sub.add_parser("watch", help="poll the sources and sweep with the debounced worker")
    w.add_argument("--interval", type=_seconds, default=2.0, help="seconds between polls")
    w.add_argument("--debounce", type=_seconds, default=1.0)
    w.add_argument("--iterations", type=_count, default=0, help="stop after N polls (0: never)")
    w.set_defaults(func=_watch)
    tools = sub.add_parser("tools", help="print the map/digest/resolve/recall tool schemas")
    tools.set_defaults(func=_tools)
    repair = sub.add_parser(
        "repair", help="drop nodes whose blobs are corrupt or missing, then sync"
    )
    repair.set_defaults(func=_repair)
    complete = sub.add_parser(
        "complete",
        help="write every pending view summary now (views are otherwise summarised when "
        "digest or recall first needs them)",
    )
    complete.set_defaults(func=_complete)
    c = sub.add_parser("call", help="run one tool call as a model would")
    c.add_argument("name")
    c.add_argument("arguments", nargs="?", default="{}")
    c.set_defaults(func=_call)


Command = Callable[[argparse.Namespace], int]


def _guarded(func: Command) -> Command:
    """An error of the project as one line in the tree's format, with its exit code (2 bad
    input such as no corpus or an unknown node, 1 a failure while running)."""

    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except PicoContextError as exc:
            prog = getattr(args, "command_prog", "picocontext distill")
            print(error_line(prog, exc.message), file=sys.stderr)
            return exc.exit_code

    return run


def _print(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def _corpus(args: argparse.Namespace, write: bool = False) -> Path:
    """``--corpus`` (or the default), refused before any work unless it is a directory or
    can become one (and, for the commands that build, one this process may write)."""
    corpus = Path(args.corpus) if args.corpus else default_corpus()
    if corpus.exists() and not corpus.is_dir():
        raise ConfigError(f"--corpus {corpus} is not a directory; a corpus is a folder.")
    existing = next((p for p in (corpus, *corpus.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise ConfigError(f"--corpus {corpus}: {existing} is not a directory.")
    if write and existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"--corpus {corpus}: {existing} is not writable.")
    return corpus


def _stored_config(corpus: Path, must_exist: bool = True) -> dict[str, Any]:
    """The settings the first ``sync`` recorded in the corpus; a missing corpus is an error
    when ``must_exist`` (the commands that read one), otherwise an empty configuration."""
    path = corpus / "nodes.sqlite"
    if not path.exists():
        if must_exist:
            raise NoCorpus(str(corpus))
        return {}
    probe = NodeStore(path)
    try:
        return load_config(probe)
    finally:
        probe.close()


def _tools(args: argparse.Namespace) -> int:
    _print(distill_tool_schemas())
    return 0


class _Query:
    """An open corpus for the query commands: the store, the agent tools, and one model slot
    shared by the query embedder and the pending-view completer (the model loads at most
    once, and only if a query or a completion needs it)."""

    def __init__(self, corpus: Path) -> None:
        from picocontext.distill.cas import BlobStore

        self.corpus = corpus
        self.config = _stored_config(corpus)
        self.store = NodeStore(corpus / "nodes.sqlite")
        self.models = ModelSlot(self.config)
        self.completer = _Completer(corpus, self.config, self.models)
        try:
            self.tools = DigestTools(
                self.store,
                BlobStore(corpus / "cas"),
                whitespace_tokens,
                embedder_for(self.config, self.models),
                complete=self.completer,
            )
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.completer.close()
        self.models.close()
        self.store.close()


QueryCommand = Callable[[argparse.Namespace, _Query], int]


def _on_corpus(command: QueryCommand) -> Command:
    def run(args: argparse.Namespace) -> int:
        query = _Query(_corpus(args))
        try:
            return command(args, query)
        finally:
            query.close()

    return run


class _Completer:
    """Writes pending (deferred) view summaries when digest/recall first needs them; opens
    the distiller, and so loads the summarizer model, only if that happens."""

    def __init__(self, corpus: Path, config: dict[str, Any], models: ModelSlot) -> None:
        self._corpus = corpus
        self._config = config
        self._models = models  # owned by the caller
        self._opened: OpenedCorpus | None = None

    def __call__(self, node_ids: list[str] | None) -> int:
        if self._opened is None:
            self._opened = open_distiller(self._corpus, self._config, self._models)
        return self._opened.distiller.complete(node_ids)

    def close(self) -> None:
        if self._opened is not None:
            self._opened.close()
            self._opened = None


SOURCE_KEYS = ("docs", "sessions")


def _sync_config(args: argparse.Namespace, stored: dict[str, Any]) -> dict[str, Any]:
    """The stored settings with the command line's on top. Sources given replace the stored
    ones as a set; sources and model directories are remembered absolutely, a model name
    stays a name."""
    config = dict(stored)
    if args.docs or args.sessions:  # the given sources replace the stored ones
        for key in SOURCE_KEYS:
            config[key] = [str(Path(p).resolve()) for p in getattr(args, key)]
    for key in ("summarizer", "model", "embedder", "guard", "dims", "budget", "recipe"):
        value = getattr(args, key)
        if value is not None:
            directory = model_directory(value) if key == "model" else None
            config[key] = str(directory.resolve()) if directory is not None else value
    return config


def _sources(config: dict[str, Any]) -> dict[str, list[str]]:
    return {key: sorted(config.get(key, [])) for key in SOURCE_KEYS if config.get(key)}


def _describe(sources: dict[str, list[str]]) -> str:
    return "; ".join(f"{key}: {', '.join(paths)}" for key, paths in sources.items())


def _claim(distiller: Distiller, corpus: Path, config: dict[str, Any], replace: bool) -> bool:
    """Bind the corpus to ``config``'s sources (the caller holds the corpus gate): a corpus
    built from other sources is refused, or with ``replace`` emptied first. True if it was
    emptied."""
    held = _sources(load_config(distiller.store))
    wanted = _sources(config)
    if not held or held == wanted:
        return False
    if not replace:
        raise SourceConflict(
            f"Corpus {corpus} holds other sources ({_describe(held)}); syncing "
            f"{_describe(wanted)} into it would mix two trees. Pass --replace to rebuild it "
            "from the new sources, or choose another --corpus."
        )
    distiller.reset()
    return True


def _sync(args: argparse.Namespace) -> int:
    corpus = _corpus(args, write=True)
    fresh = not (corpus / "nodes.sqlite").exists()
    config = _sync_config(args, _stored_config(corpus, must_exist=False))
    if not _sources(config):
        raise ConfigError("Nothing to distil: pass --docs DIR and/or --sessions FILE.")
    opened = open_distiller(corpus, config)
    distiller = opened.distiller
    try:
        with distiller.gate():  # the check, a replacement and the marks: one holder
            if _claim(distiller, corpus, config, args.replace):
                print(f"replaced the previous sources of {corpus}", file=sys.stderr)
            distiller.store.meta_set(CONFIG_KEY, json.dumps(config, sort_keys=True))
            reports = [distiller.sync(a) for a in opened.adapters]
    except BaseException:
        opened.close()
        if fresh:
            _remove_empty_corpus(corpus)
        raise
    try:
        if config.get("summarizer", "fake") == "fake" and not args.json:
            print(
                "summarizer: fake (deterministic l0(...)/rollup(...) texts); pass "
                "--summarizer model --model DIR for real summaries",
                file=sys.stderr,
            )
        return _report_sync(args, distiller, opened.adapters, reports)
    finally:
        opened.close()


def _remove_empty_corpus(corpus: Path) -> None:
    """A first sync that failed before any node was written leaves no corpus behind."""
    import shutil

    path = corpus / "nodes.sqlite"
    try:
        store = NodeStore(path)
        try:
            empty = store.count() == 0
        finally:
            store.close()
    except PicoContextError:
        return
    if empty:
        for name in ("nodes.sqlite", "nodes.sqlite-wal", "nodes.sqlite-shm", "nodes.sweep.lock"):
            (corpus / name).unlink(missing_ok=True)
        shutil.rmtree(corpus / "cas", ignore_errors=True)
        with contextlib.suppress(OSError):
            corpus.rmdir()  # only if nothing else is in it


def _report_sync(
    args: argparse.Namespace,
    distiller: Distiller,
    adapters: Sequence[SourceAdapter],
    reports: Sequence[SyncReport],
) -> int:
    """Print the reports; exit 1 when a unit failed or a source item was skipped."""
    counters = distiller.counters.snapshot()
    if args.json:
        _print({"reports": [r.model_dump(mode="json") for r in reports], "counters": counters})
    else:
        for adapter, report in zip(adapters, reports, strict=True):
            print(
                f"{adapter.source_kind}: {report.units} units, {report.unchanged} unchanged, "
                f"{report.marked} marked, {report.deletes} deleted, "
                f"{report.sweep.failures} failures, {len(report.skipped)} skipped, "
                f"{report.sweep.seconds:.2f}s"
            )
            for error in report.sweep.errors:
                print(f"  failure: {error}", file=sys.stderr)
            for item in report.skipped:
                print(f"  skipped: {item}", file=sys.stderr)
        print(
            f"nodes={distiller.store.count()} summaries={counters['summaries']} "
            f"shortcircuit={counters['shortcircuit']} dedup={counters['dedup']} "
            f"blocked={counters['guard_blocked']}"
        )
    incomplete = any(r.sweep.failures or r.skipped for r in reports)
    return 1 if incomplete else 0


def _watch(args: argparse.Namespace) -> int:
    """Poll every source; changed units are marked and the worker sweeps once the marks go
    quiet (debounce) or at the latest after 10x the debounce."""
    import time

    from picocontext.distill.data import SweepReport
    from picocontext.distill.worker import DistillWorker

    corpus = _corpus(args, write=True)
    config = _stored_config(corpus)
    opened = open_distiller(corpus, config)
    distiller, adapters = opened.distiller, opened.adapters

    def report(r: SweepReport) -> None:
        if r.processed or r.rollup is not None:
            print(
                f"sweep: {r.processed} changes, {r.failures} failures, {r.seconds:.2f}s", flush=True
            )

    worker = DistillWorker(distiller, debounce=args.debounce, on_sweep=report)
    worker.start()
    polls = 0
    try:
        while not args.iterations or polls < args.iterations:
            for adapter in adapters:
                synced = distiller.sync(adapter, sweep=False)
                if synced.marked or synced.deletes:
                    print(
                        f"{adapter.source_kind}: {synced.marked} changed, {synced.deletes} deleted",
                        flush=True,
                    )
            worker.poke()
            polls += 1
            if not args.iterations or polls < args.iterations:
                time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    finally:
        worker.stop(flush=True)
        opened.close()
    return 0


def _repair(args: argparse.Namespace) -> int:
    corpus = _corpus(args, write=True)
    config = _stored_config(corpus)
    opened = open_distiller(corpus, config)
    distiller, adapters = opened.distiller, opened.adapters
    try:
        dropped = distiller.repair()
        for node_id in dropped:
            print(f"dropped {node_id}")
        failures = sum(distiller.sync(a).sweep.failures for a in adapters)
        if not adapters:
            failures = distiller.sweep().failures
        print(f"repaired {len(dropped)} nodes, {failures} failures")
        return 1 if failures else 0
    finally:
        opened.close()


KNOWN_LIMIT = 64 * 1024 * 1024


def _known(path: Path) -> dict[str, str]:
    """The ``snapshot`` output a ``map --known`` diffs against: ``{nodeId: contentHash}``."""
    try:
        data = json.loads(read_text_bounded(path, KNOWN_LIMIT))
    except InputFileError as exc:
        raise ConfigError(f"--known {exc.message}") from None
    except RecursionError:
        raise ConfigError(f"--known {path} is not JSON (nested too deeply)") from None
    except ValueError as exc:
        raise ConfigError(f"--known {path} is not JSON ({exc})") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ConfigError(
            f"--known {path} must be a JSON object of node id -> content hash "
            "(the output of `picocontext distill snapshot`)"
        )
    return data


@_on_corpus
def _map(args: argparse.Namespace, q: _Query) -> int:
    known = _known(args.known) if args.known else None
    result = q.tools.map(args.scope or None, known, args.prune_unchanged)
    if args.json:
        _print(result.wire())
    else:
        print(render_outline(result, {n.id: n for n in q.store.nodes()}))
    return 0


@_on_corpus
def _digest(args: argparse.Namespace, q: _Query) -> int:
    view = q.tools.digest(args.node_id)
    if args.json:
        _print(view.wire())
    else:
        print(f"{view.node.id} [{view.node.kind}] {view.tokens} tokens")
        print(view.summary)
        for child in view.children:
            print(f"  - {child.id}: {child.summary[:100]}")
    return 0


@_on_corpus
def _resolve(args: argparse.Namespace, q: _Query) -> int:
    res = q.tools.resolve(args.hash)
    if args.json:
        _print(res.wire())
    else:
        print(f"exact: {res.exact.id if res.exact else '-'}")
        for match in res.near:
            print(f"near: {match.node.id} ({match.hamming_bits} bits)")
    return 0


@_on_corpus
def _recall(args: argparse.Namespace, q: _Query) -> int:
    pack = q.tools.recall(args.query, args.budget, Altitude[args.altitude.upper()], args.scope)
    if args.json:
        _print(pack.wire())
    else:
        print(
            f"altitude={pack.altitude.name.lower()} tokens={pack.tokens}/{pack.budget} "
            f"omitted={pack.omitted}"
        )
        for item in pack.items:
            print(f"--- {item.node_id} ({item.tokens} tokens)\n{item.text}")
    return 0


@_on_corpus
def _snapshot(args: argparse.Namespace, q: _Query) -> int:
    _print({n.id: n.content_hash for n in q.store.nodes()})
    return 0


@_on_corpus
def _gc(args: argparse.Namespace, q: _Query) -> int:
    from picocontext.distill.cas import BlobStore

    report = BlobStore(q.corpus / "cas").gc(q.store.live_blob_addresses(), args.grace)
    _print(report.model_dump(mode="json"))
    return 0


@_on_corpus
def _stats(args: argparse.Namespace, q: _Query) -> int:
    nodes = q.store.nodes()
    stats = {
        "corpus": str(q.corpus),
        "nodes": len(nodes),
        "by_level": {str(lv): sum(1 for n in nodes if n.level == lv) for lv in (0, 1, 2)},
        "pending": q.store.pending_count(),
        "pending_views": sum(1 for n in nodes if n.is_pending),
        "blocked": q.store.blocked_count(),
        "recipe": q.store.meta_get("recipe"),
        "semantic_recipe": q.store.meta_get("semantic_recipe"),
        "config": q.config,
    }
    if args.json:
        _print(stats)
    else:
        for key, value in stats.items():
            print(f"{key}: {value}")
    return 0


@_on_corpus
def _call(args: argparse.Namespace, q: _Query) -> int:
    _print(q.tools.call(args.name, args.arguments))
    return 0


@_on_corpus
def _complete(args: argparse.Namespace, q: _Query) -> int:
    written = q.tools.complete(None) if q.tools.complete is not None else 0
    print(f"wrote {written} pending view summaries")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m picocontext.distill.cli``: the ``distill`` command under its old name."""
    return run_command("distill", argv, prog="picocontext-distill", registrar=register)


if __name__ == "__main__":
    raise SystemExit(main())
