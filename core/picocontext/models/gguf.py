"""GGUF → standard MLX model directory, for the ``llama`` and ``qwen2`` architectures.

The embedded models ship as GGUF files (llama.cpp's format). ``mlx_lm`` loads Hugging Face
style directories, so this module rebuilds one:

* **Reading.** llama.cpp's own ``gguf`` package reads every field and tensor and dequantizes
  every quant type bit-exactly (``mlx.core.load`` refuses Q5_0 and decodes Q4_K wrongly).
  Tensors are memory-mapped and converted one at a time, in row chunks, and streamed into the
  safetensors file, so memory stays bounded by a chunk, not by the model.
* **Layout.** A dequantized GGUF matrix is already (out, in). llama.cpp permutes the rows of
  ``attn_q``/``attn_k`` for the ``llama`` architecture only (its RoPE rotates adjacent pairs;
  MLX's rotates halves), so those are un-permuted per head there; ``qwen2`` files are not
  permuted and carry q/k/v biases.
* **Tied embeddings.** A file may carry ``token_embd`` and ``output`` as the same matrix at two
  quant types; the higher-precision copy becomes the (tied) embedding. Two different matrices
  stay untied.
* **Weights.** Dense float32 on the CPU (MLX's CPU matmul is fast only in float32 through
  OpenBLAS). On Metal, each quantized matrix is re-quantized to MLX's affine format at the bit
  width of its source type. Only the Metal path imports MLX.
* **Tokenizer.** ``tokenizer.json`` is rebuilt with ``tokenizers`` from the GGUF vocabulary,
  merges and token types, with the pre-tokenizer the file names; control tokens are special,
  user-defined ones (such as ``<tool_call>``) are added tokens. The result must round-trip a set
  of texts and keep every special token whole, or the import is refused.
* **Chat template.** Never the file's: the caller passes a reviewed one (see
  :mod:`picocontext.models.chattemplates`).

The output is written to a staging directory, renamed into place, and stamped last with the
source's sha256, the converter version and the template's hash; re-running with the same stamp
is a no-op, and a directory without a matching stamp is never trusted.

Reading the file is :mod:`picocontext.models.gguf_reader`, rebuilding the tokenizer
:mod:`picocontext.models.gguf_tokenizer`; this module maps, plans, writes and stamps.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from picocontext.errors import ModelError
from picocontext.models.gguf_reader import (
    GGUFSource,
    bits_per_weight,
    dequantize_rows,
    is_quantized,
    read_gguf,
)
from picocontext.models.gguf_reader import read_gguf_header as read_gguf_header
from picocontext.models.gguf_tokenizer import (
    build_tokenizer,
    check_tokenizer,
    stop_ids,
    tokenizer_config,
)

CONVERTER_VERSION = "2"
STAMP_FILE = "picocontext-import.json"
SUPPORTED_ARCHITECTURES = ("llama", "qwen2")
# The llama.cpp layout: the GGUF as shipped, named so, beside our tokenizer files.
GGUF_FILE = "model.gguf"
GGUF_WEIGHTS = "gguf"

# (what is happening, fraction done in [0, 1]); shared with the embedded-model fetcher.
Progress = Callable[[str, float], None]

# GGUF tensor base names → Hugging Face module names (both architectures).
LAYER_NAMES = {
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
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}

_ROWS_PER_CHUNK = 8192
_SAME_MATRIX_TOLERANCE = 0.25  # relative difference of two quantized copies of one matrix


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def unpermute_rows(w: Any, n_head: int) -> Any:
    """Invert llama.cpp's Q/K row permutation for one 2-D (or 1-D bias) tensor.

    llama.cpp reorders each head's rows from [first half, second half] to interleaved pairs;
    this restores [first half, second half]."""
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


# -- config ---------------------------------------------------------------------------------


def model_config(source: GGUFSource) -> dict[str, Any]:
    """A Hugging Face ``config.json`` for a supported architecture (refuses any other)."""
    arch = source.meta.get("general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise source.fail(
            f"architecture {arch!r} is not supported (supported: "
            f"{', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    p = f"{arch}."
    hidden = int(source.scalar(p + "embedding_length"))
    heads = int(source.scalar(p + "attention.head_count"))
    config: dict[str, Any] = {
        "model_type": arch,
        "architectures": ["LlamaForCausalLM" if arch == "llama" else "Qwen2ForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": int(source.scalar(p + "block_count")),
        "intermediate_size": int(source.scalar(p + "feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(source.scalar(p + "attention.head_count_kv", heads)),
        "rms_norm_eps": float(source.scalar(p + "attention.layer_norm_rms_epsilon")),
        "rope_theta": float(source.scalar(p + "rope.freq_base", 10000.0)),
        "max_position_embeddings": int(source.scalar(p + "context_length", 2048)),
        "vocab_size": len(source.scalar("tokenizer.ggml.tokens")),
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }
    if arch == "llama":
        config["head_dim"] = int(source.scalar(p + "rope.dimension_count", hidden // heads))
    return config


# -- tensor plan ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    """One output tensor: its name, dtype, shape and where its values come from."""

    name: str
    dtype: str  # safetensors dtype: F32 or U32
    shape: tuple[int, ...]
    source: Any
    part: str = "weight"  # weight | scales | biases (the last two only when re-quantized)
    heads: int | None = None  # un-permute rows per head (llama q/k)
    bits: int | None = None  # re-quantize to this many bits (Metal)

    @property
    def nbytes(self) -> int:
        return 4 * int(np.prod(self.shape))


_GROUP = 32  # MLX affine group size for re-quantized weights


def _mlx_name(source: GGUFSource, gguf_name: str) -> tuple[str, str]:
    """(HF module name, GGUF base kind) for one GGUF tensor name."""
    base, _, suffix = gguf_name.rpartition(".")
    parts = base.split(".")
    if parts[0] == "blk" and len(parts) == 3 and parts[2] in LAYER_NAMES:
        return f"model.layers.{parts[1]}.{LAYER_NAMES[parts[2]]}.{suffix}", parts[2]
    if base in _TOP_NAMES and suffix == "weight":
        return f"{_TOP_NAMES[base]}.{suffix}", base
    raise source.fail(f"unexpected tensor {gguf_name} for this architecture")


def _same_matrix(a: Any, b: Any) -> bool:
    """Whether two tensors are quantized copies of one matrix (checked on sampled rows)."""
    if [int(x) for x in a.shape] != [int(x) for x in b.shape]:
        return False
    rows = int(a.shape[-1])
    for index in np.linspace(0, rows - 1, num=min(rows, 32), dtype=int):
        x = dequantize_rows(a, int(index), int(index) + 1)
        y = dequantize_rows(b, int(index), int(index) + 1)
        scale = float(np.linalg.norm(x)) or 1.0
        if float(np.linalg.norm(x - y)) / scale > _SAME_MATRIX_TOLERANCE:
            return False
    return True


def _embedding_sources(source: GGUFSource, config: dict[str, Any]) -> dict[str, Any]:
    """GGUF tensors to write for the embedding and head; sets ``tie_word_embeddings``."""
    embed = source.tensors.get("token_embd.weight")
    if embed is None:
        raise source.fail("the file has no token_embd.weight tensor")
    head = source.tensors.get("output.weight")
    if head is None:
        return {"token_embd.weight": embed}
    if _same_matrix(embed, head):
        best = max((embed, head), key=bits_per_weight)
        return {"token_embd.weight": best}
    config["tie_word_embeddings"] = False
    return {"token_embd.weight": embed, "output.weight": head}


def _requant_bits(tensor: Any) -> int | None:
    """MLX bit width for re-quantizing a quantized GGUF matrix (None: keep it dense)."""
    if len(tensor.shape) != 2 or not is_quantized(tensor) or int(tensor.shape[0]) % _GROUP:
        return None
    match = re.match(r"I?Q(\d)", tensor.tensor_type.name)
    bits = int(match.group(1)) if match else 8
    return bits if bits in (2, 3, 4, 5, 6, 8) else 8


def _check_decodable(source: GGUFSource, name: str, tensor: Any) -> None:
    """Refuse, before writing anything, a tensor type the ``gguf`` package cannot decode."""
    try:
        dequantize_rows(tensor, 0, 1)
    except (NotImplementedError, ValueError) as exc:
        kind = tensor.tensor_type.name
        raise source.fail(f"tensor {name} ({kind}) cannot be decoded: {exc}") from exc


def plan_tensors(source: GGUFSource, config: dict[str, Any], dense: bool) -> list[Planned]:
    """Every output tensor in file order, with its final name, shape and treatment."""
    chosen = _embedding_sources(source, config)
    heads = {"attn_q": config["num_attention_heads"], "attn_k": config["num_key_value_heads"]}
    plan: list[Planned] = []
    for gguf_name, tensor in source.tensors.items():
        if gguf_name in ("token_embd.weight", "output.weight"):
            if gguf_name not in chosen:
                continue
            tensor = chosen[gguf_name]
        name, kind = _mlx_name(source, gguf_name)
        _check_decodable(source, gguf_name, tensor)
        shape = tuple(int(x) for x in reversed([int(d) for d in tensor.shape]))
        rope = heads.get(kind) if config["model_type"] == "llama" else None
        bits = None if dense else _requant_bits(tensor)
        if bits is None:
            plan.append(Planned(name, "F32", shape, tensor, heads=rope))
            continue
        rows, cols = shape
        module = name.rsplit(".", 1)[0]
        groups = (rows, cols // _GROUP)
        plan += [
            Planned(name, "U32", (rows, cols * bits // 32), tensor, "weight", rope, bits),
            Planned(f"{module}.scales", "F32", groups, tensor, "scales", rope, bits),
            Planned(f"{module}.biases", "F32", groups, tensor, "biases", rope, bits),
        ]
    return plan


def quantization_config(plan: list[Planned]) -> dict[str, Any] | None:
    """mlx_lm's per-layer ``quantization`` entry for a re-quantized plan (None when dense)."""
    layers = {
        p.name.rsplit(".", 1)[0]: {"group_size": _GROUP, "bits": p.bits}
        for p in plan
        if p.bits is not None and p.part == "weight"
    }
    if not layers:
        return None
    return {"group_size": _GROUP, "bits": 4, **layers}


