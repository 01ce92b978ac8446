"""The journal of a long run: each finished result, appended and fsynced.

A live comparison on a CPU runs for tens of minutes to hours; a kill, a sleeping laptop or a
crashed server must not lose the episodes that finished. ``picocontext eval`` appends every
result to a JSON-lines journal as it completes (one line, flushed and fsynced before the next
episode starts) and ``--resume`` reads it back, so finished work is never recomputed.

Line 1 is the header: what ran (the configuration's hash, backend, model, engine, decoding)
and the code that ran it. A journal whose header differs is refused, so results of two
configurations never mix. A line cut short by a kill -9 can only be the last one: it is
dropped (and said so), and the file is truncated back to its last whole line before
anything is appended.

The journal holds any pydantic model keyed by a field: ``picocontext eval`` journals each
:class:`EvaluationResult` by its plan order; the playground each finished policy's outcome
by policy name.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TextIO, TypeVar

from pydantic import BaseModel, ValidationError

from picocontext_diagnostics.errors import InvalidConfiguration
from picocontext_diagnostics.evaluation.config import EvaluationConfig
from picocontext_diagnostics.evaluation.report import EvaluationResult

__all__ = ["JOURNAL_KIND", "Journal", "journal_header", "result_journal"]

T = TypeVar("T", bound=BaseModel)

JOURNAL_KIND = "picocontext-evaluation-journal"
JOURNAL_VERSION = 1


def journal_header(config: EvaluationConfig, identity: Mapping[str, Any]) -> dict[str, Any]:
    """The header line: the configuration's hash plus ``identity`` (backend, model, engine,
    decoding, code version: whatever makes two runs' results comparable)."""
    text = json.dumps(config.model_dump(mode="json"), sort_keys=True)
    return {
        "kind": JOURNAL_KIND,
        "version": JOURNAL_VERSION,
        "config_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        **{key: identity[key] for key in sorted(identity)},
    }


@dataclass
class Journal(Generic[T]):
    """An open journal: the results it already holds (by ``key``), and the file appended to."""

    path: Path
    header: dict[str, Any]
    model: type[T]
    key: Callable[[T], Hashable]
    results: dict[Hashable, T] = field(default_factory=dict)
    dropped: str | None = None  # why a torn last line was dropped, if one was
    _file: TextIO | None = None

    @classmethod
    def start(
        cls, path: Path, header: dict[str, Any], model: type[T], key: Callable[[T], Hashable]
    ) -> Journal[T]:
        """A new journal at ``path`` (replacing none: an existing one is refused, since it
        may hold an interrupted run's results)."""
        if path.exists() and path.stat().st_size > 0:
            raise InvalidConfiguration(
                f"{path} holds an interrupted run's results — add --resume to continue it, or "
                "delete the file to start over"
            )
        journal = cls(path=path, header=header, model=model, key=key)
        path.parent.mkdir(parents=True, exist_ok=True)
        journal._file = path.open("w", encoding="utf-8")
        journal._write(header)
        return journal

    @classmethod
    def resume(
        cls, path: Path, header: dict[str, Any], model: type[T], key: Callable[[T], Hashable]
    ) -> Journal[T]:
        """The journal at ``path`` (a new one if there is none), its results read back; a
        journal of another configuration or code is refused and left as it is."""
        if not path.exists() or path.stat().st_size == 0:
            return cls.start(path, header, model, key)
        raw = path.read_bytes()
        lines = raw.split(b"\n")
        kept = 0  # bytes of whole, valid lines
        try:
            found = json.loads(lines[0])
        except ValueError:
            raise InvalidConfiguration(
                f"{path} is not an evaluation journal (its first line is not JSON) — delete it "
                "or choose another --output"
            ) from None
        if not isinstance(found, dict) or found.get("kind") != JOURNAL_KIND:
            raise InvalidConfiguration(f"{path} is not an evaluation journal — delete it")
        if found != header:
            differs = sorted(k for k in {*found, *header} if found.get(k) != header.get(k))
            raise InvalidConfiguration(
                f"{path} was written by another run ({', '.join(differs)} differ) — run that "
                "command again, or delete the journal to start over; nothing was overwritten"
            )
        journal = cls(path=path, header=header, model=model, key=key)
        kept = len(lines[0]) + 1
        for number, line in enumerate(lines[1:], start=2):
            if not line.strip() and number == len(lines):
                break  # what follows the newline of the last whole line
            if number == len(lines):  # no newline: the write was cut, whatever it holds
                journal.dropped = f"line {number} of {path} is cut short (a killed write)"
                break
            try:
                result = model.model_validate_json(line)
            except (ValidationError, ValueError):
                journal.dropped = f"line {number} of {path} is cut short (a killed write)"
                break
            journal.results[key(result)] = result
            kept += len(line) + 1
        if journal.dropped is not None and kept < len(raw):
            with path.open("r+b") as handle:  # drop the torn tail before appending
                handle.truncate(kept)
        journal._file = path.open("a", encoding="utf-8")
        return journal

    def append(self, result: T) -> None:
        """One finished result, on disk before this returns."""
        self.results[self.key(result)] = result
        self._write(result.model_dump(mode="json"))

    def discard(self) -> None:
        """The run finished and its report holds every result: the journal goes."""
        self.close()
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _write(self, data: dict[str, Any]) -> None:
        assert self._file is not None
        self._file.write(json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())


def result_journal(path: Path, header: dict[str, Any], resume: bool) -> Journal[EvaluationResult]:
    """The journal of ``picocontext eval``: evaluation results by plan order."""
    opened = Journal.resume if resume else Journal.start
    return opened(path, header, EvaluationResult, _plan_order)


def _plan_order(result: EvaluationResult) -> int:
    return result.order
