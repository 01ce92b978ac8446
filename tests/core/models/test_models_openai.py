"""The OpenAI-compatible backend against a local HTTP stub: request shapes per server
dialect, token checks, prefill honesty, structured decoding, and every failure path
(wrong URL, refused connection, 401/404, unknown model, malformed JSON, 5xx, timeouts,
dropped streams, cancellation). Loopback only."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from picocontext import (
    Cancelled,
    CancelToken,
    ChatMessage,
    ChatModel,
    InvalidContext,
    ModelBackend,
    ModelInput,
    Phase,
    TokenCounter,
    ToolSpec,
)

pytest.importorskip("transformers")

from openai_stub import Reply, Stub, closed_port, completion_events, serve_stub
from picocontext.models.openai_backend import (
    OpenAIBackend,
    RemoteAccounting,
    ServerKind,
    json_call,
    resolve_tokenizer_dir,
)
from picocontext.models.remote_http import (
    ClientSettings,
    Endpoint,
    RemoteModelMissing,
    RemoteProtocolError,
    RemoteRefused,
    RemoteUnreachable,
)

FAST = ClientSettings(connect_timeout=2.0, read_timeout=5.0, retries=2, backoff=0.0)
MODEL = "stub-model"


def stub_with(*replies: Reply, owner: str = "organization_owner") -> Stub:
    return Stub(models=[{"id": MODEL, "object": "model", "owned_by": owner}], replies=list(replies))


@pytest.fixture
def stub(request: pytest.FixtureRequest) -> Iterator[Stub]:
    yield from serve_stub(request.param)


def connect(stub: Stub, tiny_dir: Path, **kwargs: Any) -> OpenAIBackend:
    kwargs.setdefault("settings", FAST)
    return OpenAIBackend.connect(stub.base_url, MODEL, tokenizer_dir=tiny_dir, **kwargs)


def ok(text: str = "fine", **usage: Any) -> Reply:
    usage.setdefault("prompt_tokens", None)
    usage.setdefault("completion_tokens", None)
    return Reply(events=completion_events(text, **usage))


def completion_input(lamp: Any) -> ModelInput:
    return ModelInput(context=lamp(), phase=Phase.COMPLETION)


# -- protocols and request shapes -------------------------------------------------------------


@pytest.mark.parametrize("stub", [stub_with(ok())], indirect=True)
def test_is_counter_backend_and_chat_model_with_the_local_template(
    stub: Stub, tiny_dir: Path, hf_tokenizer: Any, lamp: Any
) -> None:
    backend = connect(stub, tiny_dir)
    assert isinstance(backend, TokenCounter)
    assert isinstance(backend, ModelBackend)
    assert isinstance(backend, ChatModel)
    prompt = backend.prepare(completion_input(lamp))
    # The exact ids the in-process backend would use: the same template, the same tokenizer.
    text = hf_tokenizer.apply_chat_template(
        [{"role": "system", "content": "x"}], tokenize=False, add_generation_prompt=True
    )
    assert text.startswith("<|im_start|>system")
    assert prompt.token_ids == tuple(hf_tokenizer.encode(prompt.rendered, add_special_tokens=False))
    assert "prompt sent as: text" in prompt.notes


@pytest.mark.parametrize("stub", [stub_with(ok("hello", prompt_tokens=None))], indirect=True)
def test_generic_server_gets_text_greedy_capped_with_stop_strings(
    stub: Stub, tiny_dir: Path, lamp: Any
) -> None:
    backend = connect(stub, tiny_dir)
    prompt = backend.prepare(completion_input(lamp))
    backend.generate(prompt, 7)
    body = stub.bodies[-1]
    assert body["prompt"] == prompt.rendered
    assert body["model"] == MODEL
    assert (body["max_tokens"], body["temperature"], body["stream"]) == (7, 0, True)
    assert body["stream_options"] == {"include_usage": True}
    assert "<|im_end|>" in body["stop"]
    assert not {"structured_outputs", "guided_json", "json_schema"} & set(body)


@pytest.mark.parametrize("stub", [stub_with(ok(), owner="vllm")], indirect=True)
def test_vllm_gets_token_ids_and_a_structured_decision(
    stub: Stub, tiny_dir: Path, lamp: Any
) -> None:
    backend = connect(stub, tiny_dir, structured=True)
    assert backend.server_kind is ServerKind.VLLM and backend.structured_decoding
    prompt = backend.prepare(ModelInput(context=lamp(revision=3), phase=Phase.EDIT))
    backend.generate(prompt, 64)
    body = stub.bodies[-1]
    assert body["prompt"] == list(prompt.token_ids)
    schema = body["structured_outputs"]["json"]
    assert body["guided_json"] == schema
    assert '"baseRevision": {"type": "integer", "const": 3}' in json.dumps(schema)
    assert '"keep_context"' in json.dumps(schema) and "x-guidance" not in schema
    assert set(body["stop_token_ids"]) >= {backend.chat_format.tokenizer.encode("<|im_end|>")[0]}
    # The answer phase is never constrained.
    backend.generate(backend.prepare(completion_input(lamp)), 8)
    assert "structured_outputs" not in stub.bodies[-1]


@pytest.mark.parametrize("stub", [stub_with(ok(), owner="llamacpp")], indirect=True)
def test_llama_server_gets_token_ids_and_json_schema(stub: Stub, tiny_dir: Path, lamp: Any) -> None:
    backend = connect(stub, tiny_dir, structured=True)
    prompt = backend.prepare(ModelInput(context=lamp(), phase=Phase.EDIT))
    backend.generate(prompt, 64)
    body = stub.bodies[-1]
    assert body["prompt"] == list(prompt.token_ids)
    assert body["cache_prompt"] is True
    assert "edit_context" in json.dumps(body["json_schema"])


NOTE_TOOL = {
    "type": "function",
    "function": {
        "name": "note",
        "description": "write a note",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
}
ANSWER_SHAPE = {
    "type": "object",
    "properties": {"lamp": {"type": "string"}},
    "required": ["lamp"],
}


def tool_step(lamp: Any, answer: dict[str, Any] | None) -> ModelInput:
    return ModelInput(
        context=lamp(),
        phase=Phase.TOOLS,
        tools_json=json.dumps([NOTE_TOOL], sort_keys=True),
        answer_schema_json=None if answer is None else json.dumps(answer, sort_keys=True),
    )


def test_the_remote_schemas_are_the_local_grammars_schemas(lamp: Any) -> None:
    from picocontext.models.constrained import tool_call_schema
    from picocontext.models.openai_backend import input_schema

    # A tool step with a JSON answer: the offered call or the answer, as the local grammar.
    schema = input_schema(tool_step(lamp, ANSWER_SHAPE))
    assert schema == {"anyOf": [tool_call_schema([NOTE_TOOL]), ANSWER_SHAPE]}
    # A tool step whose answer is free text cannot be said in JSON schema: decoded freely.
    assert input_schema(tool_step(lamp, None)) is None
    # A completion: constrained only when the task defines the answer's shape.
    assert input_schema(completion_input(lamp)) is None
    shaped = ModelInput(
        context=lamp(), phase=Phase.COMPLETION, answer_schema_json=json.dumps(ANSWER_SHAPE)
    )
    assert input_schema(shaped) == ANSWER_SHAPE


@pytest.mark.parametrize("stub", [stub_with(ok('{"lamp": "on"}'), owner="llamacpp")], indirect=True)
def test_a_constrained_json_answer_in_a_tool_step_is_not_a_call(
    stub: Stub, tiny_dir: Path, lamp: Any
) -> None:
    backend = connect(stub, tiny_dir, structured=True)
    response = backend.generate(backend.prepare(tool_step(lamp, ANSWER_SHAPE)), 32)
    assert stub.bodies[-1]["json_schema"]["anyOf"][1] == ANSWER_SHAPE
    assert response.tool_calls == () and json.loads(response.text) == {"lamp": "on"}
    assert backend.accounting().structured_calls == 1


@pytest.mark.parametrize("stub", [stub_with(ok("it is on"), owner="vllm")], indirect=True)
def test_a_tool_step_with_a_free_text_answer_is_decoded_freely_and_counted(
    stub: Stub, tiny_dir: Path, lamp: Any
) -> None:
    backend = connect(stub, tiny_dir, structured=True)
    backend.generate(backend.prepare(tool_step(lamp, None)), 32)
    assert "structured_outputs" not in stub.bodies[-1]
    assert backend.accounting().free_tool_calls == 1


@pytest.mark.parametrize("stub", [stub_with(ok())], indirect=True)
def test_structured_on_a_generic_server_is_free_decoding_and_says_so(
    stub: Stub, tiny_dir: Path, lamp: Any
) -> None:
    backend = connect(stub, tiny_dir, structured=True)
    assert not backend.structured_decoding
    assert "not supported" in backend.describe()["constrainedDecisions"]
    backend.generate(backend.prepare(ModelInput(context=lamp(), phase=Phase.EDIT)), 16)
    assert "json_schema" not in stub.bodies[-1]
    assert backend.accounting().free_tool_calls == 1
    assert "decoded freely: 1" in " ".join(backend.report_notes())


@pytest.mark.parametrize("stub", [stub_with(ok(), owner="vllm")], indirect=True)
def test_server_kind_can_be_forced(stub: Stub, tiny_dir: Path) -> None:
    assert connect(stub, tiny_dir, server_kind="generic").token_prompts is False


# -- token checks and prefill ---------------------------------------------------------------


@pytest.fixture
def echo_stub() -> Iterator[Stub]:
    """Answers whatever usage the test puts in ``stub.replies`` before each call."""
    yield from serve_stub(stub_with(ok()))


def generate_with(
    stub: Stub, backend: OpenAIBackend, prompt: Any, reply: Reply, cap: int = 32
) -> Any:
    stub.replies[:] = [reply]
    return backend.generate(prompt, cap)


def test_matching_prompt_counts_and_cached_tokens_fill_prefill(
    echo_stub: Stub, tiny_dir: Path, lamp: Any
) -> None:
    backend = connect(echo_stub, tiny_dir)
    prompt = backend.prepare(completion_input(lamp))
    n = prompt.token_count
    reply = ok("abc", prompt_tokens=n, completion_tokens=3, cached=n - 5)
    response = generate_with(echo_stub, backend, prompt, reply)
    assert (response.text, response.generated_tokens, response.prefill_tokens) == ("abc", 3, 5)
    assert not response.reached_token_limit
    a = backend.accounting()
    assert (a.prompt_checked, a.prompt_mismatch_count, a.prefill_reported, a.cached_tokens) == (
        1,
        0,
        1,
        n - 5,
    )
    assert "equal the local count on 1 of 1" in backend.report_notes()[0]


def test_llama_timings_prompt_n_is_the_prefill(echo_stub: Stub, tiny_dir: Path, lamp: Any) -> None:
    backend = connect(echo_stub, tiny_dir)
    prompt = backend.prepare(completion_input(lamp))
    n = prompt.token_count
    reply = ok("x", prompt_tokens=n, completion_tokens=1, timings={"prompt_n": 4, "cache_n": n - 4})
    assert generate_with(echo_stub, backend, prompt, reply).prefill_tokens == 4


def test_a_server_without_usage_leaves_prefill_unknown_and_counts_locally(
    echo_stub: Stub, tiny_dir: Path, lamp: Any
) -> None:
    backend = connect(echo_stub, tiny_dir)
    prompt = backend.prepare(completion_input(lamp))
    response = generate_with(echo_stub, backend, prompt, ok("lamp price"))
    local = len(backend.chat_format.tokenizer.encode("lamp price")) + 1  # + the stop token
    assert (response.prefill_tokens, response.generated_tokens) == (None, local)
    a = backend.accounting()
    assert (a.prefill_unknown, a.prompt_unreported, a.generated_unreported) == (1, 1, 1)
    assert "unknown on 1 calls, counted as the full prompt" in " ".join(backend.report_notes())


def test_a_prompt_count_mismatch_is_recorded_and_reported(
    echo_stub: Stub, tiny_dir: Path, lamp: Any
) -> None:
    backend = connect(echo_stub, tiny_dir)
    prompt = backend.prepare(completion_input(lamp))
    n = prompt.token_count
    generate_with(echo_stub, backend, prompt, ok("a", prompt_tokens=n + 1, completion_tokens=1))
    a = backend.accounting()
    assert (a.prompt_mismatch_count, a.prompt_mismatches) == (1, [(n, n + 1)])
    notes = " ".join(backend.report_notes())
    assert f"PROMPT TOKEN MISMATCH on 1 calls (local {n} vs server {n + 1})" in notes


def test_an_impossible_server_count_is_not_trusted(
    echo_stub: Stub, tiny_dir: Path, lamp: Any
) -> None:
    backend = connect(echo_stub, tiny_dir)
    prompt = backend.prepare(completion_input(lamp))
    reply = ok("ab", prompt_tokens=prompt.token_count, completion_tokens=999, finish="length")
    response = generate_with(echo_stub, backend, prompt, reply, cap=4)
    assert response.generated_tokens <= 4 and response.reached_token_limit
    assert backend.accounting().generated_unreported == 1


def test_accounting_merges_and_keeps_a_few_examples() -> None:
    a = RemoteAccounting(calls=2, prompt_mismatches=[(1, 2)] * 4, prompt_mismatch_count=4)
    total = a.merge(a)
    assert (total.calls, total.prompt_mismatch_count, len(total.prompt_mismatches)) == (4, 8, 5)


# -- tool calls -------------------------------------------------------------------------------


def test_a_constrained_output_is_read_as_the_call() -> None:
    (call,) = json_call('{"name": "keep_context", "arguments": {"baseRevision": 2}}')
    assert (call.name, json.loads(call.arguments)) == ("keep_context", {"baseRevision": 2})
    assert json_call("not json") == ()
    assert json_call('{"name": "x", "arguments": "{}"}') == ()


@pytest.mark.parametrize("stub", [stub_with(ok())], indirect=True)
def test_tagged_calls_in_the_text_are_parsed_in_the_decision_phase(
    stub: Stub, tiny_dir: Path, lamp: Any
) -> None:
    backend = connect(stub, tiny_dir)
    text = '<tool_call>\n{"name": "keep_context", "arguments": {"baseRevision": 0}}\n</tool_call>'
    stub.replies[:] = [ok(text)]
    response = backend.generate(backend.prepare(ModelInput(context=lamp(), phase=Phase.EDIT)), 64)
    assert [c.name for c in response.tool_calls] == ["keep_context"]


@pytest.mark.parametrize("stub", [stub_with(ok("summary"), owner="vllm")], indirect=True)
def test_chat_renders_locally_and_constrains_tool_calls(stub: Stub, tiny_dir: Path) -> None:
    backend = connect(stub, tiny_dir, structured=True)
    tool = ToolSpec(name="note", description="write", parameters={"type": "object"})
    messages = [ChatMessage(role="user", content="hi")]
    response = backend.chat(messages, 16, tools=[tool])
    ids, _text, _notes = backend.render_chat(messages, [tool])
    assert stub.bodies[-1]["prompt"] == ids
    assert stub.bodies[-1]["structured_outputs"]["json"]["properties"]["name"] == {"const": "note"}
    assert response.text == "summary"


@pytest.mark.parametrize("stub", [stub_with(ok())], indirect=True)
def test_empty_requests_are_refused_before_any_request(
    stub: Stub, tiny_dir: Path, lamp: Any
) -> None:
    backend = connect(stub, tiny_dir)
    with pytest.raises(InvalidContext):
        backend.generate(backend.prepare(completion_input(lamp)), 0)
    assert stub.bodies == []


# -- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stub", [stub_with(ok())], indirect=True)
def test_a_model_the_server_does_not_serve_is_one_clear_line(stub: Stub, tiny_dir: Path) -> None:
    with pytest.raises(
        RemoteModelMissing, match="does not serve model 'other'; it serves: stub-model"
    ):
        OpenAIBackend.connect(stub.base_url, "other", tokenizer_dir=tiny_dir, settings=FAST)
    assert stub.bodies == []  # refused before any completion request


@pytest.mark.parametrize("stub", [stub_with(ok())], indirect=True)
def test_a_wrong_base_path_is_a_404_with_the_fix(stub: Stub, tiny_dir: Path) -> None:
    url = stub.base_url.removesuffix("/v1")
    with pytest.raises(RemoteRefused, match=r"HTTP 404.*usually ending in /v1"):
        OpenAIBackend.connect(url, MODEL, tokenizer_dir=tiny_dir, settings=FAST)


def test_a_refused_connection_says_so_after_bounded_retries(tiny_dir: Path) -> None:
    slept: list[float] = []
    settings = ClientSettings(retries=2, backoff=0.01, sleep=slept.append)
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(RemoteUnreachable, match="after 3 attempts: connection refused"):
        OpenAIBackend.connect(url, MODEL, tokenizer_dir=tiny_dir, settings=settings)
    assert slept == [0.01, 0.02]


def test_bad_urls_are_refused_without_contacting_anything() -> None:
    for url, message in (
        ("ftp://127.0.0.1/v1", "not an http"),
        ("http://user:secret@127.0.0.1/v1", "must not carry credentials"),
        ("http://127.0.0.1:99999/v1", "invalid port"),
    ):
        with pytest.raises(RemoteRefused, match=message) as caught:
            Endpoint.parse(url)
        assert "secret" not in str(caught.value)


@pytest.mark.parametrize(
    "stub", [Stub(models=[], replies=[ok()], models_reply=Reply(status=401))], indirect=True
)
def test_401_names_the_key_variables_and_never_the_key(
    stub: Stub, tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PICOCONTEXT_API_KEY", "sk-very-secret")
    with pytest.raises(RemoteRefused, match=r"HTTP 401.*PICOCONTEXT_API_KEY") as caught:
        connect(stub, tiny_dir)
    assert "sk-very-secret" not in str(caught.value)


@pytest.mark.parametrize("stub", [stub_with(ok())], indirect=True)
def test_the_key_is_sent_as_a_bearer_and_never_described(
    stub: Stub, tiny_dir: Path, monkeypatch: pytest.MonkeyPatch, lamp: Any
) -> None:
    monkeypatch.delenv("PICOCONTEXT_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-other-secret")
    backend = connect(stub, tiny_dir)
    backend.generate(backend.prepare(completion_input(lamp)), 4)
    assert stub.headers[-1]["Authorization"] == "Bearer sk-other-secret"
    shown = (
        json.dumps(backend.describe()) + repr(backend._client) + " ".join(backend.report_notes())
    )
    assert "sk-other-secret" not in shown and backend.describe()["apiKey"] == "set"


@pytest.mark.parametrize(
    "stub", [Stub(models=[], replies=[ok()], models_reply=Reply(raw=b"{not json"))], indirect=True
)
def test_malformed_json_is_a_protocol_error(stub: Stub, tiny_dir: Path) -> None:
    with pytest.raises(RemoteProtocolError, match="not JSON"):
        connect(stub, tiny_dir)


@pytest.mark.parametrize(
    "stub",
    [Stub(models=[], replies=[ok()], models_reply=Reply(raw=b'{"models": 3}'))],
    indirect=True,
)
def test_a_listing_of_the_wrong_shape_is_a_protocol_error(stub: Stub, tiny_dir: Path) -> None:
    with pytest.raises(RemoteProtocolError, match="did not answer with a model list"):
        connect(stub, tiny_dir)


@pytest.mark.parametrize(
    "stub",
    [stub_with(Reply(status=500), Reply(status=503), ok("recovered"))],
    indirect=True,
)
def test_5xx_is_retried_then_succeeds(stub: Stub, tiny_dir: Path, lamp: Any) -> None:
    backend = connect(stub, tiny_dir)
    response = backend.generate(backend.prepare(completion_input(lamp)), 8)
    assert response.text == "recovered"
    assert len(stub.bodies) == 3 and backend.describe()["retries"] == 2


@pytest.mark.parametrize("stub", [stub_with(Reply(status=500))], indirect=True)
def test_persistent_5xx_gives_up_with_the_status(stub: Stub, tiny_dir: Path, lamp: Any) -> None:
    backend = connect(stub, tiny_dir)
    with pytest.raises(RemoteUnreachable, match="after 3 attempts: HTTP 500"):
        backend.generate(backend.prepare(completion_input(lamp)), 8)


@pytest.mark.parametrize(
    "stub",
    [stub_with(Reply(status=400, raw=b'{"error": {"message": "bad max_tokens"}}'))],
    indirect=True,
)
def test_other_4xx_fails_at_once_with_the_servers_message(
    stub: Stub, tiny_dir: Path, lamp: Any
) -> None:
    backend = connect(stub, tiny_dir)
    with pytest.raises(RemoteRefused, match=r"HTTP 400.*bad max_tokens"):
        backend.generate(backend.prepare(completion_input(lamp)), 8)
    assert len(stub.bodies) == 1


@pytest.mark.parametrize(
    "stub",
    [
        stub_with(
            Reply(
                events=completion_events("late", prompt_tokens=None, completion_tokens=None),
                delay=1.0,
            )
        )
    ],
    indirect=True,
)
def test_a_slow_server_times_out(stub: Stub, tiny_dir: Path, lamp: Any) -> None:
    settings = ClientSettings(read_timeout=0.2, retries=1, backoff=0.0)
    backend = connect(stub, tiny_dir, settings=settings)
    with pytest.raises(RemoteUnreachable, match="after 2 attempts: timed out"):
        backend.generate(backend.prepare(completion_input(lamp)), 8)


@pytest.mark.parametrize(
    "stub",
    [
        stub_with(
            Reply(
                events=completion_events("par", prompt_tokens=None, completion_tokens=None)[:1],
                cut=True,
            ),
            ok("whole"),
        )
    ],
    indirect=True,
)
def test_a_stream_cut_mid_way_is_retried(stub: Stub, tiny_dir: Path, lamp: Any) -> None:
    backend = connect(stub, tiny_dir)
    assert backend.generate(backend.prepare(completion_input(lamp)), 8).text == "whole"


@pytest.mark.parametrize(
    "stub", [stub_with(Reply(events=[{"choices": []}], cut=True))], indirect=True
)
def test_a_stream_that_always_drops_gives_up(stub: Stub, tiny_dir: Path, lamp: Any) -> None:
    backend = connect(stub, tiny_dir)
    with pytest.raises(RemoteUnreachable, match="closed the stream before"):
        backend.generate(backend.prepare(completion_input(lamp)), 8)


@pytest.mark.parametrize(
    "stub",
    [
        stub_with(Reply(raw=None, events=[{"choices": [{"message": {"content": "x"}}]}])),
    ],
    indirect=True,
)
def test_a_chat_shaped_answer_is_a_protocol_error(stub: Stub, tiny_dir: Path, lamp: Any) -> None:
    backend = connect(stub, tiny_dir)
    stub.replies[:] = [Reply(events=[{"choices": [{"message": {"content": "x"}, "text": 3}]}])]
    with pytest.raises(RemoteProtocolError, match="choice without text"):
        backend.generate(backend.prepare(completion_input(lamp)), 8)


@pytest.mark.parametrize(
    "stub",
    [
        stub_with(
            Reply(
                events=completion_events("late", prompt_tokens=None, completion_tokens=None),
                delay=5.0,
            )
        )
    ],
    indirect=True,
)
def test_cancel_interrupts_a_blocked_request(stub: Stub, tiny_dir: Path, lamp: Any) -> None:
    backend = connect(stub, tiny_dir)
    prompt = backend.prepare(completion_input(lamp))
    cancel = CancelToken()
    threading.Timer(0.2, cancel.cancel).start()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        backend.generate(prompt, 8, cancel)
    assert time.monotonic() - started < 2.0
    assert len(stub.bodies) == 1  # a cancelled request is not retried


# -- tokenizer resolution, imports --------------------------------------------------------------


def test_tokenizer_dir_resolution(tiny_dir: Path, tmp_path: Path) -> None:
    assert resolve_tokenizer_dir(str(tiny_dir), None) == tiny_dir
    assert resolve_tokenizer_dir("served-name", tiny_dir) == tiny_dir
    with pytest.raises(Exception, match="pass --tokenizer-dir"):
        resolve_tokenizer_dir("served-name", None)
    with pytest.raises(Exception, match=r"no tokenizer.json"):
        resolve_tokenizer_dir("served-name", tmp_path)
    with pytest.raises(Exception, match="neither a directory nor a known model"):
        resolve_tokenizer_dir("served-name", tmp_path / "missing")


def test_importing_the_backend_imports_no_tokenizer_library() -> None:
    code = (
        "import sys, picocontext.models.openai_backend, picocontext.models.remote_http\n"
        "bad = [k for k in sys.modules if k.split('.')[0] in ('transformers', 'mlx', 'mlx_lm')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the evaluation's handle ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "decoding", "structured"),
    [("vllm", "constrained", True), ("organization_owner", "free", False)],
)
def test_decoding_constrained_maps_to_server_side_structured_decoding(
    tiny_dir: Path, lamp: Any, owner: str, decoding: str, structured: bool
) -> None:
    from picocontext_diagnostics import cli
    from picocontext_diagnostics.backends import resolve_backend

    for stub in serve_stub(stub_with(ok(), owner=owner)):
        argv = ["--backend", "openai", "--model", MODEL, "--base-url", stub.base_url]
        args = cli.parse_args([*argv, "--decoding", "constrained"])
        handle = resolve_backend(
            "openai",
            MODEL,
            constrained=cli._constrained(args),
            base_urls=(stub.base_url,),
            tokenizer_dir=str(tiny_dir),
        )
        assert handle.decoding == decoding and handle.single_worker is None
        assert [backend for _, backend in handle.pool] == [handle.backend]
        handle.backend.generate(
            handle.counter.prepare(ModelInput(context=lamp(), phase=Phase.EDIT)), 16
        )
        assert ("structured_outputs" in stub.bodies[-1]) is structured
        assert handle.run_notes is not None and "remote calls: 1" in handle.run_notes()[0]
