"""GGUF import on tiny generated files of each architecture: weights, tokenizer, refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext import ChatMessage, ModelError
from picocontext.models.chattemplates import QWEN25_TEMPLATE, SMOLLM2_TEMPLATE
from picocontext.models.gguf import (
    STAMP_FILE,
    convert_gguf,
    is_current,
    permute_rows,
    read_stamp,
    unpermute_rows,
)
from picocontext.models.gguf_reader import GGUFSource, read_gguf
from picocontext.models.gguf_tokenizer import build_tokenizer, build_tokenizer_json, check_tokenizer

pytest.importorskip("gguf")

from picocontext.models.tiny import FOREIGN_GGUF_TEMPLATE, TinyGGUF, write_tiny_gguf

pytestmark = pytest.mark.mlx

QWEN_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>")


@settings(max_examples=60, deadline=None)
@given(heads=st.integers(1, 6), half=st.integers(1, 8), cols=st.integers(1, 5))
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


# -- tokenizer ------------------------------------------------------------------------------


def _source_from(tokenizer_json: dict[str, Any], pre: str = "gpt2") -> GGUFSource:
    vocab = tokenizer_json["model"]["vocab"]
    added = {t["content"]: t["id"] for t in tokenizer_json["added_tokens"]}
    size = max([*vocab.values(), *added.values()]) + 1
    tokens = [""] * size
    types = [1] * size
    for text, i in vocab.items():
        tokens[i] = text
    for text, i in added.items():
        tokens[i] = text
        types[i] = 4 if "tool_call" in text else 3
    merges = [" ".join(m) if isinstance(m, list) else m for m in tokenizer_json["model"]["merges"]]
    meta = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.token_type": types,
    }
    return GGUFSource(path=Path("tiny.gguf"), meta=meta, tensors={})


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
    rebuilt = Tokenizer.from_str(build_tokenizer_json(_source_from(original)))
    reference = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    for text in SAMPLES:
        assert rebuilt.encode(text).ids == reference.encode(text).ids
        assert rebuilt.decode(rebuilt.encode(text).ids, skip_special_tokens=False) == text
    assert rebuilt.token_to_id("<|im_end|>") == reference.token_to_id("<|im_end|>")


def test_qwen2_pre_tokenizer_splits_digits_and_marks_special_and_added_tokens(
    tiny_dir: Path,
) -> None:
    original = json.loads((tiny_dir / "tokenizer.json").read_text(encoding="utf-8"))
    source = _source_from(original, pre="qwen2")
    tokenizer = build_tokenizer(source)
    check_tokenizer(tokenizer, source, QWEN_TOKENS)
    pieces = tokenizer.pre_tokenizer.pre_tokenize_str("abc 2024")
    assert [p for p, _ in pieces][-4:] == ["2", "0", "2", "4"]  # one digit per piece
    assert tokenizer.normalizer is not None  # NFC, like Qwen2's own tokenizer
    added = {t.content: t.special for t in tokenizer.get_added_tokens_decoder().values()}
    assert added["<|im_end|>"] is True and added["<|im_start|>"] is True
    assert added["<tool_call>"] is False  # an added token, not a control token
    # Decomposed and composed forms normalize to the same ids.
    assert tokenizer.encode("cafe\u0301").ids == tokenizer.encode("café").ids


def test_unknown_pre_tokenizer_and_vocab_model_are_refused(tiny_dir: Path) -> None:
    original = json.loads((tiny_dir / "tokenizer.json").read_text(encoding="utf-8"))
    source = _source_from(original)
    bad_pre = GGUFSource(source.path, {**source.meta, "tokenizer.ggml.pre": "mystery"}, {})
    with pytest.raises(ModelError, match=r"tiny\.gguf: unsupported GGUF pre-tokenizer"):
        build_tokenizer(bad_pre)
    bad_model = GGUFSource(source.path, {**source.meta, "tokenizer.ggml.model": "llama"}, {})
    with pytest.raises(ModelError, match="byte-level BPE"):
        build_tokenizer(bad_model)


def test_a_tokenizer_that_does_not_round_trip_is_refused(tiny_dir: Path) -> None:
    original = json.loads((tiny_dir / "tokenizer.json").read_text(encoding="utf-8"))
    source = _source_from(original)
    # Without the byte symbol "!" (and the merges that use it) "!" cannot be encoded at all.
    tokens = list(source.meta["tokenizer.ggml.tokens"])
    tokens[tokens.index("!")] = "unused-symbol"
    merges = [m for m in source.meta["tokenizer.ggml.merges"] if "!" not in m]
    meta = {**source.meta, "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": merges}
    broken = GGUFSource(source.path, meta, {})
    with pytest.raises(ModelError, match=r"tiny\.gguf: the rebuilt tokenizer does not round-trip"):
        check_tokenizer(build_tokenizer(broken), broken)
    merges = [*source.meta["tokenizer.ggml.merges"], "nowhere tobe"]
    unfit = GGUFSource(source.path, {**source.meta, "tokenizer.ggml.merges": merges}, {})
    with pytest.raises(ModelError, match=r"tiny\.gguf: the GGUF vocabulary and merges do not fit"):
        build_tokenizer(unfit)


def test_a_template_token_missing_from_the_vocabulary_is_refused(tiny_dir: Path) -> None:
    original = json.loads((tiny_dir / "tokenizer.json").read_text(encoding="utf-8"))
    source = _source_from(original)
    with pytest.raises(ModelError, match=r"needs '<\|fim_pad\|>', which is not in the vocab"):
        check_tokenizer(build_tokenizer(source), source, ("<|fim_pad|>",))


# -- whole files ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TinyGGUF]:
    folder = tmp_path_factory.mktemp("gguf")
    return {
        "qwen2": write_tiny_gguf(folder / "qwen2.gguf", arch="qwen2"),
        "llama": write_tiny_gguf(folder / "llama.gguf", arch="llama", embeddings="single"),
        "untied": write_tiny_gguf(folder / "untied.gguf", arch="qwen2", embeddings="untied"),
    }


@pytest.fixture(scope="module")
def converted(
    ggufs: dict[str, TinyGGUF], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("converted")
    return {
        name: convert_gguf(
            tiny.path,
            folder / name,
            dense=True,
            chat_template=SMOLLM2_TEMPLATE if name == "llama" else QWEN25_TEMPLATE,
            required_tokens=QWEN_TOKENS,
        )
        for name, tiny in ggufs.items()
    }


@pytest.mark.parametrize("name", ["qwen2", "llama", "untied"])
def test_weights_round_trip_exactly(
    name: str, ggufs: dict[str, TinyGGUF], converted: dict[str, Path]
) -> None:
    from safetensors.numpy import load_file

    weights = load_file(str(converted[name] / "model.safetensors"))
    expected = ggufs[name].expected
    assert set(weights) == set(expected)
    for key, value in expected.items():
        assert weights[key].dtype == np.float32
        assert np.array_equal(weights[key], value), key


def test_qwen2_keeps_biases_and_the_more_precise_tied_copy(
    ggufs: dict[str, TinyGGUF], converted: dict[str, Path]
) -> None:
    from safetensors.numpy import load_file

    weights = load_file(str(converted["qwen2"] / "model.safetensors"))
    assert "model.layers.0.self_attn.q_proj.bias" in weights
    assert "model.layers.1.self_attn.v_proj.bias" in weights
    assert "model.layers.0.self_attn.o_proj.bias" not in weights
    assert "lm_head.weight" not in weights
    config = json.loads((converted["qwen2"] / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["tie_word_embeddings"] is True
    untied = json.loads((converted["untied"] / "config.json").read_text())
    assert untied["tie_word_embeddings"] is False


def test_llama_has_no_biases_and_its_rows_are_unpermuted(
    ggufs: dict[str, TinyGGUF], converted: dict[str, Path]
) -> None:
    from safetensors.numpy import load_file

    weights = load_file(str(converted["llama"] / "model.safetensors"))
    assert not any(k.endswith(".bias") for k in weights)
    config = json.loads((converted["llama"] / "config.json").read_text())
    assert config["model_type"] == "llama" and config["head_dim"] == 16
    # The file stores permuted rows; the converted matrix differs from what was stored.
    stored = read_gguf(ggufs["llama"].path).tensors["blk.0.attn_q.weight"]
    from gguf.quants import dequantize

    raw = dequantize(np.asarray(stored.data), stored.tensor_type)
    assert not np.array_equal(raw, weights["model.layers.0.self_attn.q_proj.weight"])
    assert np.array_equal(permute_rows(weights["model.layers.0.self_attn.q_proj.weight"], 4), raw)


def test_tokenizer_files_use_our_template_never_the_files(converted: dict[str, Path]) -> None:
    directory = converted["qwen2"]
    config = json.loads((directory / "tokenizer_config.json").read_text())
    assert config["chat_template"] == QWEN25_TEMPLATE
    assert FOREIGN_GGUF_TEMPLATE not in (directory / "tokenizer_config.json").read_text()
    assert config["eos_token"] == "<|im_end|>" and config["pad_token"] == "<|endoftext|>"
    assert config["bos_token"] == "<|endoftext|>" and config["add_bos_token"] is False
    model_config = json.loads((directory / "config.json").read_text())
    eos = model_config["eos_token_id"]
    assert isinstance(eos, list) and len(eos) == 2  # <|im_end|> first, then <|endoftext|>


@pytest.mark.parametrize("name", ["qwen2", "llama"])
def test_mlx_lm_loads_and_runs_the_converted_directory(
    name: str, converted: dict[str, Path]
) -> None:
    pytest.importorskip("mlx_lm")
    from picocontext.models.mlx_backend import MLXModel

    with MLXModel.load(converted[name], model_id=f"tiny-{name}") as model:
        for text in SAMPLES[:4]:
            ids = model.tokenizer.encode(text, add_special_tokens=False)
            assert model.tokenizer.decode(ids) == text
        response = model.chat([ChatMessage(role="user", content="hello")], 5)
        assert response.generated_tokens >= 1


def test_stamp_is_written_last_and_rerunning_is_a_no_op(
    ggufs: dict[str, TinyGGUF], converted: dict[str, Path]
) -> None:
    directory = converted["qwen2"]
    stamp = read_stamp(directory)
    assert stamp is not None and stamp["weights"] == "dense-float32"
    assert is_current(directory, stamp)
    before = (directory / STAMP_FILE).stat().st_mtime_ns
    convert_gguf(ggufs["qwen2"].path, directory, dense=True, chat_template=QWEN25_TEMPLATE)
    assert (directory / STAMP_FILE).stat().st_mtime_ns == before
    # A new template is swapped in without converting the weights again.
    weights = (directory / "model.safetensors").stat().st_mtime_ns
    convert_gguf(ggufs["qwen2"].path, directory, dense=True, chat_template=SMOLLM2_TEMPLATE)
    assert json.loads((directory / "tokenizer_config.json").read_text())["chat_template"] == (
        SMOLLM2_TEMPLATE
    )
    assert (directory / "model.safetensors").stat().st_mtime_ns == weights
    restamped = read_stamp(directory)
    assert restamped is not None and restamped["template_sha256"] != stamp["template_sha256"]
    convert_gguf(ggufs["qwen2"].path, directory, dense=True, chat_template=QWEN25_TEMPLATE)
    assert read_stamp(directory) == stamp


def test_chunked_writing_gives_the_same_file(
    ggufs: dict[str, TinyGGUF],
    converted: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from picocontext.models import gguf

    monkeypatch.setattr(gguf, "_ROWS_PER_CHUNK", 7)  # many partial chunks per matrix
    out = convert_gguf(
        ggufs["qwen2"].path, tmp_path / "chunked", dense=True, chat_template=QWEN25_TEMPLATE
    )
    reference = (converted["qwen2"] / "model.safetensors").read_bytes()
    assert (out / "model.safetensors").read_bytes() == reference


def test_requantized_weights_for_metal_load_and_run(
    ggufs: dict[str, TinyGGUF], tmp_path: Path
) -> None:
    pytest.importorskip("mlx_lm")
    from picocontext.models.mlx_backend import MLXModel

    out = convert_gguf(
        ggufs["qwen2"].path, tmp_path / "q", dense=False, chat_template=QWEN25_TEMPLATE
    )
    config = json.loads((out / "config.json").read_text())
    layers = config["quantization"]
    assert layers["model.layers.0.self_attn.q_proj"]["bits"] == 8  # from Q8_0
    assert layers["model.layers.0.self_attn.k_proj"]["bits"] == 4  # from Q4_0
    assert layers["model.layers.0.self_attn.v_proj"]["bits"] == 5  # from Q5_0
    assert "model.layers.0.self_attn.o_proj" not in layers  # F16 stays dense
    with MLXModel.load(out, model_id="tiny-q") as model:
        assert model.chat([ChatMessage(role="user", content="hi")], 3).generated_tokens >= 1


def test_dense_conversion_never_imports_mlx(ggufs: dict[str, TinyGGUF], tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from picocontext.models.gguf import convert_gguf\n"
        f"convert_gguf(Path({str(ggufs['llama'].path)!r}), Path({str(tmp_path / 'o')!r}), "
        "dense=True, chat_template='x')\n"
        "assert 'mlx.core' not in sys.modules and 'mlx' not in sys.modules\n"
        "from picocontext.models.blas import preload_openblas, blas_status\n"
        "preload_openblas()\n"
        "assert 'imported before' not in blas_status(), blas_status()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- refusals -------------------------------------------------------------------------------


def test_unsupported_architecture_is_refused_naming_the_file(tmp_path: Path) -> None:
    tiny = write_tiny_gguf(tmp_path / "gemma.gguf", arch="gemma3", embeddings="single")
    with pytest.raises(ModelError, match=r"gemma\.gguf: architecture 'gemma3' is not supported"):
        convert_gguf(tiny.path, tmp_path / "out", dense=True, chat_template="x")
    assert not (tmp_path / "out").exists()
    assert not any(p.name.startswith(".import-") for p in tmp_path.iterdir())


def test_out_of_vocabulary_special_token_is_refused(tmp_path: Path) -> None:
    tiny = write_tiny_gguf(tmp_path / "eos.gguf", eos_id=10**6)
    with pytest.raises(ModelError, match=r"eos\.gguf: tokenizer\.ggml\.eos_token_id = 1000000"):
        convert_gguf(tiny.path, tmp_path / "out", dense=True, chat_template="x")
    assert not (tmp_path / "out").exists()


def test_truncated_and_foreign_files_are_refused(
    ggufs: dict[str, TinyGGUF], tmp_path: Path
) -> None:
    data = ggufs["qwen2"].path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 4096])
    with pytest.raises(ModelError, match=r"cut\.gguf (is truncated|is not a readable GGUF)"):
        convert_gguf(cut, tmp_path / "out", dense=True, chat_template="x")
    header_only = tmp_path / "header.gguf"
    header_only.write_bytes(data[:64])
    with pytest.raises(ModelError, match=r"header\.gguf"):
        read_gguf(header_only)
    foreign = tmp_path / "zip.gguf"
    foreign.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(ModelError, match=r"zip\.gguf is not a GGUF file"):
        read_gguf(foreign)
    assert not (tmp_path / "out").exists()


def test_a_tensor_type_that_cannot_be_decoded_is_refused_before_writing() -> None:
    from types import SimpleNamespace

    from gguf import GGMLQuantizationType

    from picocontext.models.gguf import _check_decodable

    source = GGUFSource(path=Path("odd.gguf"), meta={}, tensors={})
    tensor = SimpleNamespace(data=np.zeros((2, 4), np.int32), tensor_type=GGMLQuantizationType.I32)
    with pytest.raises(ModelError, match=r"odd\.gguf: tensor blk\.0\.x \(I32\) cannot be decoded"):
        _check_decodable(source, "blk.0.x", tensor)
