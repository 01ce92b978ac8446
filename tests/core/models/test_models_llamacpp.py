"""The llama.cpp backend on a tiny random-weight GGUF written by the suite (milliseconds).

Load, exact token accounting, prefix reuse (identical greedy output with and without),
constrained calls from the shared grammar source, cancellation, and each bad input as one
clear error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from picocontext import CancelToken, ChatMessage, ModelError, Phase
from picocontext.backend import ModelInput
from picocontext.errors import Busy, Cancelled
from picocontext.models import handle_for
from picocontext.models.gguf import GGUF_FILE, install_gguf
from picocontext.models.tiny import TINY_CHAT_TEMPLATE, write_tiny_gguf

pytest.importorskip("xllamacpp")
pytest.importorskip("transformers")

from picocontext.models import llamacpp_backend
from picocontext.models.llamacpp_backend import LlamaCppModel, engine_lark
from picocontext.models.progress import GenerationProgress


@pytest.fixture(scope="module")
def gguf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("tiny-gguf")
    write_tiny_gguf(work / "tiny.gguf", arch="qwen2", context=8192)
    return install_gguf(work / "tiny.gguf", work / "model", chat_template=TINY_CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def model(gguf_dir: Path) -> Iterator[LlamaCppModel]:
    loaded = LlamaCppModel.load(gguf_dir, model_id="tiny-gguf", context_tokens=4096)
    yield loaded
    loaded.close()


def ask(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=text)]


def test_install_keeps_the_gguf_as_shipped(gguf_dir: Path, tmp_path: Path) -> None:
    names = sorted(p.name for p in gguf_dir.iterdir())
    assert names == [
        "config.json",
        GGUF_FILE,
        "picocontext-import.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert json.loads((gguf_dir / "picocontext-import.json").read_text())["weights"] == "gguf"
    assert not any(p.suffix == ".safetensors" for p in gguf_dir.iterdir())


def test_context_is_capped_at_the_trained_length(gguf_dir: Path) -> None:
    with LlamaCppModel.load(gguf_dir, context_tokens=100_000) as capped:
        assert capped.context_tokens == 8192 == capped.describe()["contextTokens"]


def test_load_describes_engine_and_threads(model: LlamaCppModel) -> None:
    info = model.describe()
    assert info["backend"] == "llamacpp" and info["model"] == "tiny-gguf"
    assert str(info["engine"]).startswith("xllamacpp ")
    assert info["threads"] == llamacpp_backend.physical_cores() >= 1
    assert "engine: llama.cpp (GGUF as shipped)" in model.settings_notes()


def test_prompt_tokens_are_ours_and_the_engine_agrees(model: LlamaCppModel) -> None:
    ids, _text, _notes = model.render_chat(ask("count me"))
    response = model.chat(ask("count me"), 6)
    assert response.generated_tokens == 6 and response.reached_token_limit
    assert response.prefill_tokens is not None and 1 <= response.prefill_tokens <= len(ids)


def test_a_count_mismatch_fails_loudly(
    model: LlamaCppModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Lying:
        """The engine, but its usage claims a one-token prompt."""

        def __init__(self, server: Any) -> None:
            self.server = server

        def handle_completions(self, body: dict[str, Any], callback: Any) -> Any:
            def relay(chunk: Any) -> bool:
                event = dict(chunk)
                if isinstance(event.get("usage"), dict):
                    event["usage"] = {**event["usage"], "prompt_tokens": 1}
                return bool(callback(event))

            return self.server.handle_completions(body, relay)

    monkeypatch.setattr(model, "_server", Lying(model._server))
    with pytest.raises(ModelError, match="TOKEN COUNT MISMATCH"):
        model.chat(ask("hello"), 3)


def test_prefix_reuse_computes_only_the_new_tail_and_keeps_greedy_output(
    model: LlamaCppModel,
) -> None:
    turns = [ask("first question"), ask("first question"), ask("first question, and more")]
    model.prefix_cache = True
    model.reset_cache()
    warm = [model.chat(t, 8) for t in turns]
    assert warm[0].prefill_tokens == len(model.render_chat(turns[0])[0])
    assert warm[1].prefill_tokens == 1  # everything but the last prompt token was reused
    model.prefix_cache = False
    cold = [model.chat(t, 8) for t in turns]
    model.prefix_cache = True
    assert [c.prefill_tokens for c in cold] == [len(model.render_chat(t)[0]) for t in turns]
    assert [r.text for r in warm] == [r.text for r in cold]
    assert [r.generated_tokens for r in warm] == [r.generated_tokens for r in cold]


def test_constrained_decision_is_a_valid_call(model: LlamaCppModel, lamp: Any) -> None:
    model.constrained = True
    try:
        prompt = model.prepare(ModelInput(context=lamp(), phase=Phase.EDIT))
        response = model.generate(prompt, 200)
    finally:
        model.constrained = False
    # random weights write long bodies; the grammar holds the call's shape from its first token
    assert response.text.startswith(('{"name": "edit_context"', '{"name": "keep_context"'))
    if not response.reached_token_limit:
        (call,) = response.tool_calls
        assert isinstance(json.loads(call.arguments)["baseRevision"], int)


def test_chat_grammar_ends_the_reply(model: LlamaCppModel) -> None:
    response = model.chat(ask("yes or no?"), 20, grammar='start: "yes" | "no"\n')
    assert response.text in ("yes", "no") and not response.reached_token_limit


def test_special_tags_become_token_ids_only_outside_strings() -> None:
    lark = 'start: <tool_call> "\\n" x "\\n" </tool_call>\nx: "<tool_call>"\n'
    out = engine_lark(lark, {"<tool_call>": 7, "</tool_call>": 8})
    assert out.startswith("%llguidance {}\n")
    assert 'start: <[7]> "\\n" x "\\n" <[8]>' in out and 'x: "<tool_call>"' in out


def test_an_ignored_grammar_is_caught(
    model: LlamaCppModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # llama.cpp decodes freely when its grammar engine refuses a grammar; the reply is
    # checked against our own compiled grammar, so a free reply cannot pass as constrained.
    real = model._body

    def without_grammar(ids: list[int], max_tokens: int, lark: str | None) -> dict[str, Any]:
        return real(ids, max_tokens, None)

    monkeypatch.setattr(model, "_body", without_grammar)
    with pytest.raises(ModelError, match="ignored the constraint grammar"):
        model.chat(ask("yes or no?"), 20, grammar='start: "yes" | "no"\n')


def test_a_grammar_llguidance_rejects_is_one_error_before_any_request(
    model: LlamaCppModel,
) -> None:
    with pytest.raises(ModelError, match="constraint grammar was rejected"):
        model.chat(ask("x"), 5, grammar="start: (((\n")


def test_cancel_between_tokens(model: LlamaCppModel) -> None:
    token = CancelToken()
    seen: list[int] = []

    def listener(progress: Any) -> None:
        seen.append(progress.generated)
        if progress.generated >= 2:
            token.cancel()

    model.progress_listener = listener
    model.progress_interval = 0.0
    try:
        with pytest.raises(Cancelled):
            model.chat(ask("a long story please"), 400, cancel=token)
    finally:
        model.progress_listener = None
    assert max(seen) < 50
    assert model.chat(ask("still there?"), 3).generated_tokens == 3


def test_a_second_caller_is_busy_not_queued(model: LlamaCppModel) -> None:
    model._busy.acquire()
    try:
        with pytest.raises(Busy):
            model.chat(ask("x"), 2)
    finally:
        model._busy.release()


def test_a_prompt_longer_than_the_context_is_one_error(model: LlamaCppModel) -> None:
    with pytest.raises(ModelError, match=r"exceeds the llama\.cpp context of 4096 tokens"):
        model.chat(ask("word " * 5000), 8)


def test_hidden_states_say_they_need_mlx(model: LlamaCppModel) -> None:
    with pytest.raises(ModelError, match="need the MLX engine"):
        model.hidden_states("x")


def test_truncated_gguf_is_refused_before_llama_cpp(gguf_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        (broken / name).write_bytes((gguf_dir / name).read_bytes())
    (broken / GGUF_FILE).write_bytes((gguf_dir / GGUF_FILE).read_bytes()[:4000])
    with pytest.raises(ModelError, match=r"truncated|not a readable GGUF") as err:
        LlamaCppModel.load(broken)
    assert "\n" not in err.value.message


def test_unsupported_architecture_is_named(tmp_path: Path) -> None:
    write_tiny_gguf(tmp_path / "odd.gguf", arch="qwen2")
    directory = install_gguf(
        tmp_path / "odd.gguf", tmp_path / "odd", chat_template=TINY_CHAT_TEMPLATE
    )
    from gguf import GGUFReader

    reader = GGUFReader(directory / GGUF_FILE, "r+")
    field = reader.fields["general.architecture"]
    field.parts[field.data[0]][:] = list(b"qwen9")  # same length, another architecture
    with pytest.raises(ModelError, match="architecture 'qwen9' is not supported"):
        LlamaCppModel.load(directory)


def test_not_a_llama_cpp_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"is not a llama\.cpp model directory"):
        LlamaCppModel.load(tmp_path)


def test_missing_extra_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_engine(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "xllamacpp":
            raise ImportError("No module named 'xllamacpp'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_engine)
    with pytest.raises(ModelError, match=r"pip install 'picocontext\[llamacpp\]'"):
        llamacpp_backend.import_engine()


def test_closed_model_refuses_calls(gguf_dir: Path) -> None:
    loaded = LlamaCppModel.load(gguf_dir, context_tokens=256)
    loaded.close()
    with pytest.raises(ModelError, match="was closed"):
        loaded.chat(ask("x"), 2)


def test_the_header_scan_agrees_with_the_gguf_package_and_refuses_every_cut(
    tmp_path: Path,
) -> None:
    """The fast header scan (what the engine checks before loading) reads the same scalar and
    string metadata as ``gguf.GGUFReader`` and refuses the file cut short anywhere."""
    from picocontext.models.gguf_reader import read_gguf, read_gguf_header

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, arch="qwen2", context=4096)
    header = read_gguf_header(path)
    full = read_gguf(path)
    scalars = {k: v for k, v in full.meta.items() if not isinstance(v, list)}
    assert header.meta == scalars
    assert header.tensor_count == len(full.tensors)
    assert header.meta["qwen2.context_length"] == 4096
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    for end in sorted({0, 3, 10, 24, 100, len(data) // 3, len(data) // 2, len(data) - 1}):
        cut.write_bytes(data[:end])
        with pytest.raises(ModelError, match=r"truncated|not a GGUF"):
            read_gguf_header(cut)


def test_closed_engines_are_reused_not_destroyed_and_answer_the_same(gguf_dir: Path) -> None:
    """Destroying an xllamacpp server after another existed could hang the process, so close
    parks the engine and a later load of the same GGUF and context reuses it, cache cold."""
    first = LlamaCppModel.load(gguf_dir, context_tokens=1024)
    engine = first._server
    before = first.chat(ask("count to three"), 8).text
    first.close()
    for _ in range(3):
        again = LlamaCppModel.load(gguf_dir, context_tokens=1024)
        assert again._server is engine
        assert again.chat(ask("count to three"), 8).text == before
        again.close()
    other = LlamaCppModel.load(gguf_dir, context_tokens=2048)
    assert other._server is not engine
    other.close()


def test_replies_carry_their_log_probability_before_the_grammar(model: LlamaCppModel) -> None:
    """A reply's ``logprob`` is the model's own (unmasked) probability of the decoded tokens:
    forcing a reply by grammar does not make it certain, so scoring a forced ``none`` means
    something."""
    free = model.chat(ask("say something"), 4)
    assert free.logprob is not None and free.logprob <= 0.0
    forced = model.chat(ask("say something"), 8, grammar='start: "zebra"')
    assert forced.logprob is not None and forced.logprob < -0.01


def test_kv_shift_moves_the_records_after_a_deletion_instead_of_recomputing_them(
    gguf_dir: Path, model: LlamaCppModel
) -> None:
    """With ``kv_shift`` a prompt that lost a record from its middle computes far fewer
    tokens than the plain prefix cache, which recomputes everything after the cut; while
    nothing was cut, its greedy output is the plain cache's."""
    records = [
        " ".join(f"{word}{n}" for n in range(40)) for word in ("alpha", "bravo", "charlie", "delta")
    ]
    full = [ChatMessage(role="user", content=r) for r in records]
    cut = [full[0], full[2], full[3]]  # the second record deleted
    ids_cut = model.render_chat(cut)[0]
    ids_full = model.render_chat(full)[0]
    shared = next(i for i, (a, b) in enumerate(zip(ids_full, ids_cut, strict=False)) if a != b)
    plain_calls: list[Any] = []
    model.prefix_cache = True
    model.reset_cache()
    for messages in (full, cut):
        plain_calls.append(model.chat(messages, 4))
    with LlamaCppModel.load(
        gguf_dir, model_id="tiny-gguf", context_tokens=4096, kv_shift=True
    ) as shifting:
        assert shifting.describe()["kvShift"] is True
        assert any(n.startswith("KV shift: on") for n in shifting.settings_notes())
        # reports and resumable journals keep a shifted cache apart from a plain one
        assert handle_for(shifting).prefix_cache == "on + KV shift"
        assert handle_for(model).prefix_cache == "on"
        shifted = [shifting.chat(messages, 4) for messages in (full, cut)]
    assert plain_calls[1].prefill_tokens == len(ids_cut) - shared
    assert shifted[1].prefill_tokens is not None
    assert shifted[1].prefill_tokens < (len(ids_cut) - shared) // 2
    assert shifted[0].text == plain_calls[0].text  # identical before any cut
    assert model.describe()["kvShift"] is False
    with pytest.raises(ModelError, match="needs the prefix cache on"):
        LlamaCppModel.load(gguf_dir, prefix_cache=False, kv_shift=True)


def test_warm_up_pays_the_one_time_costs_and_leaves_the_cache_cold(model: LlamaCppModel) -> None:
    turn = ask("first question")
    model.reset_cache()
    before = model.chat(turn, 8)
    model.constrained = True
    try:
        model._decision_grammar = None  # as just loaded
        model.warm_up()
        assert model._decision_grammar is not None  # built now, not in the first decision
        after = model.chat(turn, 8)
    finally:
        model.constrained = False
    # the next call starts cold, as a comparison's first policy does, and answers the same
    assert after.prefill_tokens == len(model.render_chat(turn)[0])
    assert (after.text, after.generated_tokens) == (before.text, before.generated_tokens)


def test_warm_up_reports_no_progress_and_keeps_the_listener(model: LlamaCppModel) -> None:
    """The window's live line must not show the warm-up as the first policy's step 1."""
    heard: list[GenerationProgress] = []
    model.progress_listener = heard.append
    try:
        model.warm_up()
        assert heard == []
        assert model.progress_listener == heard.append
        model.chat(ask("first question"), 4)
        assert heard  # the listener still hears real calls
    finally:
        model.progress_listener = None
