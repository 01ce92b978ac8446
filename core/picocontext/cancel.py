"""Cooperative cancellation shared by the session, backends and long-running workers."""

from __future__ import annotations

import threading

from picocontext.errors import Cancelled


class CancelToken:
    """A thread-safe flag. Long work calls :meth:`check` at every stage; a UI thread calls
    :meth:`cancel`. Cancellation is sticky: once set it stays set."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled()


def check(token: CancelToken | None) -> None:
    """Raise :class:`Cancelled` if ``token`` is set; ``None`` never cancels."""
    if token is not None:
        token.check()