# -- writing --------------------------------------------------------------------------------


def _chunks(item: Planned) -> Iterator[Any]:
    """The planned tensor's values, a bounded number of rows at a time."""
    tensor = item.source
    rows = item.shape[0]
    step = rows if item.heads is not None or len(item.shape) == 1 else _ROWS_PER_CHUNK
    for start in range(0, rows, step):
        values = dequantize_rows(tensor, start, min(rows, start + step))
        if item.heads is not None:
            values = np.ascontiguousarray(unpermute_rows(values, item.heads))
        if item.bits is not None:
            values = _requantize(values, item.bits, item.part)
        yield values


def _requantize(values: Any, bits: int, part: str) -> Any:
    import mlx.core as mx

    packed, scales, biases = mx.quantize(mx.array(values), group_size=_GROUP, bits=bits)
    chosen = {"weight": packed, "scales": scales, "biases": biases}[part]
    dtype = np.uint32 if part == "weight" else np.float32
    return np.asarray(chosen.astype(mx.uint32 if part == "weight" else mx.float32), dtype=dtype)


def write_safetensors(path: Path, plan: list[Planned], progress: Progress | None = None) -> None:
    """Stream ``plan`` into one safetensors file: header from the plan, then chunk by chunk."""
    header: dict[str, Any] = {"__metadata__": {"format": "mlx"}}
    offset = 0
    for item in plan:
        header[item.name] = {
            "dtype": item.dtype,
            "shape": list(item.shape),
            "data_offsets": [offset, offset + item.nbytes],
        }
        offset += item.nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    done = 0
    with path.open("wb") as fh:
        fh.write(len(encoded).to_bytes(8, "little"))
        fh.write(encoded)
        for item in plan:
            written = 0
            for values in _chunks(item):
                fh.write(np.ascontiguousarray(values).data.cast("B"))
                written += values.nbytes
            if written != item.nbytes:
                raise ModelError(f"internal error: {item.name} wrote {written} of {item.nbytes}")
            done += item.nbytes
            if progress:
                progress("writing weights", done / max(offset, 1))


