"""The llama.cpp model, in process: one object that is TokenCounter, ModelBackend and ChatModel.

Why llama.cpp: on a CPU, decoding is bound by memory bandwidth, and llama.cpp reads the
shipped 4-bit GGUF as it is, where MLX on a CPU needs dense float32 weights (8x the bytes per
token). Measured on the 2-core machine we ship for: 4-10x MLX's decode rate on the same file
(``scripts/bench.sh engines``, docs/models.md).

Why xllamacpp: its prebuilt wheel runs llama.cpp's own server engine inside this process
(``Server.handle_completions``), so there is no build step and no second process; a request
is llama-server's JSON. What the model sees is still ours alone: prompts are rendered by our
reviewed chat template and tokenized by our tokenizer (:class:`ChatFormat`), sent as token ids,
and the engine's own prompt count is compared with ours on every call (a mismatch fails).

* **Prefix reuse.** llama.cpp keeps the slot's KV cache and reuses the longest common token
  prefix (``cache_prompt``); ``ModelResponse.prefill_tokens`` is the engine's own count of
  prompt tokens computed (``timings.prompt_n``).
* **KV shift (opt-in, ``kv_shift``).** An accepted edit deletes records from the middle of the
  history, and a plain prefix cache then recomputes everything after the first deleted one.
  With ``kv_shift`` llama.cpp also reuses cached chunks of at least :data:`KV_SHIFT_CHUNK`
  tokens found later in the new prompt, moving their keys to their new positions instead of
  computing them again (llama-server's ``--cache-reuse``). It is an approximation, which is
  why it is off by default and named in every report: the moved tokens' keys and values were
  computed while the deleted records were still before them. Greedy output is identical to a
  cold prompt while each prompt only extends the cached one; after a prompt that changed
  something before its end (an edit, or a trailing question replaced by one that shares a
  run of 16 tokens with it), it can differ.
* **Constrained decoding.** The grammar of each protocol action comes from
  :mod:`picocontext.models.constrained` (the one place both engines take it from), as
  llguidance Lark. It is compiled locally first (a grammar llguidance rejects is one clear
  error, before any request), special-token tags are written as token ids (llama.cpp's
  tokenizer does not mark ``<tool_call>`` special), and the reply is checked against the same
  grammar afterwards, so an engine that silently decoded freely is caught, not trusted.
* **Cancellation** between streamed tokens: the stream callback stops the request, and the
  engine frees the slot.
* **Threads** = physical cores by default (hyper-threads share the memory bus decode waits on).
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from picocontext.backend import (
    ChatMessage,
    ModelResponse,
    ModelToolCall,
    Phase,
    PreparedPrompt,
    ToolSpec,
)
from picocontext.cancel import CancelToken
from picocontext.errors import Busy, Cancelled, InvalidContext, ModelError
from picocontext.models.chatformat import ChatFormat, HFChatTokenizer
from picocontext.models.gguf import GGUF_FILE
from picocontext.models.handle import ModelDescription
from picocontext.models.inprocess import InProcessModel
from picocontext.models.progress import GenerationProgress, ProgressListener
from picocontext.models.toolcalls import parse_text_tool_calls

DEFAULT_CONTEXT_TOKENS = 16_384
# How many leading generated tokens are checked against the grammar after a constrained call.
GRAMMAR_CHECK_TOKENS = 24
# The shortest run of cached tokens kv_shift moves (llama.cpp's n_cache_reuse): long enough
# that a chance match of a few common tokens is not reused out of place.
KV_SHIFT_CHUNK = 16
ServerKey = tuple[str, int, int, int, int, bool]
EMPTY_REQUEST = "empty prompt or output allowance"
INSTALL_HINT = (
    "the llama.cpp engine needs the llamacpp extra: pip install 'picocontext[llamacpp]' "
    "(scripts/run-example.sh and scripts/test.sh install it on Linux)"
)
HIDDEN_STATES_MLX_ONLY = (
    "model embeddings (hidden states) need the MLX engine: pass --engine mlx or set "
    "PICOCONTEXT_ENGINE=mlx"
)
# Architectures our tokenizer rebuild and chat templates are reviewed for.
SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3")
_SPECIAL_TAGS = ("<tool_call>", "</tool_call>")


def physical_cores() -> int:
    """Physical CPU cores (not hyper-threads): decode is bound by memory bandwidth, and two
    threads on one core only contend for it. Falls back to the logical count."""
    logical = os.cpu_count() or 1
    if sys.platform == "linux":
        try:
            text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        except OSError:
            return logical
        cores = set(re.findall(r"physical id\s*:\s*(\d+)\n(?:.*\n)*?core id\s*:\s*(\d+)", text))
        return len(cores) or logical
    if sys.platform == "darwin":
        import subprocess

        try:
            out = subprocess.run(
                ["sysctl", "-n", "hw.physicalcpu"], capture_output=True, text=True, timeout=5
            ).stdout
            return int(out.strip()) or logical
        except (OSError, ValueError, subprocess.SubprocessError):
            return logical
    return logical


def import_engine() -> Any:
    """The xllamacpp module, or one actionable error.

    Its OpenMP team waits passively unless the user chose otherwise: spinning threads made
    decoding 10-30x slower whenever another process held a core on a 2-core machine
    (docs/results/engines.md), and the setting only takes effect before OpenMP starts."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import xllamacpp
    except ImportError as exc:
        raise ModelError(f"{INSTALL_HINT} ({exc})") from None
    return xllamacpp


