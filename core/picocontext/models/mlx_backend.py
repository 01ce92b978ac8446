"""The MLX model: one object that is TokenCounter, ModelBackend and ChatModel.

Why one dedicated thread: MLX streams are thread-affine and an unevaluated array must never
cross threads, so every MLX call (load, prefill, decode, cache trimming) runs on a single
worker thread owned by the model. Callers on any thread submit work and wait; only Python
ints and strings come back.

Why a kept KV cache: consecutive prompts of one session share long prefixes (append-only and
navigation prompts grow by appending; editable prompts share everything before the first
edited record). The cache of the previous call is trimmed to the longest common token prefix
and only the rest is prefilled. Greedy outputs are the same with and without reuse (tested on
a real tiny model); ``ModelResponse.prefill_tokens`` reports the tokens actually computed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from picocontext.backend import (
    ChatMessage,
    ModelInput,
    ModelResponse,
    ModelToolCall,
    Phase,
    PreparedPrompt,
    ToolSpec,
    common_prefix,
)
from picocontext.cancel import CancelToken
from picocontext.edits import EDIT_TOOL, KEEP_TOOL
from picocontext.errors import Busy, Cancelled, InvalidContext, ModelError
from picocontext.models.chatformat import ChatFormat, HFChatTokenizer
from picocontext.models.constrained import LogitsProcessor as LogitsProcessor
from picocontext.models.handle import ModelDescription
from picocontext.models.inprocess import InProcessModel
from picocontext.models.mlx_worker import MLXWorker as MLXWorker
from picocontext.models.progress import GenerationProgress, ProgressListener
from picocontext.models.toolcalls import parse_native_tool_calls, parse_text_tool_calls

T = TypeVar("T")

EMPTY_REQUEST = "empty prompt or output allowance"
NO_ACCOUNTING = "MLX generation ended without token accounting"

ProcessorFactory = Callable[[], list[LogitsProcessor]]


@dataclass
class _KVState:
    """The kept cache and the exact token ids it holds (prompt + fed generated tokens)."""

    cache: Any = None
    tokens: list[int] = field(default_factory=list)


def reusable_prefix(cached: Sequence[int], prompt: Sequence[int]) -> int:
    """How many leading prompt tokens a cache holding ``cached`` can serve; at least one
    prompt token must still be computed to get the next-token logits."""
    return min(common_prefix(cached, prompt), len(prompt) - 1) if prompt else 0


def forced_tokens(script: Sequence[int]) -> LogitsProcessor:
    """A logits processor that makes greedy decoding emit ``script`` exactly, then lets the
    model continue. Tests use it to drive real tool-call parsing through a random model."""
    import mlx.core as mx

    steps = list(script)
    calls = {"n": 0}

    def processor(tokens: Any, logits: Any) -> Any:
        k = calls["n"]
        calls["n"] += 1
        if k >= len(steps):
            return logits
        vocab = logits.shape[-1]
        mask = mx.full((vocab,), -float("inf"), dtype=logits.dtype)
        mask[steps[k]] = 0.0
        return logits + mask

    return processor


@dataclass(frozen=True)
class Generation:
    """Raw result of one generation (worker-side), turned into a ModelResponse by callers."""

    tokens: tuple[int, ...]
    finish: str
    prefill_tokens: int
    seconds: float


class MLXModel(InProcessModel):
    """A loaded MLX model. Construct with :meth:`load` (or via :mod:`picocontext.models.registry`).

    ``prefix_cache`` keeps and trims the KV cache across calls; ``constrained`` (decoding
    ``constrained`` rather than ``free``) makes every protocol action grammar-constrained: the
    decision, each tool-loop step, and answers whose input carries an answer schema (see
    :mod:`picocontext.models.constrained`). Both settings are written into every prepared
    prompt's notes and into :meth:`describe`, so reports record them.
    """

    def __init__(
        self,
        worker: MLXWorker,
        model: Any,
        tokenizer: Any,
        path: Path,
        *,
        model_id: str,
        revision: str | None = None,
        prefix_cache: bool = True,
        constrained: bool = False,
        load_seconds: float = 0.0,
        prefill_step_size: int = 512,
        cache_slots: int = 2,
    ) -> None:
        self._worker = worker
        self._model = model
        self._tokenizer = tokenizer
        self.prefill_step_size = prefill_step_size
        self._format = ChatFormat(HFChatTokenizer(tokenizer))
        _add_chatml_stops(tokenizer, self._format.tokenizer)
        self._slots: list[_KVState] = []
        self.cache_slots = cache_slots
        self._busy = threading.Lock()
        self._decision_grammar: Any = None
        self.extra_processors: ProcessorFactory | None = None
        # Told how a generation is going (on the worker thread, at most every
        # ``progress_interval`` seconds, and at the start and end of each phase).
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
    ) -> MLXModel:
        """Load a standard MLX model directory on a fresh worker thread (loading is timed
        separately and never counted in run times)."""
        from picocontext.models.blas import preload_openblas

        directory = Path(path)
        if not (directory / "config.json").is_file():
            raise ModelError(
                f"{directory} is not an MLX model directory (config.json is missing). Pass a "
                "directory written by mlx_lm.convert or by picocontext's model import."
            )
        preload_openblas()
        worker = MLXWorker()

        def _load() -> tuple[Any, Any, float]:
            from mlx_lm import load as mlx_load

            started = time.perf_counter()
            loaded = mlx_load(str(directory))
            return loaded[0], loaded[1], time.perf_counter() - started

        try:
            model, tokenizer, seconds = worker.call(_load)
        except ModelError:
            worker.close()
            raise
        except Exception as exc:
            worker.close()
            raise ModelError(f"Could not load the MLX model at {directory}: {exc}") from exc
        return cls(
            worker,
            model,
            tokenizer,
            directory,
            model_id=model_id or directory.name,
            revision=revision,
            prefix_cache=prefix_cache,
            constrained=constrained,
            load_seconds=seconds,
        )

    def close(self) -> None:
        """Release the cache and stop the worker thread."""
        try:
            self._worker.call(self._drop_cache)
        finally:
            self._worker.close()

    def __enter__(self) -> MLXModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- settings -------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Any:
        """mlx-lm's TokenizerWrapper (the transformers tokenizer plus stop and tool info)."""
        return self._tokenizer

    @property
    def mlx_module(self) -> Any:
        """The loaded ``mlx.nn.Module``; touch it only inside :meth:`MLXWorker.call`."""
        return self._model

    @property
    def worker(self) -> MLXWorker:
        return self._worker

    def _prefix_cache_changed(self, on: bool) -> None:
        if not on:
            self._worker.call(self._drop_cache)

    def reset_cache(self) -> None:
        """Forget every kept KV cache (on the worker thread, between calls), so the next call
        starts cold: comparisons give each episode or policy the same starting point."""
        with self._busy:
            self._worker.call(self._drop_cache)

    def describe(self) -> ModelDescription:
        """Provenance for reports."""
        from picocontext.models.blas import blas_status

        return self._description("mlx", {"blas": blas_status()})

    def decision_grammar(self) -> Any:
        """The llguidance grammar state for constrained decoding (built once, lazily)."""
        if self._decision_grammar is None:
            import json

            from picocontext.models.constrained import DecisionGrammar

            config = json.loads((self._path / "config.json").read_text(encoding="utf-8"))
            hf = self._format.tokenizer
            raw = hf.raw if isinstance(hf, HFChatTokenizer) else self._tokenizer
            self._decision_grammar = DecisionGrammar(
                raw, int(config["vocab_size"]), int(self._tokenizer.eos_token_id)
            )
        return self._decision_grammar

    # -- hidden states (for picocontext.distill.ModelEmbedder) --------------------------
    @property
    def hidden_size(self) -> int:
        """Width of the final hidden states (the embedding size of a mean-pooled text)."""
        inner = getattr(self._model, "model", None)
        norm = getattr(inner, "norm", None)
        weight = getattr(norm, "weight", None)
        if weight is None:
            raise ModelError(
                f"{self._model_id} does not expose its final norm; hidden states need a "
                "decoder-only mlx_lm model with .model.norm (llama, qwen3 and their kin)."
            )
        return int(weight.shape[0])

    def hidden_states(self, text: str, max_tokens: int = 2048) -> Any:
        """The final-norm hidden states of ``text`` as a float32 numpy array of shape
        (tokens, hidden_size): plain tokenization (no chat template), at most ``max_tokens``
        tokens (the head of longer texts), computed on the worker thread and converted there,
        so no unevaluated MLX array crosses threads. Never touches the generation KV cache."""
        if max_tokens < 1:
            raise InvalidContext("max_tokens must be at least 1")
        size = self.hidden_size
        ids = list(self._format.tokenizer.encode(text))[:max_tokens]

        def _run() -> Any:
            import numpy as np

            if not ids:
                return np.zeros((0, size), dtype=np.float32)
            import mlx.core as mx

            states = self._model.model(mx.array([ids]))[0].astype(mx.float32)
            mx.eval(states)
            return np.array(states, copy=True)

        return self._exclusive(_run)

    def hidden_states_batch(self, texts: Sequence[str], max_tokens: int = 256) -> list[Any]:
        """:meth:`hidden_states` of several texts in one forward pass: right-padded, so with
        the causal mask a real token never sees a pad, and each result is cut back to its own
        tokens. About six times faster per text than one at a time on CPU (short texts,
        such as descriptor lines)."""
        if max_tokens < 1:
            raise InvalidContext("max_tokens must be at least 1")
        size = self.hidden_size
        ids = [list(self._format.tokenizer.encode(t))[:max_tokens] for t in texts]

        def _run() -> list[Any]:
            import numpy as np

            width = max((len(i) for i in ids), default=0)
            if width == 0:
                return [np.zeros((0, size), dtype=np.float32) for _ in ids]
            import mlx.core as mx

            padded = mx.array([i + [0] * (width - len(i)) for i in ids])
            states = self._model.model(padded).astype(mx.float32)
            mx.eval(states)
            full = np.array(states, copy=True)
            return [full[row, : len(i)] for row, i in enumerate(ids)]

        return self._exclusive(_run)

    # -- TokenCounter ---------------------------------------------------------------------
    # -- ModelBackend ---------------------------------------------------------------------
    def generate(
        self, prompt: PreparedPrompt, max_tokens: int, cancel: CancelToken | None = None
    ) -> ModelResponse:
        decision = prompt.input.phase is Phase.EDIT
        grammar_input = prompt.input if self._constrained else None
        # Native tool-call events are read in every phase (a call during completion must be
        # seen to be refused); the text fallback runs where tools are offered: the decision
        # phase, and a policy's tools phase with its own tool names.
        offered = prompt.input.tools
        if prompt.input.phase is Phase.TOOLS and offered:
            tools = [_named_tool(str(t["function"]["name"])) for t in offered]
        else:
            tools = [_named_tool(EDIT_TOOL), _named_tool(KEEP_TOOL)]
        return self._respond(
            list(prompt.token_ids),
            max_tokens,
            cancel,
            tools=tools,
            fallback=decision or prompt.input.phase is Phase.TOOLS,
            grammar_input=grammar_input,
        )

    # -- ChatModel ------------------------------------------------------------------------
    # The dialect ``chat(grammar=...)`` accepts (llguidance's Lark); callers such as the
    # constrained LLM navigator check it before relying on constrained replies.
    grammar_syntax = "lark"

    def chat(
        self,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        tools: Sequence[ToolSpec] = (),
        cancel: CancelToken | None = None,
        *,
        grammar: str | None = None,
    ) -> ModelResponse:
        """One assistant reply. ``grammar`` (llguidance Lark) constrains this reply only,
        whatever the model's ``decoding``; the reply ends where the grammar does."""
        ids, _rendered, _notes = self._format.prepare_chat(messages, tools)
        if grammar is not None:
            from picocontext.models.constrained import check_lark

            check_lark(self.decision_grammar(), grammar)
        specs = [{"type": "function", "function": {"name": t.name}} for t in tools]
        return self._respond(
            ids, max_tokens, cancel, tools=specs, fallback=bool(tools), grammar=grammar
        )

    # -- generation core ------------------------------------------------------------------
    def _respond(
        self,
        ids: list[int],
        max_tokens: int,
        cancel: CancelToken | None,
        *,
        tools: list[dict[str, Any]] | None,
        fallback: bool,
        grammar_input: ModelInput | None = None,
        grammar: str | None = None,
    ) -> ModelResponse:
        if not ids or max_tokens <= 0:
            raise InvalidContext(EMPTY_REQUEST)
        result = self._exclusive(
            lambda: self._generate_on_worker(ids, max_tokens, cancel, grammar_input, grammar),
            cancel,
        )
        if result.finish == "cancelled":
            raise Cancelled()
        return self._response(result, tools, fallback)

    def _exclusive(self, fn: Callable[[], T], cancel: CancelToken | None = None) -> T:
        """Run ``fn`` on the worker thread as the model's only caller; a concurrent call is
        ``Busy`` rather than queued, and a cancelled token is honoured once the model is ours."""
        if not self._busy.acquire(blocking=False):
            raise Busy()
        try:
            if cancel is not None:
                cancel.check()
            return self._worker.call(fn)
        finally:
            self._busy.release()

    def _response(
        self, result: Generation, tools: list[dict[str, Any]] | None, fallback: bool
    ) -> ModelResponse:
        body = list(result.tokens[:-1] if result.finish == "stop" else result.tokens)
        text = self._format.tokenizer.decode(body)
        calls: tuple[ModelToolCall, ...] = ()
        wrapper = self._tokenizer
        if getattr(wrapper, "has_tool_calling", False):
            calls = parse_native_tool_calls(
                body,
                wrapper.tool_call_start_tokens,
                wrapper.tool_call_end_tokens,
                self._format.tokenizer.decode,
                wrapper.tool_parser,
                tools,
            )
        if not calls and fallback:
            calls = parse_text_tool_calls(text)
        return ModelResponse(
            text=text,
            tool_calls=calls,
            generated_tokens=len(result.tokens),
            reached_token_limit=result.finish == "length",
            prefill_tokens=result.prefill_tokens,
            seconds=result.seconds,
        )

    def _drop_cache(self) -> None:
        self._slots = []

    def _generate_on_worker(
        self,
        ids: list[int],
        max_tokens: int,
        cancel: CancelToken | None,
        grammar_input: ModelInput | None,
        grammar: str | None = None,
    ) -> Generation:
        import mlx.core as mx
        from mlx_lm.generate import generate_step
        from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache

        started = time.perf_counter()
        reuse = 0
        cache = None
        if self._prefix_cache and self._slots:
            # Decision and completion prompts differ from their first (system) message, so
            # one cache per recent prompt family is kept and the best match is reused.
            best = max(
                range(len(self._slots)),
                key=lambda i: reusable_prefix(self._slots[i].tokens, ids),
            )
            slot = self._slots[best]
            reuse = reusable_prefix(slot.tokens, ids)
            # With a free slot, do not cut most of a cache away for a small gain: it probably
            # serves the other phase and will be reused on the next call of that phase.
            wasteful = reuse * 2 < len(slot.tokens) and len(self._slots) < self.cache_slots
            if reuse > 0 and not wasteful and can_trim_prompt_cache(slot.cache):
                self._slots.pop(best)
                cache = slot.cache
                excess = len(slot.tokens) - reuse
                if excess:
                    for layer in cache:
                        layer.trim(excess)
            else:
                reuse = 0
        if cache is None:
            cache = make_prompt_cache(self._model)
            while len(self._slots) >= self.cache_slots:
                self._slots.pop(0)  # least recently used

        processors: list[LogitsProcessor] = []
        if grammar_input is not None:
            from picocontext.models.constrained import input_processor

            constraint = input_processor(self.decision_grammar(), grammar_input)
            if constraint is not None:
                processors.append(constraint)
        if grammar is not None:
            from picocontext.models.constrained import lark_processor

            processors.append(lark_processor(self.decision_grammar(), grammar))
        if self.extra_processors is not None:
            processors.extend(self.extra_processors())

        report = _Reporter(self, len(ids) - reuse, max_tokens, started)

        def progress(done: int, total: int) -> None:
            # Called between prefill chunks: a Stop pressed during a chunk ends the call here,
            # before the next chunk starts.
            report.prefill(min(done, total))
            if cancel is not None and cancel.cancelled:
                raise _Abort()

        tokens: list[int] = []
        eos = self._tokenizer.eos_token_ids
        finish: str | None = None
        steps = generate_step(
            mx.array(ids[reuse:]),
            self._model,
            max_tokens=max_tokens,
            prompt_cache=cache,
            logits_processors=processors or None,
            prefill_step_size=self.prefill_step_size,
            prompt_progress_callback=progress,
        )
        try:
            for token, _logprobs in steps:
                tokens.append(int(token))
                report.decode(tokens)
                if token in eos:
                    finish = "stop"
                    break
                if cancel is not None and cancel.cancelled:
                    finish = "cancelled"
                    break
                if len(tokens) >= max_tokens:
                    finish = "length"
                    break
        except _Abort:
            finish = "cancelled"
        finally:
            steps.close()
            # The decode loop leaves one look-ahead step in flight; finish it here so no
            # MLX work outlives this call (or this thread).
            mx.synchronize()
        if finish is None:
            raise InvalidContext(NO_ACCOUNTING)
        report.done(tokens)
        if finish != "cancelled" and self._prefix_cache:
            mx.eval([c.state for c in cache])
            held = cache[0].offset if cache and hasattr(cache[0], "offset") else -1
            known = ids + tokens
            if 0 < held <= len(known) and all(getattr(c, "offset", held) == held for c in cache):
                self._slots.append(_KVState(cache=cache, tokens=known[:held]))
        return Generation(
            tokens=tuple(tokens),
            finish=finish,
            prefill_tokens=len(ids) - reuse,
            seconds=time.perf_counter() - started,
        )