# -- stamp and conversion -----------------------------------------------------------------


def read_stamp(directory: Path) -> dict[str, Any] | None:
    try:
        value = json.loads((directory / STAMP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def weights_file(stamp: dict[str, Any]) -> str:
    """The weights file a directory of this stamp's mode holds: the GGUF as shipped (for
    llama.cpp) or the converted safetensors (for MLX)."""
    return GGUF_FILE if stamp.get("weights") == GGUF_WEIGHTS else "model.safetensors"


def is_current(directory: Path, stamp: dict[str, Any]) -> bool:
    """The directory was written by this converter from the same source in the same mode."""
    found = read_stamp(directory)
    return (
        found is not None
        and all(found.get(k) == v for k, v in stamp.items())
        and all(
            (directory / name).is_file()
            for name in ("config.json", weights_file(stamp), "tokenizer.json")
        )
    )


def refresh_template(directory: Path, stamp: dict[str, Any], chat_template: str) -> bool:
    """Swap in a new chat template when only the template differs from ``stamp``.

    Templates change more often than weights; rewriting ``tokenizer_config.json`` (atomically,
    then the stamp) spares a conversion. Returns whether ``directory`` is now current."""
    weights_only = {k: v for k, v in stamp.items() if k != "template_sha256"}
    if not is_current(directory, weights_only):
        return False
    path = directory / "tokenizer_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    config["chat_template"] = chat_template
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(config, indent=2), encoding="utf-8")
    os.replace(partial, path)
    (directory / STAMP_FILE).write_text(json.dumps(stamp, indent=2), encoding="utf-8")
    return True


def template_sha256(template: str) -> str:
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


def import_stamp(
    source_sha256: str,
    dense: bool,
    chat_template: str,
    extra: dict[str, Any] | None = None,
    *,
    gguf: bool = False,
) -> dict[str, Any]:
    """What a directory must carry to be trusted; ``gguf`` for the llama.cpp layout (the GGUF
    as shipped beside our tokenizer files), else MLX weights, dense or quantized."""
    weights = GGUF_WEIGHTS if gguf else "dense-float32" if dense else "quantized"
    return {
        "converter": CONVERTER_VERSION,
        "source_sha256": source_sha256,
        "weights": weights,
        "template_sha256": template_sha256(chat_template),
        **(extra or {}),
    }


def _tokenizer_files(
    source: GGUFSource, chat_template: str, required_tokens: tuple[str, ...]
) -> tuple[dict[str, Any], Any, dict[str, Any]]:
    """(config.json, tokenizer, tokenizer_config.json) for ``source``: what both layouts
    share, so prompts are rendered and counted the same way whichever engine runs them."""
    config = model_config(source)
    tokenizer = build_tokenizer(source)
    check_tokenizer(tokenizer, source, required_tokens)
    config["eos_token_id"] = stop_ids(source, tokenizer)
    bos = source.meta.get("tokenizer.ggml.bos_token_id")
    if bos is not None:
        config["bos_token_id"] = int(bos)
    special = tokenizer_config(source, chat_template, config["max_position_embeddings"])
    return config, tokenizer, special


def _save_tokenizer_files(
    staging: Path, config: dict[str, Any], tokenizer: Any, special: dict[str, Any]
) -> None:
    tokenizer.save(str(staging / "tokenizer.json"))
    (staging / "tokenizer_config.json").write_text(json.dumps(special, indent=2), "utf-8")
    (staging / "config.json").write_text(json.dumps(config, indent=2), "utf-8")


def _write_directory(
    source: GGUFSource,
    staging: Path,
    *,
    dense: bool,
    chat_template: str,
    required_tokens: tuple[str, ...],
    progress: Progress | None,
) -> None:
    config, tokenizer, special = _tokenizer_files(source, chat_template, required_tokens)
    plan = plan_tensors(source, config, dense)
    quantization = quantization_config(plan)
    if quantization:
        config["quantization"] = quantization
    write_safetensors(staging / "model.safetensors", plan, progress)
    _save_tokenizer_files(staging, config, tokenizer, special)


def convert_gguf(
    gguf: Path,
    out_dir: Path,
    *,
    dense: bool,
    chat_template: str,
    required_tokens: tuple[str, ...] = (),
    source_sha256: str | None = None,
    extra_stamp: dict[str, Any] | None = None,
    log: Callable[[str], None] | None = None,
    progress: Progress | None = None,
) -> Path:
    """Write an MLX directory for ``gguf`` at ``out_dir``; a no-op if its stamp matches.

    ``required_tokens`` are tokens the chat template relies on (each must be one vocabulary
    entry). Dense conversion needs only numpy; re-quantizing for Metal imports MLX (after
    preloading BLAS)."""
    stamp = import_stamp(source_sha256 or sha256_file(gguf), dense, chat_template, extra_stamp)
    if is_current(out_dir, stamp) or refresh_template(out_dir, stamp, chat_template):
        return out_dir
    say = log or (lambda _m: None)
    say(f"converting {gguf.name} → {out_dir} ({stamp['weights']})")
    if progress:
        progress("reading GGUF", 0.0)
    source = read_gguf(gguf)
    if not dense:
        from picocontext.models.blas import preload_openblas

        preload_openblas()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".import-{out_dir.name}-", dir=out_dir.parent))
    try:
        _write_directory(
            source,
            staging,
            dense=dense,
            chat_template=chat_template,
            required_tokens=required_tokens,
            progress=progress,
        )
        staging.chmod(0o755)  # mkdtemp made it private; a model cache is ordinary data
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(staging, out_dir)
        # Stamped last: a directory interrupted before this line is never trusted.
        (out_dir / STAMP_FILE).write_text(json.dumps(stamp, indent=2), encoding="utf-8")
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    say(f"converted {gguf.name}")
    return out_dir


