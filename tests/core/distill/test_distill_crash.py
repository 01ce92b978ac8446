"""Crash safety (P22): SIGKILL a worker process at random points of its sweeps, at least 20
times; after every kill no node lists a child id whose node is gone (what readers meet before
the next sync), the restarted worker converges to the same node table as a clean build (P7),
every mark made before a crash is processed, and every live summary blob still verifies. The
worker runs the library defaults (deferred views), so kills also land while it writes pending
view summaries.

Each round waits for the child to finish importing, then kills it after a random delay that
falls inside its sweep (L0 work, rollup or the commits between). About 30 s: every round
starts a fresh Python process, which is the point of the test."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from picocontext.distill import DistillConfig, Distiller, Unit
from picocontext.distill.testing import FakeSummarizer, VariedEmbedder

CONFIG: dict[str, str | int] = {
    "recipe_version": "v1",
    "max_fan_in": 4,
    "sub_bits": 2,
    "cluster_bits": 3,
}

CHILD = textwrap.dedent(
    """
    import sys
    from picocontext.distill import DistillConfig, Distiller
    from picocontext.distill.testing import FakeSummarizer, VariedEmbedder

    config = DistillConfig(**{config!r})
    d = Distiller.open(sys.argv[1], FakeSummarizer(delay=0.01), VariedEmbedder(), config=config)
    print("ready", flush=True)
    while d.store.pending_count() or d.store.meta_get("rollup_needed") == "1":
        d.sweep()
    d.complete()  # deferred views: kills also land while pending summaries are written
    print("converged", flush=True)
    """
).format(config=CONFIG)


def _open(root: Path) -> Distiller:
    return Distiller.open(
        root, FakeSummarizer(), VariedEmbedder(), config=DistillConfig.model_validate(CONFIG)
    )


def _unit(i: int, version: int) -> Unit:
    topic = ["pump", "valve", "motor", "seal"][i % 4]
    return Unit(
        source_kind="note",
        unit_id=f"n{i:02d}",
        text=f"{topic} {i} inspection round {version}",
        scopes=(("site", f"s{i % 5}"), ("shift", f"t{version % 2}")),
    )


def _dangling_children(corpus: Path) -> list[tuple[str, str]]:
    """(parent, child id) pairs whose child is not in the store: what a reader would meet."""
    d = _open(corpus)
    try:
        nodes = {n.id: n for n in d.store.nodes()}
    finally:
        d.close()
    return [(n.id, c) for n in nodes.values() for c in n.child_ids if c not in nodes]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
def test_kill_nine_during_sweeps_converges_to_a_clean_build(tmp_path: Path) -> None:
    rnd = random.Random(20261130)
    corpus = tmp_path / "corpus"
    script = tmp_path / "child.py"
    script.write_text(CHILD, encoding="utf-8")
    final: dict[str, Unit] = {}
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    kills = rounds = 0
    while kills < 20:
        rounds += 1
        assert rounds <= 60, f"only {kills} kills landed mid-sweep in 60 rounds"
        marker = _open(corpus)
        for _ in range(rnd.randint(6, 14)):  # marks are made while no worker runs
            i = rnd.randrange(40)
            if final.get(f"n{i:02d}") and rnd.random() < 0.2:
                marker.mark_delete("note", f"n{i:02d}")
                del final[f"n{i:02d}"]
            else:
                unit = _unit(i, rounds)
                marker.mark(unit)
                final[unit.unit_id] = unit
        marker.close()
        child = subprocess.Popen(
            [sys.executable, str(script), str(corpus)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert child.stdout is not None
        ready = child.stdout.readline()  # imports done: the kill lands inside the sweep work
        assert ready.strip() == b"ready", child.stderr.read() if child.stderr else b""
        time.sleep(rnd.uniform(0.0, 0.45))
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            child.wait()
            kills += 1
            assert _dangling_children(corpus) == [], f"after kill {kills}"
        else:
            _, err = child.communicate()
            assert child.returncode == 0, err.decode()
    # Restart once more without killing: recovery must finish the interrupted work.
    done = subprocess.run(
        [sys.executable, str(script), str(corpus)], capture_output=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()
    recovered = _open(corpus)
    assert recovered.store.pending_count() == 0
    assert recovered.pending_ids() == []
    clean = _open(tmp_path / "clean")
    clean.apply(sorted(final.values(), key=lambda u: u.unit_id))
    assert clean.pending_ids()  # the defaults defer the views (the shift scopes, clusters)
    clean.complete()
    assert recovered.table() == clean.table()
    assert {n.source_id for n in recovered.store.nodes(0)} == set(final)
    for node in recovered.store.nodes():
        assert recovered.cas.retrieve_text(node.summary_hash)
    assert kills >= 20
