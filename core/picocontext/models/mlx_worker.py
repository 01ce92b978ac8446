"""The one thread that touches MLX.

MLX streams are thread-affine and an unevaluated array must never cross threads, so every MLX
call of a model (load, prefill, decode, cache trimming) runs on a single daemon thread that
the model owns; callers on any thread submit work and wait, and only Python values come back.
Every worker is closed at interpreter exit by a thread that ends normally, since MLX's
per-thread streams abort the process when a dying daemon thread tears them down.
"""

from __future__ import annotations

import atexit
import queue
import sys
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from picocontext.errors import ModelError

T = TypeVar("T")


class MLXWorker:
    """A daemon thread that runs submitted callables in order; the only thread touching MLX."""

    def __init__(self, name: str = "picocontext-mlx") -> None:
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._closed = False
        self._thread.start()
        _WORKERS.add(self)

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                _release_thread_streams()
                return
            fn, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def call(self, fn: Callable[[], T]) -> T:
        if self._closed:
            raise ModelError("The MLX model was closed")
        if threading.current_thread() is self._thread:
            return fn()
        future: Future[T] = Future()
        self._queue.put((fn, future))
        return future.result()

    def close(self, timeout: float = 30.0) -> None:
        """Stop the thread and wait for it: MLX's per-thread streams must be torn down by a
        thread that exits normally, not by interpreter shutdown killing a daemon thread."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)


def _release_thread_streams() -> None:
    """Destroy this thread's MLX streams before it exits; left to thread teardown they can
    abort the process at exit ("terminate called without an active exception")."""
    mx = sys.modules.get("mlx.core")
    if mx is not None:
        mx.synchronize()
        mx.clear_streams()


_WORKERS: weakref.WeakSet[MLXWorker] = weakref.WeakSet()


@atexit.register
def _close_workers() -> None:
    for worker in list(_WORKERS):
        worker.close()