def install_gguf(
    gguf: Path,
    out_dir: Path,
    *,
    chat_template: str,
    required_tokens: tuple[str, ...] = (),
    source_sha256: str | None = None,
    extra_stamp: dict[str, Any] | None = None,
    move: bool = False,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Write the llama.cpp layout for ``gguf`` at ``out_dir``: the file itself (moved when
    ``move``, else copied; never converted) plus the tokenizer files our chat format renders
    and counts with. A no-op if its stamp matches; staged, renamed into place, stamped last,
    so an interrupted install is never trusted."""
    stamp = import_stamp(
        source_sha256 or sha256_file(gguf), False, chat_template, extra_stamp, gguf=True
    )
    if is_current(out_dir, stamp) or refresh_template(out_dir, stamp, chat_template):
        return out_dir
    source = read_gguf(gguf)
    config, tokenizer, special = _tokenizer_files(source, chat_template, required_tokens)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".install-{out_dir.name}-", dir=out_dir.parent))
    try:
        _save_tokenizer_files(staging, config, tokenizer, special)
        if move:
            os.replace(gguf, staging / GGUF_FILE)
        else:
            shutil.copyfile(gguf, staging / GGUF_FILE)
        staging.chmod(0o755)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(staging, out_dir)
        (out_dir / STAMP_FILE).write_text(json.dumps(stamp, indent=2), encoding="utf-8")
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    (log or (lambda _m: None))(f"installed {gguf.name} for llama.cpp at {out_dir}")
    return out_dir
