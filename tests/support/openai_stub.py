"""A scriptable OpenAI-compatible HTTP stub on 127.0.0.1 (a free port), and a real
``mlx_lm.server`` fixture body, for the remote backend's tests.

The stub answers ``GET /v1/models`` from ``models`` and every ``POST /v1/completions`` with
the next scripted :class:`Reply` (the last one repeats); it records each request body and its
headers, so tests can check what was sent. Nothing here listens beyond loopback.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Reply:
    """One scripted answer. ``events`` are streamed as SSE (``[DONE]`` appended unless
    ``cut`` ends the stream early); ``raw`` is sent as the body instead; ``delay`` waits
    first; ``status`` other than 200 sends ``raw`` (or a JSON error) with that status."""

    events: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    raw: bytes | None = None
    delay: float = 0.0
    cut: bool = False


def completion_events(
    text: str,
    *,
    prompt_tokens: int | None,
    completion_tokens: int | None,
    cached: int | None = None,
    finish: str = "stop",
    timings: dict[str, int] | None = None,
) -> list[dict[str, Any]]:
    """A streamed /v1/completions answer: the text in two chunks, then usage."""
    half = len(text) // 2
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "text": text[:half], "finish_reason": None}]},
        {"choices": [{"index": 0, "text": text[half:], "finish_reason": finish}]},
    ]
    usage: dict[str, Any] = {}
    if prompt_tokens is not None:
        usage["prompt_tokens"] = prompt_tokens
    if completion_tokens is not None:
        usage["completion_tokens"] = completion_tokens
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    last: dict[str, Any] = {"choices": [], "usage": usage} if usage else {"choices": []}
    if timings is not None:
        last["timings"] = timings
    return [*chunks, last]


@dataclass
class Stub:
    models: list[dict[str, Any]]
    replies: list[Reply]
    models_reply: Reply | None = None
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def next_reply(self) -> Reply:
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


def _handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path != "/v1/models":
                self._send(Reply(status=404, raw=b"Not Found"))
                return
            self._send(stub.models_reply or Reply(raw=json.dumps({"data": stub.models}).encode()))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            stub.bodies.append(body)
            stub.headers.append(dict(self.headers.items()))
            if self.path != "/v1/completions":
                self._send(Reply(status=404, raw=b"Not Found"))
                return
            self._send(stub.next_reply())

        def _send(self, reply: Reply) -> None:
            # The client may give up first (a timeout or cancellation test).
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._write(reply)

        def _write(self, reply: Reply) -> None:
            if reply.delay:
                time.sleep(reply.delay)
            if reply.status != 200 or reply.raw is not None:
                data = reply.raw if reply.raw is not None else b'{"error": "scripted"}'
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for event in reply.events:
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
            if not reply.cut:
                self.wfile.write(b"data: [DONE]\n\n")
            self.close_connection = True

    return Handler


def serve_stub(stub: Stub) -> Iterator[Stub]:
    """Body of a fixture: ``yield from serve_stub(Stub(...))``; the server stops afterwards."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stub))
    server.daemon_threads = True
    stub.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def mlx_server(model_dir: Path, workdir: Path) -> Iterator[str]:
    """Body of a fixture: a real ``mlx_lm.server`` on a free loopback port (the bench's
    launcher, so tests and measurements start it the same way); always killed afterwards."""
    from picocontext_diagnostics.bench.remote import serve_mlx_lm

    with serve_mlx_lm(model_dir, workdir) as url:
        yield url
