"""The OpenAI-compatible backend: remote generation, local prompts and local token counts.

Why prompts stay local: budgets are only exact if they are charged on the tokens the model
consumes, so the chat template is rendered and tokenized here, with the model's own tokenizer
(loaded with ``transformers``; no weights, no MLX), exactly as :class:`MLXModel` does. The
request then carries those token ids where the server accepts token prompts (vLLM,
llama-server) and otherwise the text they decode to; either way the server's
``usage.prompt_tokens`` is compared with the local count and every mismatch is counted and
reported (:meth:`OpenAIBackend.report_notes`). Nothing the server says is taken as a token
count unchecked: generated counts are compared with a local re-encoding of the text, and
prefill is filled from the server's cached-prompt counts (llama.cpp ``timings.prompt_n``, the
OpenAI ``usage.prompt_tokens_details.cached_tokens`` of vLLM and mlx_lm.server) only where the
server reports them; elsewhere it is ``None`` (unknown), and the report says how many calls
that was.

Generation is greedy (temperature 0) through ``/v1/completions`` with ``stream: true``, capped
at the caller's ``max_tokens``, stopping at the model's end-of-turn tokens. With
``structured=True`` (``--decoding constrained``) the replies are held server-side to the JSON
schemas the local grammars are built from, where the dialect supports a JSON schema on
completions (vLLM ``structured_outputs``/``guided_json``, llama-server ``json_schema``): the
decision call, a tool step's call (or its JSON answer, when the task defines one) and a JSON
answer. The model then writes the bare call object, which is read as the call. What a JSON
schema cannot express (a tool step whose other branch is free text) and every reply on other
servers is decoded freely, counted, and :meth:`describe` says so.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from picocontext.backend import (
    ChatMessage,
    ModelInput,
    ModelResponse,
    ModelToolCall,
    Phase,
    PreparedPrompt,
    ToolSpec,
    function_spec,
)
from picocontext.cancel import CancelToken
from picocontext.errors import InvalidContext, ModelError
from picocontext.models.chatformat import ChatFormat, FormatBacked, HFChatTokenizer
from picocontext.models.constrained import decision_schema, tool_call_schema
from picocontext.models.local_tokenizer import load_tokenizer as load_tokenizer
from picocontext.models.local_tokenizer import stop_token_ids as stop_token_ids
from picocontext.models.remote_http import (
    ClientSettings,
    Endpoint,
    HTTPClient,
    RemoteModelMissing,
    RemoteProtocolError,
)
from picocontext.models.toolcalls import parse_text_tool_calls

API_KEY_ENVS = ("PICOCONTEXT_API_KEY", "OPENAI_API_KEY")
EMPTY_REQUEST = "empty prompt or output allowance"
MAX_REPORTED_MISMATCHES = 5


class ServerKind(StrEnum):
    """Which request dialect a server speaks (``auto`` reads ``owned_by`` of /v1/models)."""

    AUTO = "auto"
    VLLM = "vllm"
    LLAMA_CPP = "llama.cpp"
    GENERIC = "generic"


_OWNERS = {"vllm": ServerKind.VLLM, "llamacpp": ServerKind.LLAMA_CPP}
TOKEN_PROMPTS = frozenset({ServerKind.VLLM, ServerKind.LLAMA_CPP})
STRUCTURED = frozenset({ServerKind.VLLM, ServerKind.LLAMA_CPP})


def api_key_from_env() -> str | None:
    """The first non-empty of ``PICOCONTEXT_API_KEY`` and ``OPENAI_API_KEY``."""
    for name in API_KEY_ENVS:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


# -- tokenizer --------------------------------------------------------------------------------


def resolve_tokenizer_dir(model: str, tokenizer_dir: str | Path | None) -> Path:
    """The directory whose tokenizer renders and counts prompts: ``tokenizer_dir`` (a local
    model directory or a picocontext model name), else ``model`` when it is a local
    directory (mlx_lm.server serves a path), else ``model`` as a picocontext model name."""
    from picocontext.models.registry import MODELS, resolve_model

    for candidate in (tokenizer_dir, model):
        if candidate is None:
            continue
        path = Path(candidate).expanduser()
        if path.is_dir():
            if not (
                (path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file()
            ):
                raise ModelError(
                    f"{path} has no tokenizer.json or tokenizer_config.json; --tokenizer-dir must "
                    "be a model directory with the served model's tokenizer"
                )
            return path
        if str(candidate) in MODELS:
            return resolve_model(str(candidate)).path
        if candidate is tokenizer_dir:
            raise ModelError(
                f"--tokenizer-dir {candidate} is neither a directory nor a known model "
                f"({', '.join(sorted(MODELS))})"
            )
    raise ModelError(
        f"No local tokenizer for {model!r}: pass --tokenizer-dir DIR (the served model's own "
        "directory, or a picocontext model name) so prompts are rendered and counted locally"
    )


# -- accounting -------------------------------------------------------------------------------


@dataclass
class RemoteAccounting:
    """What the server reported against what was counted locally, over every call."""

    calls: int = 0
    prompt_checked: int = 0
    prompt_unreported: int = 0
    prompt_mismatches: list[tuple[int, int]] = field(default_factory=list)
    prompt_mismatch_count: int = 0
    generated_mismatch_count: int = 0
    generated_unreported: int = 0
    prefill_reported: int = 0
    prefill_unknown: int = 0
    cached_tokens: int = 0
    structured_calls: int = 0
    free_tool_calls: int = 0

    def merge(self, other: RemoteAccounting) -> RemoteAccounting:
        out = RemoteAccounting()
        for name in self.__dataclass_fields__:
            mine, theirs = getattr(self, name), getattr(other, name)
            value = (
                [*mine, *theirs][:MAX_REPORTED_MISMATCHES]
                if isinstance(mine, list)
                else mine + theirs
            )
            setattr(out, name, value)
        return out

    def notes(self) -> tuple[str, ...]:
        """Report lines: token checks, prefill knowledge and decoding, in plain words."""
        lines = [
            f"remote calls: {self.calls}; server prompt tokens equal the local count on "
            f"{self.prompt_checked - self.prompt_mismatch_count} of {self.prompt_checked} "
            f"reported ({self.prompt_unreported} calls without usage)"
        ]
        if self.prompt_mismatch_count:
            pairs = ", ".join(f"local {a} vs server {b}" for a, b in self.prompt_mismatches)
            lines.append(
                f"PROMPT TOKEN MISMATCH on {self.prompt_mismatch_count} calls ({pairs}): the "
                "server tokenized the text differently; budgets were charged on the local count"
            )
        lines.append(
            f"generated tokens: server count used, differing from a local re-encoding of the "
            f"text on {self.generated_mismatch_count} calls; {self.generated_unreported} calls "
            "without a server count used the local re-encoding"
        )
        lines.append(
            f"prefill: reported by the server on {self.prefill_reported} calls "
            f"({self.cached_tokens} prompt tokens served from its cache); unknown on "
            f"{self.prefill_unknown} calls, counted as the full prompt"
        )
        if self.structured_calls or self.free_tool_calls:
            lines.append(
                f"structured decoding on the server: {self.structured_calls} calls; tool or "
                f"decision calls decoded freely: {self.free_tool_calls}"
            )
        return tuple(lines)


@dataclass(frozen=True)
class _Usage:
    prompt: int | None
    completion: int | None
    cached: int | None
    prompt_computed: int | None


# -- the backend ------------------------------------------------------------------------------


class OpenAIBackend(FormatBacked):
    """TokenCounter + ModelBackend + ChatModel over an OpenAI-compatible server.

    Construct with :meth:`connect`, which checks ``/v1/models`` first (a model the server does
    not list is refused: some servers would otherwise try to download it). Thread-safe: every
    request opens its own connection, so evaluation workers may share one backend.
    """

    def __init__(
        self,
        client: HTTPClient,
        model: str,
        tokenizer: HFChatTokenizer,
        stop_ids: Sequence[int],
        *,
        kind: ServerKind,
        tokenizer_dir: Path,
        structured: bool = False,
    ) -> None:
        self._client = client
        self._model = model
        self._kind = kind
        self._tokenizer_dir = tokenizer_dir
        self._structured = structured
        self._format = ChatFormat(tokenizer)
        self._stop_ids = tuple(stop_ids)
        self._stops = tuple(dict.fromkeys(tokenizer.decode([i]) for i in self._stop_ids))
        self._accounting = RemoteAccounting()
        self._lock = threading.Lock()
        self.notes: tuple[str, ...] = ()
        self._format.set_settings_notes(self.settings_notes())

    @classmethod
    def connect(
        cls,
        base_url: str,
        model: str,
        *,
        tokenizer_dir: str | Path | None = None,
        server_kind: ServerKind | str = ServerKind.AUTO,
        structured: bool = False,
        api_key: str | None = None,
        settings: ClientSettings | None = None,
    ) -> OpenAIBackend:
        """Check the server serves ``model``, pick the dialect, load the local tokenizer."""
        client = HTTPClient(
            Endpoint.parse(base_url), api_key or api_key_from_env(), settings or ClientSettings()
        )
        owner = served_model_owner(client, model)
        kind = ServerKind(server_kind)
        if kind is ServerKind.AUTO:
            kind = _OWNERS.get(owner or "", ServerKind.GENERIC)
        directory = resolve_tokenizer_dir(model, tokenizer_dir)
        tokenizer, stops = load_tokenizer(directory)
        return cls(
            client,
            model,
            tokenizer,
            stops,
            kind=kind,
            tokenizer_dir=directory,
            structured=structured,
        )

    # -- settings -------------------------------------------------------------------------
    @property
    def model_id(self) -> str:
        return self._model

    @property
    def base_url(self) -> str:
        return self._client.endpoint.url

    @property
    def server_kind(self) -> ServerKind:
        return self._kind

    @property
    def token_prompts(self) -> bool:
        return self._kind in TOKEN_PROMPTS

    @property
    def structured_decoding(self) -> bool:
        """True when constraints are asked for *and* the server dialect can apply them."""
        return self._structured and self._kind in STRUCTURED

    def settings_notes(self) -> tuple[str, ...]:
        return (
            f"model: {self._model} on an OpenAI-compatible server ({self._kind.value})",
            f"prompt sent as: {'token ids' if self.token_prompts else 'text'}",
            f"structured decoding: {self._decoding_text()}",
        )

    def _decoding_text(self) -> str:
        if self.structured_decoding:
            return f"on ({self._kind.value} JSON schema)"
        if self._structured:
            return f"requested but not supported by a {self._kind.value} server; free decoding"
        return "off"

    def describe(self) -> dict[str, Any]:
        """Provenance for reports (never the API key)."""
        return {
            "backend": "openai",
            "model": self._model,
            "modelRevision": None,
            "baseUrl": self.base_url,
            "serverKind": self._kind.value,
            "promptsSentAs": "token ids" if self.token_prompts else "text",
            "tokenizerDir": str(self._tokenizer_dir),
            "sampling": "greedy",
            "prefixCache": "server-side (not reset between episodes)",
            "constrainedDecisions": self._decoding_text(),
            "apiKey": "set" if self._client.api_key else "none",
            "retries": self._client.retries_used,
            "notes": list(self.notes),
        }

    def accounting(self) -> RemoteAccounting:
        with self._lock:
            return self._accounting.merge(RemoteAccounting())

    def report_notes(self) -> tuple[str, ...]:
        return self.accounting().notes()

    def close(self) -> None:
        """Nothing to release: each request opens and closes its own connection."""

    # -- TokenCounter / ChatModel counting --------------------------------------------------
    # -- ModelBackend ---------------------------------------------------------------------
    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        phase = prompt.input.phase
        offers_calls = phase in (Phase.EDIT, Phase.TOOLS)
        schema = input_schema(prompt.input)
        return self._complete(
            list(prompt.token_ids), prompt.rendered, max_tokens, cancel, schema, offers_calls
        )

    def chat(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        cancel: CancelToken | None = None,
    ) -> ModelResponse:
        ids, rendered, _notes = self._format.prepare_chat(messages, tools)
        schema = tool_call_schema([function_spec(t) for t in tools]) if tools else None
        return self._complete(ids, rendered, max_tokens, cancel, schema, bool(tools))

    # -- one request ----------------------------------------------------------------------
    def _complete(
        self,
        ids: list[int],
        text: str,
        max_tokens: int,
        cancel: CancelToken | None,
        schema: dict[str, Any] | None,
        offers_calls: bool,
    ) -> ModelResponse:
        if not ids or max_tokens <= 0:
            raise InvalidContext(EMPTY_REQUEST)
        constrained = schema is not None and self.structured_decoding
        body = self._body(ids, text, max_tokens, schema if constrained else None)
        started = time.perf_counter()
        events = self._client.post_events("/completions", body, cancel)
        seconds = time.perf_counter() - started
        output, finish, usage = read_stream(events, self.base_url)
        return self._response(
            ids, output, finish, usage, max_tokens, seconds, constrained, offers_calls
        )

    def _body(
        self, ids: list[int], text: str, max_tokens: int, schema: dict[str, Any] | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._model,
            "prompt": ids if self.token_prompts else text,
            "max_tokens": max_tokens,
            "temperature": 0,
            "top_p": 1,
            "stop": list(self._stops),
            "stream_options": {"include_usage": True},
        }
        if self._kind is ServerKind.VLLM:
            body["stop_token_ids"] = list(self._stop_ids)
            if schema is not None:
                # v0.12+ reads structured_outputs; earlier releases read guided_json. Each
                # ignores the field it does not know.
                body["structured_outputs"] = {"json": schema}
                body["guided_json"] = schema
        elif self._kind is ServerKind.LLAMA_CPP:
            body["cache_prompt"] = True
            if schema is not None:
                body["json_schema"] = schema
        return body

    def _response(
        self,
        ids: list[int],
        text: str,
        finish: str | None,
        usage: _Usage,
        max_tokens: int,
        seconds: float,
        constrained: bool,
        offers_calls: bool,
    ) -> ModelResponse:
        local_generated = len(self._format.tokenizer.encode(text)) + (finish == "stop")
        generated, prefill = self._account(
            ids, usage, local_generated, max_tokens, constrained, offers_calls
        )
        calls: tuple[ModelToolCall, ...] = ()
        if constrained:
            calls = json_call(text)
        if not calls and offers_calls:
            calls = parse_text_tool_calls(text)
        return ModelResponse(
            text=text,
            tool_calls=calls,
            generated_tokens=generated,
            reached_token_limit=finish == "length" or (finish is None and generated >= max_tokens),
            prefill_tokens=prefill,
            seconds=seconds,
        )

    def _account(
        self,
        ids: list[int],
        usage: _Usage,
        local_generated: int,
        max_tokens: int,
        constrained: bool,
        offers_calls: bool,
    ) -> tuple[int, int | None]:
        """Check the server's numbers against the local ones; return (generated, prefill)."""
        prompt_tokens = len(ids)
        prefill: int | None = None
        if usage.prompt_computed is not None and 0 <= usage.prompt_computed <= prompt_tokens:
            prefill = usage.prompt_computed
        elif usage.cached is not None and 0 <= usage.cached <= prompt_tokens:
            prefill = prompt_tokens - usage.cached
        server_generated = usage.completion
        trusted = server_generated is not None and 0 <= server_generated <= max_tokens
        generated = (
            server_generated
            if trusted and server_generated is not None
            else min(local_generated, max_tokens)
        )
        with self._lock:
            a = self._accounting
            a.calls += 1
            if usage.prompt is None:
                a.prompt_unreported += 1
            else:
                a.prompt_checked += 1
                if usage.prompt != prompt_tokens:
                    a.prompt_mismatch_count += 1
                    if len(a.prompt_mismatches) < MAX_REPORTED_MISMATCHES:
                        a.prompt_mismatches.append((prompt_tokens, usage.prompt))
            if not trusted:
                a.generated_unreported += 1
            elif server_generated != local_generated:
                a.generated_mismatch_count += 1
            if prefill is None:
                a.prefill_unknown += 1
            else:
                a.prefill_reported += 1
                a.cached_tokens += prompt_tokens - prefill
            if constrained:
                a.structured_calls += 1
            elif offers_calls:
                a.free_tool_calls += 1
        return generated, prefill


