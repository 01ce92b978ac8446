"""Constrained tool steps and answers: grammars built from the offered tools' schemas and the
task's answer schema admit exactly valid replies, and generation stops at their end."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picocontext import ModelInput, Phase, Record, Role, Scope, Snapshot, ToolSpec
from picocontext.backend import restrict_ids, tools_json
from picocontext.models.constrained import (
    DecisionGrammar,
    action_lark,
    answer_lark,
    input_lark,
    tool_call_schema,
)
from picocontext.models.toolcalls import parse_text_tool_calls
from picocontext.policies.navigated_tools import NAV_TOOLS

pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

IDS = ["turn-1", "turn-2", "sheet-2", "sheet-10"]
TOOLS: list[dict[str, Any]] = json.loads(
    tools_json(
        (
            NAV_TOOLS[0],
            restrict_ids(NAV_TOOLS[1], IDS, "ids"),
            restrict_ids(NAV_TOOLS[2], IDS, "id"),
            ToolSpec(
                name="recall",
                description="Older records for a query.",
                parameters={
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "maxLength": 40},
                        "altitude": {"type": "string", "enum": ["auto", "entity"]},
                    },
                    "required": ["query"],
                    "additionalProperties": False,
                },
            ),
        )
    )
)
ANSWER = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "object",
            "properties": {k: {"type": "string", "maxLength": 24} for k in ("cell0", "cell1")},
            "required": ["cell0", "cell1"],
            "additionalProperties": False,
        }
    },
    "required": ["facts"],
    "additionalProperties": False,
}
SCOPE = Scope(user_id="u", conversation_id="c", branch_id="b")
FIXTURES = [HealthCheck.function_scoped_fixture]


@pytest.fixture(scope="module")
def grammar(hf_tokenizer: Any) -> DecisionGrammar:
    return DecisionGrammar(hf_tokenizer, len(hf_tokenizer), hf_tokenizer.eos_token_id)


def accepts(grammar: DecisionGrammar, tokenizer: Any, lark: str, text: str) -> bool:
    matcher = grammar.matcher_for(lark)
    ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
    return bool(matcher.validate_tokens(ids) == len(ids))


def wrap(name: str, arguments: dict[str, Any]) -> str:
    body = json.dumps({"name": name, "arguments": arguments}, separators=(", ", ": "))
    return f"<tool_call>\n{body}\n</tool_call>"


def arguments_schema(name: str) -> dict[str, Any]:
    (tool,) = [t for t in TOOLS if t["function"]["name"] == name]
    schema: dict[str, Any] = tool["function"]["parameters"]
    return schema


def test_tool_call_schema_offers_each_tool_under_its_own_parameters() -> None:
    schema = tool_call_schema(TOOLS)
    names = [v["properties"]["name"]["const"] for v in schema["anyOf"]]
    assert names == ["index", "look", "open", "recall"]
    for variant, tool in zip(schema["anyOf"], TOOLS, strict=True):
        assert variant["properties"]["arguments"] == tool["function"]["parameters"]
    single = tool_call_schema(TOOLS[:1])
    assert "anyOf" not in single and single["properties"]["name"] == {"const": "index"}


def test_embedded_models_default_to_constrained_decoding(tmp_path: Path) -> None:
    from picocontext.models.registry import ResolvedModel, is_embedded

    assert is_embedded(ResolvedModel(path=tmp_path, model_id="m", requested="smollm2-135m"))
    assert not is_embedded(ResolvedModel(path=tmp_path, model_id="m", requested="qwen3-1.7b-4bit"))
    assert not is_embedded(ResolvedModel(path=tmp_path, model_id="m", requested=str(tmp_path)))


def test_phase_chooses_the_grammar() -> None:
    snapshot = Snapshot(
        scope=SCOPE, records=(Record(id="q", role=Role.USER, body="Which?", protected=True),)
    )
    schema = json.dumps(ANSWER)
    tools = tools_json(NAV_TOOLS)

    def lark(phase: Phase, **extra: Any) -> str | None:
        return input_lark(ModelInput(context=snapshot, phase=phase, **extra), special_tags=True)

    assert "keep_context" in str(lark(Phase.EDIT))
    assert lark(Phase.COMPLETION) is None  # free-text answers stay free
    assert lark(Phase.COMPLETION, answer_schema_json=schema) == answer_lark(ANSWER)
    assert lark(Phase.TOOLS, tools_json=tools) == action_lark(
        json.loads(tools), None, special_tags=True
    )
    assert lark(Phase.TOOLS, tools_json="[]") is None
    assert lark(Phase.TOOLS, tools_json="[]", answer_schema_json=schema) == answer_lark(ANSWER)
    with_answer = lark(Phase.TOOLS, tools_json=tools, answer_schema_json=schema)
    assert with_answer == action_lark(json.loads(tools), ANSWER, special_tags=True)


ids_st = st.sampled_from(IDS)
calls_st: st.SearchStrategy[tuple[str, dict[str, Any]]] = st.one_of(
    st.just(("index", {})),
    st.lists(ids_st, min_size=1, max_size=4).map(lambda ids: ("look", {"ids": ids})),
    ids_st.map(lambda i: ("open", {"id": i})),
    st.tuples(
        st.text(st.characters(codec="ascii", categories=["L", "N", "Zs"]), max_size=40),
        st.sampled_from([None, "auto", "entity"]),
        # members in the order the offered (key-sorted) schema lists them, as the prompt shows
    ).map(lambda q: ("recall", ({"altitude": q[1]} if q[1] else {}) | {"query": q[0]})),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(calls_st)
def test_every_valid_call_is_accepted(
    grammar: DecisionGrammar, hf_tokenizer: Any, call: tuple[str, dict[str, Any]]
) -> None:
    lark = action_lark(TOOLS, None, special_tags=grammar.special_tags)
    assert accepts(grammar, hf_tokenizer, lark, wrap(*call))


unknown_id = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-0123456789", min_size=1, max_size=10)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(unknown_id.filter(lambda i: i not in IDS))
def test_ids_outside_the_enum_are_rejected(
    grammar: DecisionGrammar, hf_tokenizer: Any, node: str
) -> None:
    lark = action_lark(TOOLS, ANSWER, special_tags=grammar.special_tags)
    assert not accepts(grammar, hf_tokenizer, lark, wrap("open", {"id": node}))
    assert not accepts(grammar, hf_tokenizer, lark, wrap("look", {"ids": ["turn-1", node]}))


def test_malformed_replies_are_rejected(grammar: DecisionGrammar, hf_tokenizer: Any) -> None:
    free = action_lark(TOOLS, None, special_tags=grammar.special_tags)
    shaped = action_lark(TOOLS, ANSWER, special_tags=grammar.special_tags)
    refused = [
        wrap("forget", {"id": "turn-1"}),  # not an offered tool
        wrap("open", {"id": "turn-1", "level": "full"}),  # extra argument
        wrap("open", {}),  # missing argument
        wrap("look", {"ids": []}),  # below minItems
        wrap("index", {}) + "\n" + wrap("index", {}),  # one call per step
        "```json\n" + json.dumps({"name": "forget", "arguments": {}}) + "\n```",  # fenced
        "```json\n" + json.dumps({"name": "index", "arguments": {}}),  # an unclosed fence
        json.dumps({"name": "open", "arguments": {}}),  # a bare object, missing argument
    ]
    for text in refused:
        assert not accepts(grammar, hf_tokenizer, free, text), text
        assert not accepts(grammar, hf_tokenizer, shaped, text), text
    # a call may also come fenced, or bare where no JSON answer shares the opening
    call = json.dumps({"name": "index", "arguments": {}}, separators=(", ", ": "))
    assert accepts(grammar, hf_tokenizer, free, "```json\n" + call + "\n```")
    assert accepts(grammar, hf_tokenizer, shaped, "```json\n" + call + "\n```")
    assert accepts(grammar, hf_tokenizer, free, call)
    assert not accepts(grammar, hf_tokenizer, shaped, call)
    # the answer branch: free text under no shape, exactly the shape otherwise
    answer = json.dumps({"facts": {"cell0": "a", "cell1": "b"}}, separators=(", ", ": "))
    assert accepts(grammar, hf_tokenizer, free, "The balance is 12.")
    assert not accepts(grammar, hf_tokenizer, shaped, "The balance is 12.")
    assert accepts(grammar, hf_tokenizer, shaped, answer)
    for bad in (
        json.dumps({"facts": {"cell0": "a"}}),  # a missing key
        json.dumps({"facts": {"cell0": "a", "cell1": "b", "cell2": "c"}}),  # an extra key
        json.dumps({"facts": {"cell0": "a", "cell1": 3}}),  # not a string
        answer + " Done.",  # text after the answer
    ):
        assert not accepts(grammar, hf_tokenizer, answer_lark(ANSWER), bad), bad


def random_walk(grammar: DecisionGrammar, tokenizer: Any, lark: str, seed: int) -> list[int]:
    """Tokens chosen at random among those the grammar allows, until it ends (closing
    characters are favoured so free strings stay short)."""
    import numpy as np

    rng = random.Random(seed)
    matcher = grammar.matcher_for(lark)
    closers = {i for t, i in tokenizer.get_vocab().items() if any(c in t for c in '"]}')}
    out: list[int] = []
    for _ in range(400):
        words = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
        allowed = np.nonzero(np.unpackbits(words, bitorder="little"))[0].tolist()
        favoured = [i for i in allowed if i in closers]
        token = rng.choice(favoured if favoured and rng.random() < 0.6 else allowed)
        if token == tokenizer.eos_token_id:
            assert matcher.is_accepting()
            return out
        assert matcher.consume_token(token)
        out.append(token)
    raise AssertionError("the walk did not end within 400 tokens")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.integers(0, 2**32 - 1))
def test_every_string_the_call_grammar_accepts_is_a_valid_call(
    grammar: DecisionGrammar, hf_tokenizer: Any, seed: int
) -> None:
    lark = action_lark(TOOLS, ANSWER, special_tags=grammar.special_tags)
    text = hf_tokenizer.decode(random_walk(grammar, hf_tokenizer, lark, seed))
    if text.startswith(("<tool_call>", "```")):
        (call,) = parse_text_tool_calls(text)
        jsonschema.validate(json.loads(call.arguments), arguments_schema(call.name))
        if call.name == "open":
            assert json.loads(call.arguments)["id"] in IDS
    else:
        jsonschema.validate(json.loads(text), ANSWER)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.integers(0, 2**32 - 1))
def test_every_string_the_answer_grammar_accepts_is_a_valid_answer(
    grammar: DecisionGrammar, hf_tokenizer: Any, seed: int
) -> None:
    from picocontext_diagnostics.episodes.grading import facts_answer_schema, parse_facts_answer

    schema = facts_answer_schema(["cell0", "cell3"])
    text = hf_tokenizer.decode(random_walk(grammar, hf_tokenizer, answer_lark(schema), seed))
    assert set(parse_facts_answer(text)) == {"cell0", "cell3"}
    jsonschema.validate(json.loads(text), schema)


def test_a_bare_word_choice_is_one_offered_word_without_json_quotes(
    grammar: DecisionGrammar, hf_tokenizer: Any
) -> None:
    from picocontext.choices import BARE_WORDS_KEY

    schema = {"type": "string", "enum": ["n1", "n12", "none"], BARE_WORDS_KEY: True}
    lark = answer_lark(schema)
    for word in ("n1", "n12", "none"):
        assert accepts(grammar, hf_tokenizer, lark, word)
    for text in ('"n1"', "n2", "n1 ", "None", "nonenone"):
        assert not accepts(grammar, hf_tokenizer, lark, text)
    # Unmarked, the same enum is a JSON string, as before.
    plain = answer_lark({k: v for k, v in schema.items() if k != BARE_WORDS_KEY})
    assert accepts(grammar, hf_tokenizer, plain, '"n1"')
    assert not accepts(grammar, hf_tokenizer, plain, "n1")


def test_bare_words_need_a_string_enum_of_words() -> None:
    from picocontext.choices import BARE_WORDS_KEY
    from picocontext.errors import ModelError

    with pytest.raises(ModelError, match=BARE_WORDS_KEY):
        answer_lark({"type": "string", "enum": ["ok", ""], BARE_WORDS_KEY: True})


def test_a_shortening_reply_is_all_or_offered_letters_joined_by_commas(
    grammar: DecisionGrammar, hf_tokenizer: Any
) -> None:
    from picocontext.choices import kinds_schema, line_kinds

    kinds = line_kinds(["FACT a=1", "Sweep 1: idle", "Sweep 2: idle", "REMOVE b"])
    lark = answer_lark(json.loads(kinds_schema(kinds)))
    for text in ("all", "A", "C, A", "A, B, C"):
        assert accepts(grammar, hf_tokenizer, lark, text)
    for text in ("D", "A,B", "A, ", "a", "all, A", ""):
        assert not accepts(grammar, hf_tokenizer, lark, text)


def test_a_bare_list_needs_a_separator_and_items() -> None:
    from picocontext.choices import BARE_LIST_KEY
    from picocontext.errors import ModelError

    for broken in (
        {"anyOf": [{"type": "array", "items": {"enum": []}}], BARE_LIST_KEY: ", "},
        {"anyOf": [{"type": "array", "items": {"enum": ["A"]}}], BARE_LIST_KEY: ""},
    ):
        with pytest.raises(ModelError, match=BARE_LIST_KEY):
            answer_lark(broken)


# -- the real model: constrained steps stop at the end of the structure ------------------------

pytest.importorskip("mlx_lm")


@pytest.fixture(scope="module")
def model(tiny_dir: Path) -> Iterator[Any]:
    from picocontext.models.mlx_backend import MLXModel

    loaded = MLXModel.load(tiny_dir, model_id="tiny-actions", constrained=True)
    yield loaded
    loaded.close()


def noise(model: Any, seed: int) -> Any:
    """Random logit offsets so the random model explores the grammar; closing characters get
    a bonus so free strings end."""
    import mlx.core as mx

    vocab = model.tokenizer.get_vocab()
    closers = [i for t, i in vocab.items() if any(c in t for c in '"]}')]

    def factory() -> list[Any]:
        key = {"k": mx.random.key(seed)}

        def processor(tokens: Any, logits: Any) -> Any:
            key["k"], sub = mx.random.split(key["k"])
            out = logits + 8.0 * mx.random.normal(logits.shape, key=sub)
            out[..., closers] = out[..., closers] + 10.0
            return out

        return [processor]

    return factory


def tool_input(answer: bool) -> ModelInput:
    records = (Record(id="q", role=Role.USER, body="Which balance?", protected=True),)
    return ModelInput(
        context=Snapshot(scope=SCOPE, records=records),
        phase=Phase.TOOLS,
        tools_json=json.dumps(TOOLS),
        system_text="Read the archive with the tools, then answer.",
        guidance="Call a tool or answer.",
        answer_schema_json=json.dumps(ANSWER) if answer else None,
    )


@pytest.mark.mlx
@pytest.mark.parametrize("seed", range(6))
def test_constrained_tool_steps_end_with_the_structure(model: Any, seed: int) -> None:
    model.extra_processors = noise(model, seed)
    try:
        prompt = model.prepare(tool_input(answer=True))
        assert "decoding: constrained" in prompt.notes
        response = model.generate(prompt, 2000)
    finally:
        model.extra_processors = None
    # stopped by end-of-sequence right after the structure, never by the cap
    assert not response.reached_token_limit
    if response.tool_calls:
        (call,) = response.tool_calls
        jsonschema.validate(json.loads(call.arguments), arguments_schema(call.name))
        assert response.text.rstrip().endswith(("</tool_call>", "\n```"))
    else:
        jsonschema.validate(json.loads(response.text), ANSWER)


@pytest.mark.mlx
def test_constrained_answer_stops_at_the_closing_brace(model: Any) -> None:
    snapshot = tool_input(answer=True).context
    model.extra_processors = noise(model, 3)
    try:
        prompt = model.prepare(
            ModelInput(
                context=snapshot, phase=Phase.COMPLETION, answer_schema_json=json.dumps(ANSWER)
            )
        )
        response = model.generate(prompt, 2000)
    finally:
        model.extra_processors = None
    assert not response.reached_token_limit and response.text.endswith("}")
    # the text is the answer and nothing else; one end-of-sequence token ends it
    jsonschema.validate(json.loads(response.text), ANSWER)
    body = model.tokenizer.encode(response.text, add_special_tokens=False)
    assert response.generated_tokens <= len(body) + 1


@pytest.mark.mlx
def test_free_decoding_applies_no_grammar(model: Any) -> None:
    model.constrained = False
    try:
        prompt = model.prepare(tool_input(answer=True))
        assert "decoding: free" in prompt.notes
        assert model.describe()["decoding"] == "free"
        response = model.generate(prompt, 12)
    finally:
        model.constrained = True
    assert response.reached_token_limit and response.generated_tokens == 12