def engine_available() -> bool:
    """Whether the llama.cpp engine can be imported here (without importing it twice)."""
    import importlib.util

    return importlib.util.find_spec("xllamacpp") is not None


def check_gguf(path: Path) -> tuple[str, int | None]:
    """The architecture of ``path`` and the context it was trained for, after checking it is a
    whole GGUF of a supported kind: llama.cpp's own load error is one generic line, so the
    reasons are found here first."""
    from picocontext.models.gguf import read_gguf_header

    if not path.is_file():
        raise ModelError(f"{path} does not exist or is not a file; expected a .gguf model file")
    source = read_gguf_header(path)  # refuses bad magic, a broken header, truncated tensors
    arch = str(source.meta.get("general.architecture", ""))
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ModelError(
            f"{path.name}: architecture {arch!r} is not supported by picocontext's llama.cpp "
            f"backend (supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    trained = source.meta.get(f"{arch}.context_length")
    return arch, int(trained) if trained is not None else None


def special_tag_ids(tokenizer: HFChatTokenizer) -> dict[str, int]:
    """Token ids of the call tags where the vocabulary has them as single tokens."""
    added = tokenizer.raw.get_added_vocab()
    return {tag: int(added[tag]) for tag in _SPECIAL_TAGS if tag in added}


def engine_lark(lark: str, tags: dict[str, int]) -> str:
    """``lark`` for llama.cpp's llguidance: bare special-token terminals (``<tool_call>``, as
    :mod:`picocontext.models.constrained` writes them) become ``<[id]>`` terminals, which both
    llguidance builds read the same way; quoted text stays as it is."""
    out = lark
    for tag, token_id in tags.items():
        out = re.sub(rf'(?<!["\w]){re.escape(tag)}(?![\w"])', f"<[{token_id}]>", out)
    return "%llguidance {}\n" + out


class LlamaCppModel(InProcessModel):
    """A GGUF model loaded in llama.cpp. Construct with :meth:`load` (or through
    :func:`picocontext.models.load_model` with ``engine="llamacpp"``).

    ``prefix_cache`` and ``constrained`` mean what they mean for :class:`MLXModel` and are
    written into every prepared prompt's notes and into :meth:`describe`."""

    grammar_syntax = "lark"

    def __init__(
        self,
        server: Any,
        tokenizer: HFChatTokenizer,
        path: Path,
        *,
        model_id: str,
        revision: str | None = None,
        prefix_cache: bool = True,
        constrained: bool = False,
        context_tokens: int = DEFAULT_CONTEXT_TOKENS,
        threads: int = 1,
        kv_shift: bool = False,
        load_seconds: float = 0.0,
        vocab_size: int,
        stop_ids: Sequence[int],
    ) -> None:
        self._server = server
        self._tokenizer = tokenizer
        self.context_tokens = context_tokens
        self.threads = threads
        self.kv_shift = kv_shift
        self._vocab_size = vocab_size
        self._stop_ids = tuple(stop_ids)
        self._eos = self._stop_ids[0]
        self._format = ChatFormat(tokenizer)
        self._tags = special_tag_ids(tokenizer)
        self._busy = threading.Lock()
        self._key: ServerKey | None = None
        self._cold_next = False
        self._decision_grammar: Any = None
        self.progress_listener: ProgressListener | None = None
        self.progress_interval = 0.1
        self._init_settings(
            path,
            model_id=model_id,
            revision=revision,
            prefix_cache=prefix_cache,
            constrained=constrained,
            load_seconds=load_seconds,
        )

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        model_id: str | None = None,
        revision: str | None = None,
        prefix_cache: bool = True,
        constrained: bool = False,
        context_tokens: int = DEFAULT_CONTEXT_TOKENS,
        threads: int | None = None,
        kv_shift: bool = False,
    ) -> LlamaCppModel:
        """Load a llama.cpp model directory (``model.gguf`` beside our tokenizer files, as
        :func:`picocontext.models.embedded.ensure_embedded_gguf` writes it). ``kv_shift``:
        see the module docstring (an engine setting, fixed for the model's lifetime)."""
        directory = Path(path)
        gguf = directory / GGUF_FILE
        if not (directory / "tokenizer_config.json").is_file() or not gguf.is_file():
            raise ModelError(
                f"{directory} is not a llama.cpp model directory (it needs {GGUF_FILE}, "
                "tokenizer.json and tokenizer_config.json, as picocontext's embedded-model "
                "install writes them)"
            )
        if context_tokens < 16:
            raise ModelError(f"context size {context_tokens} is too small (at least 16 tokens)")
        if kv_shift and not prefix_cache:
            # without the cache nothing is moved, yet every report would say KV shift is on
            raise ModelError("KV shift moves cached tokens, so it needs the prefix cache on")
        engine = import_engine()
        _arch, trained = check_gguf(gguf)
        # llama.cpp caps a context at what the model was trained for; budgets use the real one.
        context_tokens = min(context_tokens, trained) if trained else context_tokens
        from picocontext.models.local_tokenizer import load_tokenizer

        tokenizer, stops = load_tokenizer(directory)
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        count = threads or physical_cores()
        started = time.perf_counter()
        key = _server_key(gguf, context_tokens, count, kv_shift)
        server = _unpark(key) or _start(engine, gguf, context_tokens, count, kv_shift)
        model = cls(
            server,
            tokenizer,
            directory,
            model_id=model_id or directory.name,
            revision=revision,
            prefix_cache=prefix_cache,
            constrained=constrained,
            context_tokens=context_tokens,
            threads=count,
            kv_shift=kv_shift,
            load_seconds=time.perf_counter() - started,
            vocab_size=int(config["vocab_size"]),
            stop_ids=stops,
        )
        model._key = key
        model._cold_next = True  # a reused engine may hold another caller's prefix
        return model

    def close(self) -> None:
        """Release the engine (waits for a running call). The engine is parked for reuse
        rather than destroyed: destroying an xllamacpp server after another one existed in
        the process could hang forever in its HTTP thread (seen on the second close or the
        next load), so a process keeps its released engines, by GGUF, context size and
        threads, and a later load of the same model reuses one at no load cost."""
        with self._busy:
            server, self._server = self._server, None
            if server is not None:
                _park(self._key, server)

    def __enter__(self) -> LlamaCppModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- settings -------------------------------------------------------------------------
    engine_notes = ("engine: llama.cpp (GGUF as shipped)",)

    @property
    def tokenizer(self) -> HFChatTokenizer:
        return self._tokenizer

    def reset_cache(self) -> None:
        """The next call starts cold (its prompt is computed whole), as the MLX model's does:
        comparisons give every episode the same starting point."""
        with self._busy:
            self._cold_next = True

    def extra_notes(self) -> tuple[str, ...]:
        return ("KV shift: on (moved cache after edits, approximate)",) if self.kv_shift else ()

    def describe(self) -> ModelDescription:
        """Provenance for reports."""
        engine: ModelDescription = {
            "engine": engine_version(),
            "threads": self.threads,
            "contextTokens": self.context_tokens,
            "kvShift": self.kv_shift,
        }
        return self._description("llamacpp", engine)

    def decision_grammar(self) -> Any:
        """The local llguidance state every grammar is compiled and checked with."""
        if self._decision_grammar is None:
            from picocontext.models.constrained import DecisionGrammar

            self._decision_grammar = DecisionGrammar(
                self._tokenizer.raw, self._vocab_size, self._eos
            )
        return self._decision_grammar

    # -- hidden states: MLX only -----------------------------------------------------------
    @property
    def hidden_size(self) -> int:
        raise ModelError(HIDDEN_STATES_MLX_ONLY)

    def hidden_states(self, text: str, max_tokens: int = 2048) -> Any:
        raise ModelError(HIDDEN_STATES_MLX_ONLY)

    def hidden_states_batch(self, texts: Sequence[str], max_tokens: int = 256) -> list[Any]:
        raise ModelError(HIDDEN_STATES_MLX_ONLY)

    # -- ModelBackend ---------------------------------------------------------------------
    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        lark = None
        if self._constrained:
            from picocontext.models.constrained import input_lark

            lark = input_lark(prompt.input, self.decision_grammar().special_tags)
        offers_calls = prompt.input.phase in (Phase.EDIT, Phase.TOOLS)
        return self._respond(list(prompt.token_ids), max_tokens, cancel, lark, offers_calls)

    # -- ChatModel ------------------------------------------------------------------------
    def chat(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        cancel: CancelToken | None = None,
        *,
        grammar: str | None = None,
    ) -> ModelResponse:
        """One assistant reply; ``grammar`` (llguidance Lark) constrains this reply only."""
        ids, _rendered, _notes = self._format.prepare_chat(messages, tools)
        return self._respond(ids, max_tokens, cancel, grammar, bool(tools))

    # -- one request ----------------------------------------------------------------------
    def _respond(
        self,
        ids: list[int],
        max_tokens: int,
        cancel: CancelToken | None,
        lark: str | None,
        offers_calls: bool,
    ) -> ModelResponse:
        if not ids or max_tokens <= 0:
            raise InvalidContext(EMPTY_REQUEST)
        if len(ids) + max_tokens > self.context_tokens:
            raise ModelError(
                f"the prompt ({len(ids)} tokens) plus its output allowance ({max_tokens}) "
                f"exceeds the llama.cpp context of {self.context_tokens} tokens; load the model "
                "with a larger context_tokens or give the policy a smaller window"
            )
        matcher = None
        if lark is not None:
            matcher = self.decision_grammar().matcher_for(lark)
            # the form llama.cpp receives must compile too (llama.cpp itself would ignore it)
            self.decision_grammar().matcher_for(engine_lark(lark, self._tags))
        if not self._busy.acquire(blocking=False):
            raise Busy()
        try:
            if cancel is not None:
                cancel.check()
            if self._server is None:
                raise ModelError("The llama.cpp model was closed")
            body = self._body(ids, max_tokens, lark)
            self._cold_next = False
            text, finish, usage, timings, seconds = self._stream(body, ids, max_tokens, cancel)
        finally:
            self._busy.release()
        return self._response(ids, text, finish, usage, timings, seconds, matcher, offers_calls)

    def _body(self, ids: list[int], max_tokens: int, lark: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "prompt": ids,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "top_k": 1,
            "cache_prompt": self._prefix_cache and not self._cold_next,
            "stream": True,
            "stream_options": {"include_usage": True},
            # per-token entries carry the generated token ids, so the grammar check below
            # judges exactly what was decoded (a re-encoding of the text could differ)
            "logprobs": 1,
        }
        if lark is not None:
            body["grammar"] = engine_lark(lark, self._tags)
        return body

    def _stream(
        self,
        body: dict[str, Any],
        ids: list[int],
        max_tokens: int,
        cancel: CancelToken | None,
    ) -> tuple[str, str | None, dict[str, Any], dict[str, Any], float]:
        started = time.perf_counter()
        pieces: list[str] = []
        tokens: list[int] = []
        state: dict[str, Any] = {
            "finish": None,
            "usage": {},
            "timings": {},
            "error": None,
            "logprob": 0.0,
        }
        report = _Reporter(self, len(ids), max_tokens, started)

        def on_chunk(chunk: Any) -> bool:
            event = json.loads(chunk) if isinstance(chunk, str | bytes) else chunk
            if not isinstance(event, dict):
                return False
            if "error" in event:
                state["error"] = event["error"]
                return True
            for choice in event.get("choices") or ():
                pieces.append(str(choice.get("text") or ""))
                state["finish"] = choice.get("finish_reason") or state["finish"]
                logprobs = choice.get("logprobs") or {}
                for entry in logprobs.get("content") or ():
                    tokens.append(int(entry["id"]))
                    if isinstance(entry.get("logprob"), int | float):
                        state["logprob"] += float(entry["logprob"])
            state["usage"] = event.get("usage") or state["usage"]
            state["timings"] = event.get("timings") or state["timings"]
            report.decode(pieces)
            if cancel is not None and cancel.cancelled:
                state["finish"] = "cancelled"
                return True
            return False

        report.prefill(0)
        result = self._server.handle_completions(body, on_chunk)
        if isinstance(result, dict) and "error" in result:
            state["error"] = result["error"]
        if state["error"] is not None:
            raise ModelError(f"llama.cpp refused the request: {_error_text(state['error'])}")
        if state["finish"] == "cancelled":
            raise Cancelled()
        report.done(pieces)
        state["tokens"] = tokens
        return (
            "".join(pieces),
            state["finish"],
            {**state["usage"], "tokens": tokens, "logprob": state["logprob"] if tokens else None},
            state["timings"],
            time.perf_counter() - started,
        )

    def _response(
        self,
        ids: list[int],
        text: str,
        finish: str | None,
        usage: dict[str, Any],
        timings: dict[str, Any],
        seconds: float,
        matcher: Any,
        offers_calls: bool,
    ) -> ModelResponse:
        engine_prompt = usage.get("prompt_tokens")
        if engine_prompt != len(ids):
            raise ModelError(
                f"TOKEN COUNT MISMATCH: picocontext sent {len(ids)} prompt tokens but llama.cpp "
                f"counted {engine_prompt}; budgets would not be exact, so the call is refused"
            )
        generated = int(usage.get("completion_tokens") or 0)
        prefill = timings.get("prompt_n")
        if matcher is not None:
            decoded = list(usage.get("tokens") or [])
            if finish == "stop" and decoded and decoded[-1] in self._stop_ids:
                decoded.pop()  # the end-of-turn token the engine allows once the grammar ends
            _check_grammar(matcher, decoded, text, finish == "stop", set(self._tags.values()))
        calls: tuple[ModelToolCall, ...] = parse_text_tool_calls(text) if offers_calls else ()
        return ModelResponse(
            text=text,
            tool_calls=calls,
            generated_tokens=generated,
            reached_token_limit=finish == "length",
            prefill_tokens=int(prefill) if isinstance(prefill, int) else None,
            seconds=seconds,
            logprob=usage.get("logprob"),
        )


