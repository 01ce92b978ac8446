"""A tiny random-weight Qwen3-format model directory, written in milliseconds.

Tests (here and in other packages) use it to run the real ``mlx_lm.load`` → chat template →
generation path without downloading anything. The weights are random, so the text is noise; a
forcing logits processor (see :func:`picocontext.models.mlx_backend.forced_tokens`) makes it
say exact token scripts when a test needs real tool-call parsing. The tokenizer is a small
byte-level BPE trained here with ``tokenizers``; the chat template is our own Qwen3-style
template with tools, tool calls, tool results and a thinking switch.

Needs ``numpy``, ``tokenizers`` and ``safetensors`` (all come with the ``mlx`` extra).
:func:`write_tiny_gguf` writes the same kind of model as a GGUF file, with quantized tensors,
for the GGUF importer's tests (it needs the ``gguf`` package, also in the ``mlx`` extra).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TINY_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)

# Our own Qwen3-style template. Tool calls and results use the Qwen wire format; the developer
# role is (like the real Qwen3 template) not rendered, so adapters must reject it.
TINY_CHAT_TEMPLATE = r"""
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- '# Tools\n\nThese functions are available. ' }}
{{- 'Their signatures sit inside <tools></tools>:\n<tools>' }}
{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}
{{- '\n</tools>\n\nTo call one, reply with a JSON object holding "name" and ' }}
{{- '"arguments" inside <tool_call></tool_call> tags:\n<tool_call>\n' }}
{{- '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'user' or message.role == 'system' %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\n' + (message.content or '') }}
{%- for tool_call in message.tool_calls or [] %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{%- if (loop.first and message.content) or not loop.first %}{{- '\n' }}{%- endif %}
{{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
{%- if tool_call.arguments is string %}{{- tool_call.arguments }}
{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
{{- '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}
{{- '<think>\n\n</think>\n\n' }}{%- endif %}
{%- endif %}
""".strip()

# A plain ChatML template that knows nothing about tools (like SmolLM2's); tests use it to check
# that the adapter renders the tool protocol itself and says so.
PLAIN_CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_CORPUS = (
    "The lamp order uses the latest inventory facts and reports the price in USD.",
    "Record headers name the record id, protection, call ids and the result link.",
    "FACT amber=TQ-4819-X; REMOVE rack; FACT units=7; owner Mina keeps the notebook.",
    '{"baseRevision": 3, "operations": [{"action": "replace", "recordID": "step-1-data", '
    '"body": "FACT coral=invoice-0097"}]}',
    '{"name": "edit_context", "arguments": {"baseRevision": 0}} keep_context edit_context',
    "Zeile für Zeile: naïve café, 東京, Ωμέγα, emoji 🙂 and tabs\tand newlines\n.",
    "0123456789 +-*/=<>[](){}:;,.!?'\"`~@#$%^&|\\_",
)


def _train_tokenizer(vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(TINY_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(_CORPUS) * 4, trainer=trainer)
    return tokenizer


def tiny_config(vocab_size: int, layers: int = 2, hidden: int = 64) -> dict[str, Any]:
    heads, kv_heads = 4, 2
    return {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "intermediate_size": hidden * 2,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": hidden // heads,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab_size,
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "eos_token_id": 2,
    }


def _weights(config: dict[str, Any], seed: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    hidden = int(config["hidden_size"])
    head_dim = int(config["head_dim"])
    q_dim = int(config["num_attention_heads"]) * head_dim
    kv_dim = int(config["num_key_value_heads"]) * head_dim
    inter = int(config["intermediate_size"])

    def normal(*shape: int, std: float) -> Any:
        return rng.normal(0.0, std, size=shape).astype(np.float32)

    def ones(n: int) -> Any:
        return np.ones((n,), dtype=np.float32)

    weights: dict[str, Any] = {
        # A large embedding scale makes greedy choices clear-cut rather than near-ties.
        "model.embed_tokens.weight": normal(int(config["vocab_size"]), hidden, std=1.0),
        "model.norm.weight": ones(hidden),
    }
    for i in range(int(config["num_hidden_layers"])):
        p = f"model.layers.{i}."
        weights |= {
            p + "self_attn.q_proj.weight": normal(q_dim, hidden, std=0.2),
            p + "self_attn.k_proj.weight": normal(kv_dim, hidden, std=0.2),
            p + "self_attn.v_proj.weight": normal(kv_dim, hidden, std=0.2),
            p + "self_attn.o_proj.weight": normal(hidden, q_dim, std=0.2),
            p + "self_attn.q_norm.weight": ones(head_dim),
            p + "self_attn.k_norm.weight": ones(head_dim),
            p + "mlp.gate_proj.weight": normal(inter, hidden, std=0.2),
            p + "mlp.up_proj.weight": normal(inter, hidden, std=0.2),
            p + "mlp.down_proj.weight": normal(hidden, inter, std=0.2),
            p + "input_layernorm.weight": ones(hidden),
            p + "post_attention_layernorm.weight": ones(hidden),
        }
    return weights


def write_tiny_model(
    directory: str | Path,
    *,
    seed: int = 0,
    vocab_size: int = 512,
    layers: int = 2,
    hidden: int = 64,
    chat_template: str = TINY_CHAT_TEMPLATE,
) -> Path:
    """Write a loadable Qwen3-format directory (config, safetensors, tokenizer, template)."""
    from safetensors.numpy import save_file

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(vocab_size)
    tokenizer.save(str(path / "tokenizer.json"))
    actual_vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    config = tiny_config(actual_vocab, layers=layers, hidden=hidden)
    config["eos_token_id"] = tokenizer.token_to_id("<|im_end|>")
    (path / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 4096,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "chat_template": chat_template,
    }
    (path / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config, indent=2), encoding="utf-8"
    )
    save_file(_weights(config, seed), str(path / "model.safetensors"), metadata={"format": "mlx"})
    return path


# -- tiny GGUF files (for the importer's tests) ----------------------------------------------

# A template a GGUF file could carry; the importer must never copy it.
FOREIGN_GGUF_TEMPLATE = "{{ 'not our template: ' + messages[0].content }}"

# GGUF type of each layer matrix in the tiny files: several quant families in one model.
_TINY_TYPES = {
    "attn_q": "Q8_0",
    "attn_k": "Q4_0",
    "attn_v": "Q5_0",
    "attn_output": "F16",
    "ffn_gate": "Q4_1",
    "ffn_up": "Q8_0",
    "ffn_down": "Q4_0",
}


@dataclass(frozen=True)
class TinyGGUF:
    """A small GGUF file and the Hugging Face-layout float32 weights it should convert to."""

    path: Path
    expected: dict[str, Any]
    tied: bool


def _gguf_vocab(tokenizer: Any) -> tuple[list[str], list[str], list[int]]:
    """Tokens, merges and GGUF token types (3 control, 4 user-defined, 1 normal)."""
    data = json.loads(tokenizer.to_str())
    vocab: dict[str, int] = dict(data["model"]["vocab"])
    for added in data["added_tokens"]:
        vocab[added["content"]] = added["id"]
    tokens = [""] * (max(vocab.values()) + 1)
    for text, index in vocab.items():
        tokens[index] = text
    user_defined = ("<tool_call>", "</tool_call>")
    types = [(4 if t in user_defined else 3) if t in TINY_SPECIAL_TOKENS else 1 for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    return tokens, merges, types


@dataclass(frozen=True)
class _Encoded:
    stored: Any  # what the GGUF file holds
    qtype: Any  # GGMLQuantizationType for packed data, None for plain float arrays
    value: Any  # the float32 values it decodes to


def _encode(values: Any, qtype: str) -> _Encoded:
    import numpy as np
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    if qtype == "F32":
        return _Encoded(values.astype(np.float32), None, values.astype(np.float32))
    if qtype == "F16":
        half = values.astype(np.float16)
        return _Encoded(half, None, half.astype(np.float32))
    kind = GGMLQuantizationType[qtype]
    packed = quantize(values.astype(np.float32), kind)
    return _Encoded(packed, kind, dequantize(packed, kind))


def _tiny_embeddings(rng: Any, vocab: int, hidden: int, mode: str) -> dict[str, _Encoded]:
    values = rng.normal(0.0, 1.0, size=(vocab, hidden))
    if mode == "single":
        return {"token_embd.weight": _encode(values, "Q8_0")}
    if mode == "tied-copies":
        return {
            "token_embd.weight": _encode(values, "Q4_0"),
            "output.weight": _encode(values, "Q8_0"),
        }
    other = rng.normal(0.0, 1.0, size=(vocab, hidden))
    return {"token_embd.weight": _encode(values, "Q4_0"), "output.weight": _encode(other, "Q8_0")}


def _tiny_layer(rng: Any, arch: str, hidden: int, heads: int, kv_heads: int) -> dict[str, Any]:
    """One block's GGUF tensors by kind, each as (encoded, HF-layout expected value)."""
    import numpy as np

    from picocontext.models.gguf import permute_rows, unpermute_rows

    head_dim = hidden // heads
    shapes = {
        "attn_q": (hidden, hidden),
        "attn_k": (kv_heads * head_dim, hidden),
        "attn_v": (kv_heads * head_dim, hidden),
        "attn_output": (hidden, hidden),
        "ffn_gate": (2 * hidden, hidden),
        "ffn_up": (2 * hidden, hidden),
        "ffn_down": (hidden, 2 * hidden),
    }
    rope = {"attn_q": heads, "attn_k": kv_heads} if arch == "llama" else {}
    out: dict[str, Any] = {}
    for kind, shape in shapes.items():
        values = rng.normal(0.0, 0.2, size=shape)
        if kind in rope:
            encoded = _encode(permute_rows(values, rope[kind]), _TINY_TYPES[kind])
            out[f"{kind}.weight"] = (encoded, unpermute_rows(encoded.value, rope[kind]))
        else:
            encoded = _encode(values, _TINY_TYPES[kind])
            out[f"{kind}.weight"] = (encoded, encoded.value)
    for kind in ("attn_norm", "ffn_norm"):
        ones = _encode(np.ones((hidden,)), "F32")
        out[f"{kind}.weight"] = (ones, ones.value)
    if arch == "qwen2":
        for kind in ("attn_q", "attn_k", "attn_v"):
            bias = _encode(rng.normal(0.0, 0.1, size=(shapes[kind][0],)), "F32")
            out[f"{kind}.bias"] = (bias, bias.value)
    return out


def _write_gguf_header(writer: Any, arch: str, hidden: int, layers: int, context: int) -> None:
    heads = 4
    writer.add_block_count(layers)
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(2 * hidden)
    writer.add_head_count(heads)
    writer.add_head_count_kv(2)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    if arch == "llama":
        writer.add_rope_dimension_count(hidden // heads)


def _write_gguf_vocab(
    writer: Any, tokens: list[str], merges: list[str], types: list[int], pre: str, eos_id: int
) -> None:
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_merges(merges)
    writer.add_token_types(types)
    writer.add_eos_token_id(eos_id)
    writer.add_pad_token_id(tokens.index("<|endoftext|>"))
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(FOREIGN_GGUF_TEMPLATE)


def write_tiny_gguf(
    path: str | Path,
    *,
    arch: str = "qwen2",
    embeddings: str = "tied-copies",
    seed: int = 0,
    vocab_size: int = 512,
    hidden: int = 64,
    layers: int = 2,
    pre: str | None = None,
    eos_id: int | None = None,
    context: int = 2048,
) -> TinyGGUF:
    """Write a GGUF of ``arch`` with quantized tensors (Q4_0/Q4_1/Q5_0/Q8_0/F16) and a tiny
    byte-level BPE vocabulary, written with llama.cpp's own ``gguf`` writer.

    ``embeddings``: ``tied-copies`` stores the embedding twice (Q4_0 ``token_embd`` and a more
    precise Q8_0 ``output``, as Qwen2.5 files do), ``single`` once, ``untied`` with a different
    ``output`` matrix. Llama files get llama.cpp's Q/K row permutation; qwen2 files get q/k/v
    biases. ``expected`` maps each output tensor name to the float32 values the importer must
    write. ``architecture`` metadata is ``arch`` verbatim, so tests can ask for unsupported ones.
    """
    from gguf import GGUFWriter

    rng = _rng(seed)
    tokens, merges, types = _gguf_vocab(_train_tokenizer(vocab_size))
    writer = GGUFWriter(str(path), arch)
    _write_gguf_header(writer, arch, hidden, layers, context)
    default_pre = "qwen2" if arch == "qwen2" else "smollm"
    eos = tokens.index("<|im_end|>") if eos_id is None else eos_id
    _write_gguf_vocab(writer, tokens, merges, types, pre or default_pre, eos)
    expected: dict[str, Any] = {}
    embeds = _tiny_embeddings(rng, len(tokens), hidden, embeddings)
    best = embeds.get("output.weight") if embeddings == "tied-copies" else None
    for name, encoded in embeds.items():
        _add_tensor(writer, name, encoded)
    expected["model.embed_tokens.weight"] = (best or embeds["token_embd.weight"]).value
    if embeddings == "untied":
        expected["lm_head.weight"] = embeds["output.weight"].value
    norm = _encode(_ones(hidden), "F32")
    _add_tensor(writer, "output_norm.weight", norm)
    expected["model.norm.weight"] = norm.value
    for i in range(layers):
        for name, (encoded, value) in _tiny_layer(rng, arch, hidden, 4, 2).items():
            _add_tensor(writer, f"blk.{i}.{name}", encoded)
            expected[_hf_name(i, name)] = value
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return TinyGGUF(path=Path(path), expected=expected, tied=embeddings != "untied")


def _rng(seed: int) -> Any:
    import numpy as np

    return np.random.default_rng(seed)


def _ones(n: int) -> Any:
    import numpy as np

    return np.ones((n,), dtype=np.float32)


def _add_tensor(writer: Any, name: str, encoded: _Encoded) -> None:
    if encoded.qtype is None:
        writer.add_tensor(name, encoded.stored)
    else:
        writer.add_tensor(name, encoded.stored, raw_dtype=encoded.qtype)


def _hf_name(layer: int, name: str) -> str:
    from picocontext.models.gguf import LAYER_NAMES

    kind, _, suffix = name.rpartition(".")
    return f"model.layers.{layer}.{LAYER_NAMES[kind]}.{suffix}"
