"""A tiny random-weight Qwen3-format model directory, written in milliseconds.

Tests (here and in other packages) use it to run the real ``mlx_lm.load`` → chat template →
generation path without downloading anything. The weights are random, so the text is noise; a
forcing logits processor (see :func:`picocontext.models.mlx_backend.forced_tokens`) makes it
say exact token scripts when a test needs real tool-call parsing. The tokenizer is a small
byte-level BPE trained here with ``tokenizers``; the chat template is our own Qwen3-style
template with tools, tool calls, tool results and a thinking switch.

Needs ``numpy``, ``tokenizers`` and ``safetensors`` (all come with the ``mlx`` extra).
"""

from __future__ import annotations

import json
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
