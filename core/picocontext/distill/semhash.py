"""SemHash: a 64-bit SimHash of a summary embedding, and the bit operations on it.

Planes come from NumPy's PCG64 generator (``standard_normal`` cast to float32), seeded; this is
our documented generator, so our SemHashes are deliberately *not* bit-compatible with the Go
reference (whose ``math/rand`` stream is not worth re-implementing). Bit i (value ``1 << i``)
is set iff ``dot(embedding, plane_i) >= 0`` in float64; a NaN dot gives 0. A zero vector
therefore hashes to all ones (``ffffffffffffffff``), exactly like the reference code.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from picocontext.distill.errors import InvalidHash
from picocontext.distill.ids import hex16

BITS = 64
MASK = (1 << 64) - 1
RESOLVE_HAMMING_THRESHOLD = 8


@functools.lru_cache(maxsize=16)
def _planes_cached(seed: int, dims: int) -> npt.NDArray[np.float64]:
    rng = np.random.Generator(np.random.PCG64(seed))
    planes32 = rng.standard_normal((BITS, dims)).astype(np.float32)
    out = planes32.astype(np.float64)
    out.setflags(write=False)
    return out


def planes(seed: int, dims: int) -> npt.NDArray[np.float64]:
    """The 64 hyperplanes (float32 values held as float64), row i = plane i. Read-only."""
    if dims <= 0:
        raise InvalidHash(f"SemHash planes need dims > 0, got {dims}.")
    return _planes_cached(seed, dims)


def _bits_from_dots(dots: npt.NDArray[np.float64]) -> npt.NDArray[np.uint64]:
    """Rows of 64 dot products -> uint64 hashes (NaN compares False, so it gives 0)."""
    set_bits = (dots >= 0).astype(np.uint64)
    weights = np.left_shift(np.uint64(1), np.arange(BITS, dtype=np.uint64))
    out: npt.NDArray[np.uint64] = (set_bits * weights).sum(axis=-1, dtype=np.uint64)
    return out


def sem_hash(embedding: Sequence[float] | npt.NDArray[np.floating], seed: int = 1) -> int:
    """SimHash of one embedding against the planes of (seed, len(embedding))."""
    vec = np.asarray(embedding, dtype=np.float32).astype(np.float64).reshape(-1)
    if vec.size == 0:
        return MASK
    dots = planes(seed, vec.size) @ vec
    return int(_bits_from_dots(dots))


def sem_hashes(matrix: npt.NDArray[np.floating], seed: int = 1) -> list[int]:
    """SimHashes of many embeddings (rows) in one matrix product."""
    mat = np.asarray(matrix, dtype=np.float32).astype(np.float64)
    if mat.ndim != 2 or mat.shape[0] == 0:
        return []
    with np.errstate(invalid="ignore"):
        dots = mat @ planes(seed, mat.shape[1]).T
    return [int(h) for h in _bits_from_dots(dots)]


def format_sem_hash(value: int) -> str:
    return hex16(value)


def parse_sem_hash(text: str) -> int:
    """Exactly 16 hex characters (8 bytes); anything else is an error."""
    if len(text) != 16:
        raise InvalidHash(f"A SemHash is 16 hex characters; got {len(text)} in {text!r}.")
    try:
        return int(text, 16)
    except ValueError:
        raise InvalidHash(f"{text!r} is not hexadecimal.") from None


def parse_sem_hash_or_zero(text: str) -> int:
    """Empty or invalid stored SemHashes read as 0 wherever they are used for bucketing."""
    try:
        return parse_sem_hash(text)
    except InvalidHash:
        return 0


def hamming(a: int, b: int) -> int:
    return ((a ^ b) & MASK).bit_count()


def hamming_close(a: int, b: int, k: int) -> bool:
    return hamming(a, b) <= k


def cluster_prefix(value: int, bits: int) -> int:
    """The top ``bits`` bits of ``value`` with the rest zeroed."""
    if bits <= 0:
        return 0
    if bits >= 64:
        return value & MASK
    return ((value & MASK) >> (64 - bits)) << (64 - bits)


def probe_neighbours(prefix: int, bits: int, radius: int) -> list[int]:
    """Every prefix at Hamming distance 1..radius over the top ``bits`` bits, MSB-first."""
    if radius <= 0 or bits <= 0:
        return []
    bits = min(bits, 64)
    radius = min(radius, bits)
    positions = [63 - i for i in range(bits)]
    out: list[int] = []
    for k in range(1, radius + 1):
        for combo in itertools.combinations(positions, k):
            flipped = prefix
            for pos in combo:
                flipped ^= 1 << pos
            out.append(flipped)
    return out