# Engines released by ``close``, by (GGUF path, size, mtime, context, threads, kv_shift): see
# close().
_PARKED: dict[ServerKey, list[Any]] = {}
_PARKED_LOCK = threading.Lock()


def _server_key(gguf: Path, context_tokens: int, threads: int, kv_shift: bool) -> ServerKey:
    stat = gguf.stat()
    return (str(gguf.resolve()), stat.st_size, stat.st_mtime_ns, context_tokens, threads, kv_shift)


def _unpark(key: ServerKey) -> Any:
    with _PARKED_LOCK:
        waiting = _PARKED.get(key)
        return waiting.pop() if waiting else None


def _park(key: ServerKey | None, server: Any) -> None:
    if key is None:
        return
    with _PARKED_LOCK:
        _PARKED.setdefault(key, []).append(server)


def _start(engine: Any, gguf: Path, context_tokens: int, threads: int, kv_shift: bool) -> Any:
    """One llama.cpp server context on ``gguf``: one slot (one caller at a time, like the
    MLX model), logs off (they would flood the user's terminal)."""
    params = engine.CommonParams()
    params.model.path = str(gguf)
    params.n_ctx = context_tokens
    params.n_parallel = 1
    params.verbosity = -1
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.warmup = False
    params.n_cache_reuse = KV_SHIFT_CHUNK if kv_shift else 0
    try:
        return engine.Server(params)
    except (RuntimeError, ValueError) as exc:
        raise ModelError(
            f"llama.cpp could not load {gguf} ({exc}); the file may be damaged or need a newer "
            "llama.cpp"
        ) from None


