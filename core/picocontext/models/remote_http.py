"""A small, strict HTTP client for OpenAI-compatible inference servers (standard library only).

Why no SDK and no httpx: the backend needs four things (a JSON GET, a streamed JSON POST,
bounded retries, and cancellation that can interrupt a blocking read), and ``http.client``
does all of them without a dependency. Cancellation closes the socket from a watcher thread,
so a request blocked in a long prefill returns at once instead of waiting for the server.

Errors, all :class:`picocontext.errors.ModelError` with one line a user can act on::

    RemoteError
    ├── RemoteUnreachable   refused connection, unknown host, timeouts, 5xx after retries
    ├── RemoteRefused       401/403 (API key), 404 (wrong base URL), other 4xx
    ├── RemoteModelMissing  the server does not list the requested model
    └── RemoteProtocolError a body that is not the documented shape

Connection errors, timeouts, dropped streams, 429 and 5xx are retried a bounded number of
times with exponential backoff; everything else fails at once. The API key is sent as a
bearer header and never appears in a message, a repr or a report.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from picocontext.cancel import CancelToken
from picocontext.errors import Cancelled, ModelError

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


class RemoteError(ModelError):
    """A remote inference server could not be used (the message says what to change)."""


class RemoteUnreachable(RemoteError):
    """No usable answer: connection refused or reset, unknown host, timeouts, 5xx."""


class RemoteRefused(RemoteError):
    """The server answered with a 4xx status."""


class RemoteModelMissing(RemoteError):
    """The server does not serve the requested model."""


class RemoteProtocolError(RemoteError):
    """The server's answer is not the documented OpenAI-compatible shape."""