# -- server listing, schemas, stream parsing ----------------------------------------------------


def served_model_owner(client: HTTPClient, model: str) -> str | None:
    """``owned_by`` of ``model`` in the server's /v1/models, or a one-line error listing what
    the server does serve."""
    listing = client.get_json("/models")
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
        raise RemoteProtocolError(
            f"{client.endpoint.url}/models did not answer with a model list (OpenAI shape "
            '{"data": [{"id": ...}]}); mlx_lm.server needs an existing Hugging Face cache '
            "directory for this (mkdir -p ~/.cache/huggingface/hub)"
        )
    owners = {str(m.get("id")): m.get("owned_by") for m in data if m.get("id") is not None}
    wanted = [model]
    if Path(model).expanduser().exists():
        wanted.append(str(Path(model).expanduser().resolve()))
    for name in wanted:
        if name in owners:
            owner = owners[name]
            return owner if isinstance(owner, str) else None
    served = ", ".join(sorted(owners)) or "nothing"
    raise RemoteModelMissing(
        f"{client.endpoint.url} does not serve model {model!r}; it serves: {served}"
    )


def input_schema(model_input: ModelInput) -> dict[str, Any] | None:
    """The JSON schema the reply to ``model_input`` is held to, built from the same schemas
    as the local grammars (:mod:`picocontext.models.constrained`): the decision call; in a
    tool step a call to an offered tool or, when the task defines one, the JSON answer; a
    completion's JSON answer. ``None`` where a JSON schema cannot say what the local grammar
    says (a tool step whose other branch is free text, a free-text completion): those are
    decoded freely, and counted so."""
    answer = model_input.answer_schema
    if model_input.phase is Phase.EDIT:
        return _plain(decision_schema(model_input.context))
    if model_input.phase is Phase.TOOLS and model_input.tools:
        if answer is None:
            return None
        return {"anyOf": [tool_call_schema(model_input.tools), _plain(answer)]}
    return _plain(answer) if answer is not None else None


