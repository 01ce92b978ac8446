"""GGUF import: RoPE un-permutation, tokenizer rebuilt from GGUF metadata, stamp no-op."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext import ModelError
from picocontext.models.gguf import (
    STAMP_FILE,
    build_tokenizer_json,
    convert_gguf,
    is_current,
    permute_rows,
    read_stamp,
    tensor_bits,
    unpermute_rows,
)

pytestmark = pytest.mark.mlx


@settings(max_examples=60, deadline=None)
@given(
    heads=st.integers(1, 6),
    half=st.integers(1, 8),
    cols=st.integers(1, 5),
)
def test_unpermute_inverts_the_llama_cpp_permutation(heads: int, half: int, cols: int) -> None:
    rows = heads * half * 2
    w = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    permuted = permute_rows(w, heads)
    assert np.array_equal(unpermute_rows(permuted, heads), w)
    if half > 1:
        assert not np.array_equal(permuted, w)  # the permutation really moves rows


def test_unpermute_pairs_rows_per_head_like_rope_expects() -> None:
    # One head of 4 rows: llama.cpp stores [r0, r2, r1, r3]; we restore [r0, r1, r2, r3].
    stored = np.array([[0.0], [2.0], [1.0], [3.0]])
    assert unpermute_rows(stored, 1).ravel().tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(ModelError, match="RoPE permutation"):
        unpermute_rows(np.zeros((6, 2)), 4)


def test_tensor_bits_reads_mixed_quantization() -> None:
    assert tensor_bits(np.zeros((8, 72)), np.zeros((8, 18)), 32) == 4  # Q4_1 layer
    assert tensor_bits(np.zeros((8, 144)), np.zeros((8, 18)), 32) == 8  # 8-bit embedding


def _gguf_meta_from(tokenizer_json: dict[str, Any], template: str) -> dict[str, Any]:
    vocab = tokenizer_json["model"]["vocab"]
    added = {t["content"]: t["id"] for t in tokenizer_json["added_tokens"]}
    size = max([*vocab.values(), *added.values()]) + 1
    tokens = [""] * size
    types = [1] * size
    for text, i in vocab.items():
        tokens[i] = text
    for text, i in added.items():
        tokens[i] = text
        types[i] = 3
    merges = [" ".join(m) if isinstance(m, list) else m for m in tokenizer_json["model"]["merges"]]
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.token_type": types,
        "tokenizer.chat_template": template,
    }


SAMPLES = [
    "plain ascii text, with punctuation!",
    "Zürich café naïve — «quotes» 東京 🙂👍🏽 Ωμέγα",
    "tabs\tand\nnewlines\n\n  indented   spaces",
    "digits 0123456789 and 3.14159",
    "<|im_start|>user\nhi<|im_end|>",
]


def test_tokenizer_rebuilt_from_gguf_metadata_matches_the_original(tiny_dir: Path) -> None:
    from tokenizers import Tokenizer

    original = json.loads((tiny_dir / "tokenizer.json").read_text(encoding="utf-8"))
    meta = _gguf_meta_from(original, "{{ messages }}")
    rebuilt = Tokenizer.from_str(build_tokenizer_json(meta))
    reference = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    for text in SAMPLES:
        assert rebuilt.encode(text).ids == reference.encode(text).ids
        assert rebuilt.decode(rebuilt.encode(text).ids, skip_special_tokens=False) == text
    assert rebuilt.token_to_id("<|im_end|>") == reference.token_to_id("<|im_end|>")


def test_unknown_pre_tokenizer_and_vocab_model_are_refused(tiny_dir: Path) -> None:
    original = json.loads((tiny_dir / "tokenizer.json").read_text(encoding="utf-8"))
    meta = _gguf_meta_from(original, "")
    with pytest.raises(ModelError, match="pre-tokenizer"):
        build_tokenizer_json({**meta, "tokenizer.ggml.pre": "mystery"})
    with pytest.raises(ModelError, match="byte-level BPE"):
        build_tokenizer_json({**meta, "tokenizer.ggml.model": "llama"})


@pytest.fixture(scope="module")
def llama_gguf(
    tmp_path_factory: pytest.TempPathFactory, tiny_dir: Path
) -> tuple[Path, dict[str, Any]]:
    """A small float32 llama GGUF written with MLX, Q/K stored in llama.cpp's permuted order."""
    mx = pytest.importorskip("mlx.core")
    from picocontext.models.tiny import TINY_CHAT_TEMPLATE

    original = json.loads((tiny_dir / "tokenizer.json").read_text(encoding="utf-8"))
    meta = _gguf_meta_from(original, TINY_CHAT_TEMPLATE)
    vocab = len(meta["tokenizer.ggml.tokens"])
    hidden, heads, kv_heads, layers, ffn = 64, 4, 2, 2, 96
    head_dim = hidden // heads
    rng = np.random.default_rng(7)
    hf: dict[str, np.ndarray] = {}
    arrays: dict[str, Any] = {
        "token_embd.weight": rng.normal(0, 1, (vocab, hidden)).astype(np.float32),
        "output_norm.weight": np.ones(hidden, dtype=np.float32),
    }
    for i in range(layers):
        q = rng.normal(0, 0.2, (heads * head_dim, hidden)).astype(np.float32)
        k = rng.normal(0, 0.2, (kv_heads * head_dim, hidden)).astype(np.float32)
        hf[f"model.layers.{i}.self_attn.q_proj.weight"] = q
        hf[f"model.layers.{i}.self_attn.k_proj.weight"] = k
        arrays |= {
            f"blk.{i}.attn_q.weight": permute_rows(q, heads),
            f"blk.{i}.attn_k.weight": permute_rows(k, kv_heads),
            f"blk.{i}.attn_v.weight": rng.normal(0, 0.2, (kv_heads * head_dim, hidden)),
            f"blk.{i}.attn_output.weight": rng.normal(0, 0.2, (hidden, hidden)),
            f"blk.{i}.ffn_gate.weight": rng.normal(0, 0.2, (ffn, hidden)),
            f"blk.{i}.ffn_up.weight": rng.normal(0, 0.2, (ffn, hidden)),
            f"blk.{i}.ffn_down.weight": rng.normal(0, 0.2, (hidden, ffn)),
            f"blk.{i}.attn_norm.weight": np.ones(hidden),
            f"blk.{i}.ffn_norm.weight": np.ones(hidden),
        }
    tensors = {k: mx.array(np.asarray(v, dtype=np.float32)) for k, v in arrays.items()}
    end = original["added_tokens"]
    eos = next(t["id"] for t in end if t["content"] == "<|im_end|>")
    metadata = {
        **{k: v for k, v in meta.items() if k != "tokenizer.ggml.token_type"},
        "tokenizer.ggml.token_type": mx.array(meta["tokenizer.ggml.token_type"], dtype=mx.int32),
        "general.architecture": "llama",
        "general.file_type": mx.array(0, dtype=mx.uint32),
        "llama.embedding_length": mx.array(hidden, dtype=mx.uint32),
        "llama.block_count": mx.array(layers, dtype=mx.uint32),
        "llama.feed_forward_length": mx.array(ffn, dtype=mx.uint32),
        "llama.attention.head_count": mx.array(heads, dtype=mx.uint32),
        "llama.attention.head_count_kv": mx.array(kv_heads, dtype=mx.uint32),
        "llama.rope.dimension_count": mx.array(head_dim, dtype=mx.uint32),
        "llama.attention.layer_norm_rms_epsilon": mx.array(1e-5, dtype=mx.float32),
        "llama.rope.freq_base": mx.array(10000.0, dtype=mx.float32),
        "llama.context_length": mx.array(2048, dtype=mx.uint32),
        "tokenizer.ggml.eos_token_id": mx.array(eos, dtype=mx.uint32),
        "tokenizer.ggml.padding_token_id": mx.array(0, dtype=mx.uint32),
    }
    path = tmp_path_factory.mktemp("gguf") / "small.gguf"
    mx.save_gguf(str(path), tensors, metadata)
    return path, hf


def test_convert_restores_hf_layout_loads_and_is_a_no_op_when_current(
    llama_gguf: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    from safetensors.numpy import load_file

    gguf, hf = llama_gguf
    out = convert_gguf(gguf, tmp_path / "model", dense=True)
    weights = load_file(str(out / "model.safetensors"))
    for name, expected in hf.items():
        assert np.array_equal(weights[name], expected), name
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_key_value_heads"] == 2
    assert "quantization" not in config
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    assert (
        tokenizer_config["eos_token"] == "<|im_end|>"
        and "tool_call" in tokenizer_config["chat_template"]
    )
    stamp = read_stamp(out)
    assert stamp is not None and stamp["weights"] == "dense-float32"
    assert is_current(out, stamp)
    before = (out / STAMP_FILE).stat().st_mtime_ns
    convert_gguf(gguf, tmp_path / "model", dense=True)
    assert (out / STAMP_FILE).stat().st_mtime_ns == before  # re-running did nothing

    from picocontext import ChatMessage
    from picocontext.models.mlx_backend import MLXModel

    with MLXModel.load(out, model_id="small-llama") as model:
        response = model.chat([ChatMessage(role="user", content="hello")], 5)
        assert response.generated_tokens >= 1