class _Retry(Exception):
    """Internal: one attempt failed in a way worth retrying."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Endpoint:
    """A parsed base URL such as ``http://127.0.0.1:8080/v1`` (credentials are refused)."""

    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, base_url: str) -> Endpoint:
        parts = urllib.parse.urlsplit(base_url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RemoteRefused(
                f"--base-url {base_url!r} is not an http(s) URL; pass the server's OpenAI base, "
                "e.g. http://127.0.0.1:8080/v1"
            )
        if parts.username or parts.password:
            raise RemoteRefused(
                "--base-url must not carry credentials; put the key in PICOCONTEXT_API_KEY"
            )
        if parts.query or parts.fragment:
            raise RemoteRefused(f"--base-url {base_url!r} must not have a query or fragment")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise RemoteRefused(f"--base-url {base_url!r} has an invalid port") from None
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"


@dataclass
class ClientSettings:
    """Timeouts in seconds; ``retries`` extra attempts after the first, backoff doubling.
    ``read_timeout`` is how long the socket may stay silent (a long prefill on a slow CPU
    sends nothing for minutes), not a limit on the whole request."""

    connect_timeout: float = 10.0
    read_timeout: float = 900.0
    retries: int = 3
    backoff: float = 0.5
    sleep: Callable[[float], None] = time.sleep


@dataclass
class HTTPClient:
    """JSON and server-sent-event requests against one :class:`Endpoint`."""

    endpoint: Endpoint
    api_key: str | None = field(default=None, repr=False)
    settings: ClientSettings = field(default_factory=ClientSettings)
    retries_used: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- public ---------------------------------------------------------------------------
    def get_json(self, path: str, cancel: CancelToken | None = None) -> Any:
        return self._with_retries(lambda: self._once("GET", path, None, cancel, _read_json), cancel)

    def post_json(self, path: str, body: dict[str, Any], cancel: CancelToken | None = None) -> Any:
        data = json.dumps(body).encode("utf-8")
        return self._with_retries(
            lambda: self._once("POST", path, data, cancel, _read_json), cancel
        )

    def post_events(
        self, path: str, body: dict[str, Any], cancel: CancelToken | None = None
    ) -> list[dict[str, Any]]:
        """POST with ``stream: true`` and return every JSON event up to ``[DONE]``.

        A stream that ends without ``[DONE]`` counts as a dropped connection (retried)."""
        data = json.dumps({**body, "stream": True}).encode("utf-8")
        events: list[dict[str, Any]] = self._with_retries(
            lambda: self._once("POST", path, data, cancel, _read_events), cancel
        )
        return events

    # -- attempts -------------------------------------------------------------------------
    def _with_retries(self, attempt: Callable[[], Any], cancel: CancelToken | None) -> Any:
        settings = self.settings
        last = ""
        for number in range(settings.retries + 1):
            try:
                return attempt()
            except _Retry as retry:
                _cancelled(cancel)  # a stream cut by cancellation is not a server fault
                last = retry.reason
            if number < settings.retries:
                with self._lock:
                    self.retries_used += 1
                settings.sleep(settings.backoff * (2**number))
        tries = settings.retries + 1
        raise RemoteUnreachable(
            f"{self.endpoint.url} gave no usable answer after {tries} attempt"
            f"{'s' if tries != 1 else ''}: {last}"
        )

    def _once(
        self,
        method: str,
        path: str,
        data: bytes | None,
        cancel: CancelToken | None,
        read: Callable[[http.client.HTTPResponse, str], Any],
    ) -> Any:
        if cancel is not None:
            cancel.check()
        url = self.endpoint.url + path
        conn = self._connection()
        done = threading.Event()
        if cancel is not None:
            _watch(cancel, conn, done)
        try:
            try:
                conn.connect()
                assert conn.sock is not None
                conn.sock.settimeout(self.settings.read_timeout)
                conn.request(
                    method, self.endpoint.prefix + path, body=data, headers=self._headers()
                )
                response = conn.getresponse()
                _check_status(response, url, path)
                return read(response, url)
            except (Cancelled, RemoteError):
                raise
            except socket.gaierror as exc:
                raise RemoteUnreachable(
                    f"cannot resolve the host of {self.endpoint.url} ({exc.strerror or exc}); "
                    "check --base-url"
                ) from None
            except TimeoutError:
                _cancelled(cancel)
                raise _Retry(f"timed out ({url})") from None
            except ConnectionRefusedError:
                raise _Retry(
                    f"connection refused by {self.endpoint.url}; is the server running?"
                ) from None
            except (http.client.HTTPException, OSError) as exc:
                _cancelled(cancel)
                raise _Retry(f"connection to {url} failed ({type(exc).__name__}: {exc})") from None
        finally:
            done.set()
            conn.close()

    def _connection(self) -> http.client.HTTPConnection:
        e = self.endpoint
        timeout = self.settings.connect_timeout
        if e.scheme == "https":
            return http.client.HTTPSConnection(e.host, e.port, timeout=timeout)
        return http.client.HTTPConnection(e.host, e.port, timeout=timeout)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers


def _watch(cancel: CancelToken, conn: http.client.HTTPConnection, done: threading.Event) -> None:
    """Close ``conn``'s socket as soon as ``cancel`` is set, interrupting a blocking read."""

    def loop() -> None:
        while not done.wait(0.05):
            if cancel.cancelled:
                sock = conn.sock
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                return

    threading.Thread(target=loop, name="picocontext-http-cancel", daemon=True).start()


def _cancelled(cancel: CancelToken | None) -> None:
    if cancel is not None:
        cancel.check()


def _check_status(response: http.client.HTTPResponse, url: str, path: str) -> None:
    status = response.status
    if 200 <= status < 300:
        return
    detail = _error_detail(response.read(2000))
    if status in RETRYABLE_STATUS:
        raise _Retry(f"HTTP {status} from {url}{detail}")
    if status in (401, 403):
        raise RemoteRefused(
            f"{url} refused the request (HTTP {status}): set the server's key in "
            "PICOCONTEXT_API_KEY or OPENAI_API_KEY"
        )
    if status == 404 and path == "/models":
        raise RemoteRefused(
            f"{url} does not exist (HTTP 404); --base-url must be the server's OpenAI base, "
            "usually ending in /v1"
        )
    raise RemoteRefused(f"{url} refused the request (HTTP {status}){detail}")


def _error_detail(raw: bytes) -> str:
    """The server's own error message, on one line and short."""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    if isinstance(value, dict):
        error = value.get("error", value.get("message", value))
        if isinstance(error, dict):
            error = error.get("message", error)
        value = error
    line = " ".join(str(value).split())
    return f": {line[:240]}" if line else ""


def _read_json(response: http.client.HTTPResponse, url: str) -> Any:
    raw = response.read()
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise RemoteProtocolError(
            f"{url} answered with a body that is not JSON ({len(raw)} bytes)"
        ) from None


def _read_events(response: http.client.HTTPResponse, url: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for payload in _sse_payloads(response):
        if payload == "[DONE]":
            return events
        try:
            value = json.loads(payload)
        except ValueError:
            raise RemoteProtocolError(f"{url} streamed an event that is not JSON") from None
        if not isinstance(value, dict):
            raise RemoteProtocolError(f"{url} streamed an event that is not a JSON object")
        if "error" in value and "choices" not in value:
            raise RemoteRefused(
                f"{url} reported an error mid-stream{_error_detail(payload.encode())}"
            )
        events.append(value)
    raise _Retry(f"{url} closed the stream before [DONE]")


def _sse_payloads(response: http.client.HTTPResponse) -> Iterator[str]:
    """The ``data:`` payloads of a server-sent-event stream (comments and other fields skipped;
    multi-line data joined with newlines, as the SSE standard says)."""
    lines: list[str] = []
    while True:
        raw = response.readline()
        if not raw:
            if lines:
                yield "\n".join(lines)
            return
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if lines:
                yield "\n".join(lines)
                lines = []
            continue
        if line.startswith("data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(" ") else value)
