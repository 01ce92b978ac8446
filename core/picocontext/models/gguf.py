"""GGUF → standard MLX model directory (the embedded SmolLM2 default needs no hub).

What the conversion has to undo or rebuild:

* llama.cpp permutes the rows of ``attn_q``/``attn_k`` so its RoPE can rotate adjacent pairs;
  MLX's Llama uses the Hugging Face layout (rotate halves), so the permutation is inverted per
  head. Quantized tensors are permuted row-wise too (rows are independent of the column-wise
  quantization groups).
* The tokenizer lives in GGUF metadata (vocab, merges, token types, pre-tokenizer name); we
  rebuild a byte-level BPE ``tokenizer.json`` with ``tokenizers`` and a
  ``tokenizer_config.json`` carrying the GGUF's chat template.
* MLX reads Q4_0/Q4_1 as 4-bit affine with group size 32. On the CPU backend the 4-bit kernels
  are very slow, so weights are written dense float32 there; on Metal they stay 4-bit.

Re-running is a no-op: the output carries a stamp with the source's content hash and the
converter version.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from picocontext.errors import ModelError

CONVERTER_VERSION = "1"
STAMP_FILE = "picocontext-import.json"

# GGUF tensor names → mlx_lm Llama parameter names.
_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_TOP_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
# GGUF file types MLX loads as quantized arrays: (bits, group size).
_QUANT_TYPES = {2: (4, 32), 3: (4, 32), 7: (8, 32)}

# Pre-tokenizer regexes by GGUF ``tokenizer.ggml.pre`` name (llama.cpp's table, same facts).
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_DIGITS_THEN_GPT2 = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva")
_PLAIN_GPT2 = ("gpt2", "default", "gpt-2", "mpt", "olmo", "jais")
_LLAMA3_LIKE = ("llama3", "llama-bpe", "qwen2", "smaug-bpe", "dbrx")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def unpermute_rows(w: Any, n_head: int) -> Any:
    """Invert llama.cpp's Q/K row permutation for one (possibly quantized) 2-D tensor.

    llama.cpp reorders each head's rows from [first half, second half] to interleaved pairs;
    this restores [first half, second half]. Works on numpy and MLX arrays alike."""
    rows = w.shape[0]
    if rows % (2 * n_head):
        raise ModelError(f"cannot undo the RoPE permutation: {rows} rows, {n_head} heads")
    rest = tuple(w.shape[1:])
    half = rows // n_head // 2
    return w.reshape(n_head, half, 2, *rest).swapaxes(1, 2).reshape(rows, *rest)


def permute_rows(w: Any, n_head: int) -> Any:
    """llama.cpp's permutation (the inverse of :func:`unpermute_rows`); used by tests."""
    rows = w.shape[0]
    rest = tuple(w.shape[1:])
    half = rows // n_head // 2
    return w.reshape(n_head, 2, half, *rest).swapaxes(1, 2).reshape(rows, *rest)


def _scalar(meta: dict[str, Any], key: str, default: Any = None) -> Any:
    if key not in meta:
        if default is None:
            raise ModelError(f"GGUF metadata lacks {key}")
        return default
    value = meta[key]
    return value.item() if hasattr(value, "item") else value