def _plain(schema: dict[str, Any]) -> dict[str, Any]:
    """A schema without llguidance's ``x-`` extensions, which servers do not know."""
    return {k: v for k, v in schema.items() if not k.startswith("x-")}


def json_call(text: str) -> tuple[ModelToolCall, ...]:
    """The call of a schema-constrained output: the whole text is one ``{"name", "arguments"}``
    object (a wrapped or malformed one is left to the tag parser and the validators)."""
    try:
        value = json.loads(text)
    except ValueError:
        return ()
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return ()
    arguments = value.get("arguments")
    if not isinstance(arguments, dict):
        return ()
    return (ModelToolCall(name=value["name"], arguments=json.dumps(arguments, ensure_ascii=False)),)


def read_stream(events: Sequence[dict[str, Any]], url: str) -> tuple[str, str | None, _Usage]:
    """Text, finish reason and usage of a streamed ``/v1/completions`` answer."""
    pieces: list[str] = []
    finish: str | None = None
    usage: dict[str, Any] = {}
    timings: dict[str, Any] = {}
    seen_choice = False
    for event in events:
        if isinstance(event.get("usage"), dict):
            usage = event["usage"]
        if isinstance(event.get("timings"), dict):
            timings = event["timings"]
        choices = event.get("choices", [])
        if not isinstance(choices, list):
            raise RemoteProtocolError(f"{url}/completions streamed 'choices' that is not a list")
        for choice in choices:
            piece = choice.get("text") if isinstance(choice, dict) else None
            if not isinstance(choice, dict) or not isinstance(piece, str | None):
                raise RemoteProtocolError(
                    f"{url}/completions streamed a choice without text (is this a chat endpoint?)"
                )
            seen_choice = True
            pieces.append(piece or "")
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                finish = reason
    if not seen_choice:
        raise RemoteProtocolError(f"{url}/completions streamed no completion choices")
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return (
        "".join(pieces),
        finish,
        _Usage(
            prompt=_count(usage.get("prompt_tokens")),
            completion=_count(usage.get("completion_tokens")),
            cached=_count(cached),
            prompt_computed=_count(timings.get("prompt_n")),
        ),
    )


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
