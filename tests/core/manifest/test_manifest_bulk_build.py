"""Loading holds off automatic cyclic collection (:func:`bulk_build`) and always restores the
collector's thresholds, whether the parse succeeds, fails or nests, without touching
``gc.isenabled()`` (the playground's GC guard owns that switch)."""

from __future__ import annotations

import gc
import json
import threading
from typing import Any

import pytest
from pydantic import ValidationError

from picocontext.manifest.model import Manifest, bulk_build


def _doc(n: int = 50) -> dict[str, Any]:
    leaves = {
        f"l{i}": {"what": f"leaf {i}", "when": "needed", "payload": {"ref": f"node://l{i}"}}
        for i in range(n)
    }
    return {
        "pcx_version": "0.2",
        "source": {"id": "t", "kind": "docs"},
        "variant": {"budget": 1000},
        "root": {"id": "r", "what": "root", "when": "always", "children": sorted(leaves)},
        "nodes": leaves,
    }


@pytest.fixture
def thresholds() -> Any:
    before = gc.get_threshold()
    gc.set_threshold(321, 7, 5)  # distinctive, so a restore to the defaults would show
    yield (321, 7, 5)
    gc.set_threshold(*before)


def test_collection_is_held_off_inside_and_restored_after(thresholds: tuple[int, ...]) -> None:
    enabled = gc.isenabled()
    with bulk_build():
        assert gc.get_threshold() == (0, 7, 5)
        with bulk_build():  # nested: still held
            assert gc.get_threshold()[0] == 0
        assert gc.get_threshold()[0] == 0  # the inner exit does not restore early
    assert gc.get_threshold() == thresholds
    assert gc.isenabled() == enabled


def test_every_parse_path_restores_the_thresholds(thresholds: tuple[int, ...]) -> None:
    raw = json.dumps(_doc()).encode()
    assert len(Manifest.model_validate_json(raw).nodes) == 50
    assert gc.get_threshold() == thresholds
    assert len(Manifest.model_validate(_doc()).nodes) == 50
    assert gc.get_threshold() == thresholds
    bad = _doc()
    bad["nodes"]["l3"]["what"] = "x" * 500
    with pytest.raises(ValidationError):
        Manifest.model_validate_json(json.dumps(bad))
    assert gc.get_threshold() == thresholds
    with pytest.raises(ValidationError):
        Manifest.model_validate(bad)
    assert gc.get_threshold() == thresholds


def test_the_load_pays_its_own_young_pass(thresholds: tuple[int, ...]) -> None:
    """After a large load the young generation is already collected, so the next caller's
    first allocation does not pay for the parse's garbage."""
    raw = json.dumps(_doc(2000)).encode()
    runs: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            runs.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        Manifest.model_validate_json(raw)
    finally:
        gc.callbacks.remove(seen)
    assert gc.get_count()[0] <= thresholds[0]
    # One young pass for the whole parse, instead of one per 321 allocations.
    assert len(runs) <= 2, runs


def test_gc_guard_switch_is_left_alone(thresholds: tuple[int, ...]) -> None:
    runs: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            runs.append(info["generation"])

    gc.disable()
    gc.callbacks.append(seen)
    try:
        Manifest.model_validate_json(json.dumps(_doc(2000)))
        assert not gc.isenabled()
        assert runs == []  # no collection on this (worker) thread while switched off
    finally:
        gc.callbacks.remove(seen)
        gc.enable()
    assert gc.get_threshold() == thresholds


def test_concurrent_loads_share_one_pause(thresholds: tuple[int, ...]) -> None:
    raw = json.dumps(_doc(400)).encode()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                Manifest.model_validate_json(raw)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert gc.get_threshold() == thresholds