def build_tokenizer_json(meta: dict[str, Any]) -> str:
    """A byte-level BPE ``tokenizer.json`` from GGUF vocab, merges and token types."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    if _scalar(meta, "tokenizer.ggml.model") != "gpt2":
        raise ModelError(
            "only byte-level BPE (tokenizer.ggml.model = gpt2) GGUF vocabularies are supported"
        )
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    merges_raw: list[str] = list(meta.get("tokenizer.ggml.merges", []))
    types_raw: Any = meta.get("tokenizer.ggml.token_type", [])
    types = [int(t) for t in (types_raw.tolist() if hasattr(types_raw, "tolist") else types_raw)]
    vocab = {token: i for i, token in enumerate(tokens)}
    merges: list[tuple[str, str]] = []
    for merge in merges_raw:
        left, _, right = merge.partition(" ")
        merges.append((left, right))
    bpe = models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False)
    tokenizer = Tokenizer(bpe)
    pre = str(_scalar(meta, "tokenizer.ggml.pre", "default"))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if pre in _DIGITS_THEN_GPT2:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    elif pre in _PLAIN_GPT2:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif pre in _LLAMA3_LIKE:
        from tokenizers import Regex

        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"), byte_level]
        )
    else:
        raise ModelError(f"unsupported GGUF pre-tokenizer {pre!r}")
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    # Control (3) and user-defined (4) tokens are matched whole, never split by BPE.
    special = [
        AddedToken(tokens[i], special=(t == 3), normalized=False)
        for i, t in enumerate(types)
        if t in (3, 4)
    ]
    tokenizer.add_special_tokens([t for t in special if t.special])
    tokenizer.add_tokens([t for t in special if not t.special])
    return str(tokenizer.to_str())


def _token(meta: dict[str, Any], key: str) -> str | None:
    if key not in meta:
        return None
    index = int(_scalar(meta, key))
    tokens = meta["tokenizer.ggml.tokens"]
    return str(tokens[index]) if 0 <= index < len(tokens) else None


def llama_config(meta: dict[str, Any]) -> dict[str, Any]:
    arch = _scalar(meta, "general.architecture")
    if arch != "llama":
        raise ModelError(f"only llama-architecture GGUF files are supported (this one is {arch!r})")
    p = "llama."
    hidden = int(_scalar(meta, p + "embedding_length"))
    heads = int(_scalar(meta, p + "attention.head_count"))
    vocab = len(meta["tokenizer.ggml.tokens"])
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": int(_scalar(meta, p + "block_count")),
        "intermediate_size": int(_scalar(meta, p + "feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_scalar(meta, p + "attention.head_count_kv", heads)),
        "head_dim": int(_scalar(meta, p + "rope.dimension_count", hidden // heads)),
        "rms_norm_eps": float(_scalar(meta, p + "attention.layer_norm_rms_epsilon")),
        "rope_theta": float(_scalar(meta, p + "rope.freq_base", 10000.0)),
        "max_position_embeddings": int(_scalar(meta, p + "context_length", 2048)),
        "vocab_size": vocab,
        "tie_word_embeddings": True,
        "bos_token_id": int(_scalar(meta, "tokenizer.ggml.bos_token_id", -1)),
        "eos_token_id": int(_scalar(meta, "tokenizer.ggml.eos_token_id")),
    }


def tensor_bits(w: Any, scales: Any, group: int) -> int:
    """Bits per weight of a packed uint32 tensor (a Q4_1 file keeps its embedding at 8 bits)."""
    bits = int(w.shape[-1]) * 32 // (int(scales.shape[-1]) * group)
    if bits not in (2, 3, 4, 5, 6, 8):
        raise ModelError(
            f"unsupported quantized tensor layout {tuple(w.shape)}/{tuple(scales.shape)}"
        )
    return bits


def _convert_weights(
    weights: dict[str, Any], config: dict[str, Any], group: int, dense: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Renamed, un-permuted weights plus per-layer quantization settings (empty if dense)."""
    import mlx.core as mx

    out: dict[str, Any] = {}
    layers: dict[str, Any] = {}
    bases = sorted({k.rsplit(".", 1)[0] for k in weights})
    for base in bases:
        parts = base.split(".")
        if parts[0] == "blk":
            name = f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}"
            kind = parts[2]
        elif base in _TOP_NAMES:
            name = _TOP_NAMES[base]
            kind = base
        else:
            raise ModelError(f"unexpected GGUF tensor {base}")
        w = weights[f"{base}.weight"]
        scales = weights.get(f"{base}.scales")
        biases = weights.get(f"{base}.biases")
        heads = {
            "attn_q": config["num_attention_heads"],
            "attn_k": config["num_key_value_heads"],
        }.get(kind)
        if scales is not None:
            bits = tensor_bits(w, scales, group)
            if dense:
                w = mx.dequantize(w, scales, biases, group_size=group, bits=bits)
                w = w.astype(mx.float32)
                scales = biases = None
            else:
                layers[name] = {"group_size": group, "bits": bits}
        if heads is not None:
            w = unpermute_rows(w, heads)
            if scales is not None:
                scales = unpermute_rows(scales, heads)
                biases = unpermute_rows(biases, heads)
        out[f"{name}.weight"] = (
            w if scales is not None or w.dtype == mx.float32 else w.astype(mx.float32)
        )
        if scales is not None:
            out[f"{name}.scales"] = scales
            out[f"{name}.biases"] = biases
    if "lm_head.weight" in out:
        config["tie_word_embeddings"] = False
    return out, layers