def _add_chatml_stops(wrapper: Any, chat_tokenizer: Any) -> None:
    """ChatML models end a turn with ``<|im_end|>`` and a document with ``<|endoftext|>``;
    configs often name only one of them, so a stray other one would not stop generation."""
    template = getattr(chat_tokenizer, "template", "")
    if "<|im_start|>" not in template or not hasattr(wrapper, "add_eos_token"):
        return
    added = wrapper.get_added_vocab() if hasattr(wrapper, "get_added_vocab") else {}
    for token in ("<|im_end|>", "<|endoftext|>"):
        if token in added:
            wrapper.add_eos_token(token)


def _named_tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


class _Reporter:
    """Turns prefill chunks and decoded tokens into :class:`GenerationProgress` reports for
    the model's listener, throttled to ``progress_interval``; does nothing without one."""

    def __init__(self, model: MLXModel, prefill_total: int, max_tokens: int, started: float):
        self.model = model
        self.listener = model.progress_listener
        self.prefill_total = prefill_total
        self.max_tokens = max_tokens
        self.started = started
        self.decode_started: float | None = None
        self.last = 0.0

    def _due(self, force: bool) -> bool:
        now = time.perf_counter()
        if self.listener is None or (not force and now - self.last < self.model.progress_interval):
            return False
        self.last = now
        return True

    def _send(
        self, phase: Literal["prefill", "decode", "done"], prefilled: int, tokens: Sequence[int]
    ) -> None:
        assert self.listener is not None
        now = time.perf_counter()
        first = self.decode_started or now
        self.listener(
            GenerationProgress(
                phase=phase,
                prefilled=prefilled,
                prefill_total=self.prefill_total,
                generated=len(tokens),
                max_tokens=self.max_tokens,
                elapsed=now - self.started,
                decode_seconds=now - first,
                text=self.model.chat_format.tokenizer.decode(list(tokens)) if tokens else "",
            )
        )

    def prefill(self, done: int) -> None:
        if self._due(done in (0, self.prefill_total)):
            self._send("prefill", done, ())

    def decode(self, tokens: Sequence[int]) -> None:
        if self.decode_started is None:
            self.decode_started = time.perf_counter()
        if self._due(len(tokens) == 1):
            self._send("decode", self.prefill_total, tokens)

    def done(self, tokens: Sequence[int]) -> None:
        if self._due(True):
            self._send("done", self.prefill_total, tokens)


class _Abort(Exception):
    """Raised from the prefill progress callback to stop a cancelled prefill."""