def engine_version() -> str:
    """The xllamacpp package version (which pins its llama.cpp build)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"xllamacpp {version('xllamacpp')}"
    except PackageNotFoundError:
        return "xllamacpp (version unknown)"


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def _check_grammar(
    matcher: Any, tokens: Sequence[int], text: str, complete: bool, tags: set[int]
) -> None:
    """Refuse a reply the grammar does not accept (a prefix of it, when the output cap cut it
    short): llama.cpp decodes freely, silently, when its grammar engine refuses a grammar, and
    a free reply must not pass as constrained. Only the head of the reply is checked: free
    decoding shows in its first tokens, while deep inside a JSON string the two llguidance
    builds can disagree about a partial UTF-8 byte token. One known difference is let
    through: llama.cpp's vocabulary does not mark the call tags special, so its grammar lets
    a tag token stand inside a JSON string; such a reply is an invalid call for the
    validators, not a sign that the grammar was ignored."""
    head = list(tokens[:GRAMMAR_CHECK_TOKENS])
    consumed = matcher.try_consume_tokens(head)
    if consumed < len(head) and head[consumed] in tags:
        return
    whole = len(head) == len(tokens)
    if consumed != len(head) or (complete and whole and not matcher.is_accepting()):
        raise ModelError(
            "llama.cpp ignored the constraint grammar (its reply "
            f"{text[:60]!r} does not match it); use free decoding or report the grammar"
        )


class _Reporter:
    """Streamed chunks → :class:`GenerationProgress` for the model's listener, throttled to
    ``progress_interval``; does nothing without one. llama.cpp computes the prompt in one go,
    so prefill is reported at its start and at the first token."""

    def __init__(
        self, model: LlamaCppModel, prompt_tokens: int, max_tokens: int, started: float
    ) -> None:
        self.listener = model.progress_listener
        self.interval = model.progress_interval
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.started = started
        self.first: float | None = None
        self.last = 0.0

    def _send(self, phase: Any, pieces: Sequence[str], prefilled: int) -> None:
        assert self.listener is not None
        now = time.perf_counter()
        self.listener(
            GenerationProgress(
                phase=phase,
                prefilled=prefilled,
                prefill_total=self.prompt_tokens,
                generated=len(pieces),
                max_tokens=self.max_tokens,
                elapsed=now - self.started,
                decode_seconds=now - (self.first or now),
                text="".join(pieces),
            )
        )

    def prefill(self, done: int) -> None:
        if self.listener is not None:
            self._send("prefill", (), done)

    def decode(self, pieces: Sequence[str]) -> None:
        if self.listener is None:
            return
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        if len(pieces) == 1 or now - self.last >= self.interval:
            self.last = now
            self._send("decode", pieces, self.prompt_tokens)

    def done(self, pieces: Sequence[str]) -> None:
        if self.listener is not None:
            self._send("done", pieces, self.prompt_tokens)