def read_stamp(directory: Path) -> dict[str, Any] | None:
    try:
        value = json.loads((directory / STAMP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def is_current(directory: Path, stamp: dict[str, Any]) -> bool:
    """The directory was written by this converter from the same source in the same mode."""
    found = read_stamp(directory)
    return (
        found is not None
        and all(found.get(k) == v for k, v in stamp.items())
        and (directory / "config.json").is_file()
        and (directory / "model.safetensors").is_file()
        and (directory / "tokenizer.json").is_file()
    )


def convert_gguf(
    gguf: Path,
    out_dir: Path,
    *,
    dense: bool,
    source_sha256: str | None = None,
    extra_stamp: dict[str, Any] | None = None,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Write an MLX directory for ``gguf`` at ``out_dir``; a no-op if its stamp matches.

    Runs on a private MLX worker thread (see :mod:`picocontext.models.mlx_backend`)."""
    from picocontext.models.mlx_backend import MLXWorker

    digest = source_sha256 or sha256_file(gguf)
    stamp = {
        "converter": CONVERTER_VERSION,
        "source_sha256": digest,
        "weights": "dense-float32" if dense else "quantized",
        **(extra_stamp or {}),
    }
    if is_current(out_dir, stamp):
        return out_dir
    say = log or (lambda _m: None)
    say(f"converting {gguf.name} → {out_dir} ({stamp['weights']})")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".import-", dir=out_dir.parent))
    worker = MLXWorker("picocontext-gguf")
    try:

        def work() -> None:
            import mlx.core as mx

            loaded: Any = mx.load(str(gguf), return_metadata=True)
            weights: dict[str, Any] = loaded[0]
            meta: dict[str, Any] = loaded[1]
            config = llama_config(meta)
            file_type = int(_scalar(meta, "general.file_type", 0))
            quant = _QUANT_TYPES.get(file_type)
            has_quantized = any(k.endswith(".scales") for k in weights)
            if has_quantized and quant is None:
                raise ModelError(f"unsupported GGUF file type {file_type}")
            bits, group = quant or (4, 32)
            converted, layers = _convert_weights(weights, config, group, dense)
            if layers:
                config["quantization"] = {"group_size": group, "bits": bits, **layers}
            mx.eval(converted)
            mx.save_safetensors(str(staging / "model.safetensors"), converted, {"format": "mlx"})
            (staging / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
            (staging / "tokenizer.json").write_text(build_tokenizer_json(meta), encoding="utf-8")
            template = meta.get("tokenizer.chat_template")
            tokenizer_config = {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "model_max_length": config["max_position_embeddings"],
                "bos_token": _token(meta, "tokenizer.ggml.bos_token_id"),
                "eos_token": _token(meta, "tokenizer.ggml.eos_token_id"),
                "pad_token": _token(meta, "tokenizer.ggml.padding_token_id"),
                "unk_token": _token(meta, "tokenizer.ggml.unknown_token_id"),
                "add_bos_token": bool(_scalar(meta, "tokenizer.ggml.add_bos_token", False)),
                "add_eos_token": False,
                "clean_up_tokenization_spaces": False,
            }
            if isinstance(template, str) and template.strip():
                tokenizer_config["chat_template"] = template
            (staging / "tokenizer_config.json").write_text(
                json.dumps(tokenizer_config, indent=2), encoding="utf-8"
            )
            (staging / STAMP_FILE).write_text(json.dumps(stamp, indent=2), encoding="utf-8")

        worker.call(work)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
        out_dir.chmod(0o755)  # mkdtemp made it private; a model cache is ordinary data
    finally:
        worker.close()
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out_dir
