"""Keep Python's cyclic garbage collector on the GUI thread while worker threads run.

The collector runs in whichever thread happens to allocate. Run in a worker, it can free the
Python wrappers of Qt widgets (for example result columns that were just cleared) and so
delete widgets off the GUI thread, which crashes Qt at random places. While any worker runs,
collection is paused; the last worker to finish re-enables it and collects on the GUI thread.
Reference counting keeps freeing ordinary objects meanwhile.
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_holders = 0


def hold() -> None:
    """Call on the GUI thread just before starting a worker thread."""
    global _holders
    with _lock:
        if _holders == 0:
            gc.disable()
        _holders += 1


def release(collect: bool = True) -> None:
    """Call on the GUI thread after the worker thread has finished."""
    global _holders
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders:
            return
        gc.enable()
    if collect:
        gc.collect()
