"""Reading a GGUF file with llama.cpp's own ``gguf`` package: every field as plain Python,
every tensor memory-mapped, dequantized bit-exactly in row chunks (``mlx.core.load`` refuses
Q5_0 and decodes Q4_K wrongly). :func:`read_gguf_header` reads only the metadata, without the
``gguf`` package, for callers that need the architecture and sizes of a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from picocontext.errors import ModelError


@dataclass(frozen=True)
class GGUFSource:
    """A parsed GGUF file: plain-Python metadata and memory-mapped tensors by name."""

    path: Path
    meta: dict[str, Any]
    tensors: dict[str, Any]

    def fail(self, reason: str) -> ModelError:
        return ModelError(f"{self.path.name}: {reason}")

    def scalar(self, key: str, default: Any = None) -> Any:
        if key in self.meta:
            return self.meta[key]
        if default is None:
            raise self.fail(f"the GGUF metadata lacks {key}")
        return default


def read_gguf(path: Path) -> GGUFSource:
    """Parse ``path`` with the ``gguf`` package; any malformed or truncated file is refused."""
    try:
        from gguf import GGUFReader
    except ImportError as exc:
        raise ModelError("GGUF import needs the gguf package: install picocontext[mlx]") from exc
    with path.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            raise ModelError(f"{path.name} is not a GGUF file (no GGUF magic at its start)")
    try:
        reader = GGUFReader(path, "r")
        meta = {
            name: field.contents()
            for name, field in reader.fields.items()
            if not name.startswith("GGUF.")
        }
    except (ValueError, OSError, IndexError, KeyError, UnicodeDecodeError) as exc:
        raise ModelError(f"{path.name} is not a readable GGUF file ({exc})") from exc
    size = path.stat().st_size
    tensors = {}
    for tensor in reader.tensors:
        if tensor.data_offset + tensor.n_bytes > size:
            raise ModelError(f"{path.name} is truncated: tensor {tensor.name} ends past the file")
        tensors[tensor.name] = tensor
    return GGUFSource(path=path, meta=meta, tensors=tensors)


# GGUF value types (the format's numbering) with their struct codes; 8 is a string, 9 an array.
_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GGUFHeader:
    """What the llama.cpp engine checks before loading: scalar and string metadata (arrays are
    skipped, not decoded) and whether every tensor's data lies inside the file."""

    meta: dict[str, Any]
    tensor_count: int


def read_gguf_header(path: Path) -> GGUFHeader:
    """Scan the header of ``path`` without decoding its arrays (the vocabulary and merges):
    ``gguf.GGUFReader`` builds a numpy view per array element, about ten seconds for a Qwen
    vocabulary on a small CPU, which the engine, reading the file itself, does not need.
    Refuses bad magic, an unknown version or value type, and tensors that end past the file."""
    import mmap
    import struct

    from gguf.constants import GGML_QUANT_SIZES

    size = path.stat().st_size
    with path.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            raise ModelError(f"{path.name} is not a GGUF file (no GGUF magic at its start)")
        if size < 24:
            raise ModelError(f"{path.name} is truncated (no GGUF header)")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            pos = 4

            def take(fmt: str) -> Any:
                nonlocal pos
                width = struct.calcsize("<" + fmt)
                if pos + width > size:
                    raise ModelError(f"{path.name} is truncated inside its header")
                (value,) = struct.unpack_from("<" + fmt, buf, pos)
                pos += width
                return value

            def text() -> str:
                nonlocal pos
                length = take("Q")
                if pos + length > size:
                    raise ModelError(f"{path.name} is truncated inside its header")
                raw = bytes(buf[pos : pos + length])
                pos += length
                return raw.decode("utf-8", errors="replace")

            def value(kind: int) -> Any:
                nonlocal pos
                if kind in _SCALARS:
                    return take(_SCALARS[kind])
                if kind == _STRING:
                    return text()
                if kind == _ARRAY:
                    inner, count = take("I"), take("Q")
                    if inner in _SCALARS:
                        pos += struct.calcsize("<" + _SCALARS[inner]) * count
                    elif inner == _STRING:
                        for _ in range(count):
                            length = take("Q")
                            pos += length
                    else:
                        for _ in range(count):
                            value(inner)
                    return None  # skipped: the engine reads arrays itself
                raise ModelError(f"{path.name} has an unknown GGUF value type {kind}")

            version = take("I")
            if version not in (2, 3):
                raise ModelError(f"{path.name}: GGUF version {version} is not supported")
            tensors, kv_count = take("Q"), take("Q")
            meta: dict[str, Any] = {}
            for _ in range(kv_count):
                key = text()
                got = value(take("I"))
                if got is not None:
                    meta[key] = got
            infos = []
            for _ in range(tensors):
                name = text()
                dims = [take("Q") for _ in range(take("I"))]
                kind, offset = take("I"), take("Q")
                infos.append((name, dims, kind, offset))
            align = int(meta.get("general.alignment", 32))
            start = pos + (-pos % align)
    for name, dims, kind, offset in infos:
        if kind not in GGML_QUANT_SIZES:
            raise ModelError(f"{path.name}: tensor {name} has an unknown type {kind}")
        block, nbytes = GGML_QUANT_SIZES[kind]
        count = 1
        for d in dims:
            count *= d
        if start + offset + count * nbytes // block > size:
            raise ModelError(f"{path.name} is truncated: tensor {name} ends past the file")
    return GGUFHeader(meta=meta, tensor_count=tensors)


def bits_per_weight(tensor: Any) -> float:
    from gguf.constants import GGML_QUANT_SIZES

    block, size = GGML_QUANT_SIZES[tensor.tensor_type]
    return size * 8 / block


def is_quantized(tensor: Any) -> bool:
    return bits_per_weight(tensor) < 16


def dequantize_rows(tensor: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of a 2-D tensor (or the whole 1-D tensor) as float32 (out, in)."""
    from gguf.quants import dequantize

    data = tensor.data if len(tensor.data.shape) == 1 else tensor.data[start:stop]
    return np.ascontiguousarray(dequantize(np.asarray(data), tensor.tensor_type), np.float32)
