"""Independent episodes on a worker pool, with results in plan order whatever finishes first.

Why a pool at all: against an inference server (or several) the client mostly waits, so
running independent episodes concurrently uses the server's batching; each episode is still
one sequential, isolated session. Why plan order: a report must not depend on the number of
workers, so results and the ``on_done`` callback follow the plan, never completion order.
Cancellation (the caller's token, Ctrl-C, or any task's error) stops every worker: tasks get
an internal token that is set the moment anything goes wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

from picocontext import CancelToken

T = TypeVar("T")
Task = Callable[[CancelToken | None], T]


def run_ordered(
    tasks: Sequence[Task[T]],
    workers: int = 1,
    on_done: Callable[[T], None] | None = None,
    cancel: CancelToken | None = None,
) -> list[T]:
    """Run ``tasks`` (each receives a cancel token) on ``workers`` threads; return results
    in task order and call ``on_done`` in task order as soon as a prefix is complete."""
    if workers <= 1 or len(tasks) <= 1:
        return _sequential(tasks, on_done, cancel)
    stop = CancelToken()
    results: dict[int, T] = {}
    emitted = 0
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="picocontext-eval") as pool:
        futures: dict[Future[T], int] = {
            pool.submit(_guarded, task, stop): i for i, task in enumerate(tasks)
        }
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                if cancel is not None and cancel.cancelled:
                    stop.cancel()
                for future in done:
                    results[futures[future]] = future.result()
                while emitted in results:
                    if on_done is not None:
                        on_done(results[emitted])
                    emitted += 1
        except BaseException:
            stop.cancel()
            for future in pending:
                future.cancel()
            raise
    if cancel is not None:
        cancel.check()
    return [results[i] for i in range(len(tasks))]


def _sequential(
    tasks: Sequence[Task[T]], on_done: Callable[[T], None] | None, cancel: CancelToken | None
) -> list[T]:
    out: list[T] = []
    for task in tasks:
        if cancel is not None:
            cancel.check()
        result = task(cancel)
        out.append(result)
        if on_done is not None:
            on_done(result)
    return out


def _guarded(task: Task[T], stop: CancelToken) -> T:
    stop.check()
    return task(stop)
