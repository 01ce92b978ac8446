"""The OpenAI-compatible client retries transient failures with exponential backoff (B17)
and fails at once, with the server's message, on a client error."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from picocontext.backend import ChatMessage
from picocontext.build.engines.openai_compat import OpenAICompatChat
from picocontext.build.errors import EngineError


class _Resp(io.BytesIO):
    def __enter__(self) -> _Resp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ok(text: str) -> _Resp:
    body = {"choices": [{"message": {"content": text}}], "usage": {"completion_tokens": 3}}
    return _Resp(json.dumps(body).encode())


def _http(code: int) -> urllib.error.HTTPError:
    return urllib.error.HTTPError("u", code, "err", {}, io.BytesIO(b"server says no"))  # type: ignore[arg-type]


MSG = [ChatMessage(role="user", content="hi")]


def test_transient_errors_back_off_exponentially_then_succeed() -> None:
    outcomes: list[Any] = [_http(503), urllib.error.URLError("down"), _ok('{"a": 1}')]
    sent: list[urllib.request.Request] = []

    def opener(req: urllib.request.Request, timeout: float) -> Any:
        sent.append(req)
        item = outcomes.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    slept: list[float] = []
    client = OpenAICompatChat("http://x/v1", "m", "key", opener=opener, sleep=slept.append)
    resp = client.chat(MSG, max_tokens=10)
    assert resp.text == '{"a": 1}' and resp.generated_tokens == 3
    assert slept == [1.0, 2.0]
    assert sent[0].get_header("Authorization") == "Bearer key"
    body = json.loads(sent[0].data or b"{}")  # type: ignore[arg-type]
    assert body["response_format"] == {"type": "json_object"} and body["temperature"] == 0


def test_client_errors_are_not_retried() -> None:
    calls = 0

    def opener(req: urllib.request.Request, timeout: float) -> Any:
        nonlocal calls
        calls += 1
        raise _http(401)

    client = OpenAICompatChat("http://x", "m", opener=opener, sleep=lambda s: None)
    with pytest.raises(EngineError, match="401"):
        client.chat(MSG, max_tokens=5)
    assert calls == 1


def test_gives_up_after_max_retries_with_a_message() -> None:
    def opener(req: urllib.request.Request, timeout: float) -> Any:
        raise TimeoutError("slow")

    slept: list[float] = []
    client = OpenAICompatChat("http://x", "m", max_retries=3, opener=opener, sleep=slept.append)
    with pytest.raises(EngineError, match="after 3 attempts"):
        client.chat(MSG, max_tokens=5)
    assert slept == [1.0, 2.0]


def test_endpoint_must_be_http() -> None:
    with pytest.raises(EngineError, match="http"):
        OpenAICompatChat("ftp://x", "m")
