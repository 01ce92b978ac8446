"""Resuming an interrupted comparison: each finished policy's outcome, journaled.

A comparison on a real model takes many minutes per policy; closing the window, a crash or a
sleeping laptop should not cost the policies that finished. Every run journals each
finished policy's :class:`PolicyOutcome` (the evaluation journal's format: a header naming
the settings and the code, then one line per outcome, fsynced), in the user data folder
under the settings' hash. **Resume** in the window (and ``--resume`` for the headless smoke)
reuses those outcomes and runs only the policies left; a finished run deletes its journal.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from picocontext import __version__
from picocontext_diagnostics.backends import source_revision
from picocontext_diagnostics.evaluation.journal import JOURNAL_KIND, Journal
from picocontext_playground.results import PolicyOutcome
from picocontext_playground.settings import ComparisonSettings

__all__ = ["OutcomeJournal", "finished_count", "journal_path", "open_journal"]

OutcomeJournal = Journal[PolicyOutcome]


def _header(settings: ComparisonSettings) -> dict[str, Any]:
    """What must match for outcomes to be reused: every setting but the policies' list (a
    resumed run may add or drop columns; a policy's outcome does not depend on the others),
    and the code that ran them."""
    chosen = settings.model_dump(mode="json", exclude={"policies"})
    text = json.dumps(chosen, sort_keys=True)
    return {
        "kind": JOURNAL_KIND,
        "version": 1,
        "what": "playground comparison",
        "settings_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "picocontext_version": __version__,
        "source_revision": source_revision(),
    }


def journal_path(settings: ComparisonSettings) -> Path:
    from platformdirs import user_data_path

    digest = hashlib.sha256(json.dumps(_header(settings), sort_keys=True).encode()).hexdigest()
    return user_data_path("picocontext") / "comparisons" / "journals" / f"{digest[:16]}.jsonl"


def finished_count(settings: ComparisonSettings) -> int:
    """Policies of ``settings`` an interrupted run finished (0 when there is no journal). The
    window asks on every change of its controls; a journal's outcomes can be megabytes, so
    its policy names are read once per version of the file."""
    path = journal_path(settings)
    try:
        stat = path.stat()
    except OSError:
        return 0
    names = _journal_names(path, stat.st_mtime_ns, stat.st_size)
    return len(names & set(settings.policies))


@functools.lru_cache(maxsize=8)
def _journal_names(path: Path, mtime_ns: int, size: int) -> frozenset[str]:
    """The policy names of ``path``'s whole lines (the header excepted), at that version."""
    names = set()
    try:
        with path.open("rb") as handle:
            for number, line in enumerate(handle):
                if number and line.endswith(b"\n"):
                    names.add(_policy_name(line))
    except OSError:
        return frozenset()
    return frozenset(n for n in names if n is not None)


def _policy_name(line: bytes) -> str | None:
    """The ``policy.name`` of one journal line, without validating the whole outcome."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    policy = data.get("policy") if isinstance(data, dict) else None
    name = policy.get("name") if isinstance(policy, dict) else None
    return name if isinstance(name, str) else None


def open_journal(settings: ComparisonSettings, resume: bool) -> OutcomeJournal:
    """The run's journal: read back when resuming, else a new one (replacing what a previous
    interrupted run left: the user chose to run everything again)."""
    path = journal_path(settings)
    if resume:
        return Journal.resume(path, _header(settings), PolicyOutcome, _name)
    path.unlink(missing_ok=True)
    return Journal.start(path, _header(settings), PolicyOutcome, _name)


def _name(outcome: PolicyOutcome) -> str:
    return outcome.policy.name
