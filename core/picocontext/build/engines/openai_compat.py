"""A :class:`~picocontext.backend.ChatModel` over an OpenAI-compatible ``/chat/completions``
endpoint, with the standard library only (no httpx).

Transient failures (timeouts, connection errors, 429 and 5xx) are retried with exponential
backoff -- the peer retried immediately (B17); other 4xx fail at once with the server's message.
Token counts use the 4-characters heuristic: a remote endpoint does not expose its tokenizer.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from picocontext.backend import ChatMessage, ModelResponse, ToolSpec
from picocontext.build.errors import EngineError
from picocontext.cancel import CancelToken
from picocontext.manifest.tokens import HeuristicCounter

Opener = Callable[[urllib.request.Request, float], Any]


def _default_open(request: urllib.request.Request, timeout: float) -> Any:
    return urllib.request.urlopen(request, timeout=timeout)


class OpenAICompatChat:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "",
        *,
        timeout: float = 120.0,
        max_retries: int = 4,
        backoff: float = 1.0,
        opener: Opener | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise EngineError(f"endpoint {base_url!r} must start with http:// or https://")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self._open = opener or _default_open
        self._sleep = sleep
        self._counter = HeuristicCounter()
        self.delays: list[float] = []

    @property
    def model_id(self) -> str:
        return f"openai-compat:{self.model}"

    def count_tokens(self, text: str) -> int:
        return self._counter.count(text)

    def chat(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        cancel: CancelToken | None = None,
    ) -> ModelResponse:
        body = {
            "model": self.model,
            "temperature": 0,
            "max_tokens": max_tokens,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "response_format": {"type": "json_object"},
        }
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode()
        last = ""
        start = time.monotonic()
        for attempt in range(self.max_retries):
            if cancel is not None:
                cancel.check()
            req = urllib.request.Request(
                f"{self.base_url}/chat/completions", data=data, headers=headers, method="POST"
            )
            try:
                with self._open(req, self.timeout) as resp:
                    payload = json.loads(resp.read().decode("utf-8"))
                text = payload["choices"][0]["message"].get("content") or ""
                usage = payload.get("usage") or {}
                return ModelResponse(
                    text=text,
                    generated_tokens=int(usage.get("completion_tokens") or 0),
                    prefill_tokens=usage.get("prompt_tokens"),
                    seconds=time.monotonic() - start,
                )
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode("utf-8", errors="replace")[:300]
                if exc.code != 429 and exc.code < 500:
                    raise EngineError(
                        f"endpoint refused the request ({exc.code}): {detail}"
                    ) from exc
                last = f"HTTP {exc.code}: {detail}"
            except (urllib.error.URLError, TimeoutError, OSError) as exc:
                last = str(exc)
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise EngineError(f"endpoint returned an unexpected body: {exc}") from exc
            if attempt + 1 < self.max_retries:
                delay = self.backoff * (2**attempt)
                self.delays.append(delay)
                self._sleep(delay)
        raise EngineError(f"LLM call failed after {self.max_retries} attempts: {last}")
