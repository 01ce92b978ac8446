"""The GC guard pauses cyclic collection while any worker runs and restores it after the last."""

from __future__ import annotations

import gc

from picocontext_playground import gcguard


def test_nested_holds_restore_collection_after_the_last_release() -> None:
    assert gc.isenabled()
    gcguard.hold()
    gcguard.hold()
    assert not gc.isenabled()
    gcguard.release()
    assert not gc.isenabled()  # another worker still runs
    gcguard.release()
    assert gc.isenabled()
    gcguard.release()  # an extra release is harmless
    assert gc.isenabled()
