"""SemHash, prefixes, probes and the clusterer (P15, P16, P24; checklist 15–21)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from picocontext.distill import InvalidHash, SimHashClusterer
from picocontext.distill.clusterer import noise_floor_met
from picocontext.distill.semhash import (
    cluster_prefix,
    format_sem_hash,
    hamming,
    hamming_close,
    parse_sem_hash,
    parse_sem_hash_or_zero,
    planes,
    probe_neighbours,
    sem_hash,
    sem_hashes,
)

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)


def test_planes_are_seeded_standard_normal_float32() -> None:
    a = planes(1, 8)
    assert a.shape == (64, 8)
    assert np.array_equal(a, planes(1, 8))
    assert not np.array_equal(a, planes(2, 8))
    # Values are float32 draws held exactly in float64.
    assert np.array_equal(a, a.astype(np.float32).astype(np.float64))
    expected = np.random.Generator(np.random.PCG64(1)).standard_normal((64, 8))
    assert np.array_equal(a, expected.astype(np.float32).astype(np.float64))


def test_bit_i_is_sign_of_dot_with_plane_i() -> None:
    rng = np.random.default_rng(7)
    vec = rng.standard_normal(16).astype(np.float32)
    h = sem_hash(vec, seed=3)
    dots = planes(3, 16) @ vec.astype(np.float64)
    for i in range(64):
        assert bool(h >> i & 1) == bool(dots[i] >= 0)


def test_close_vectors_are_hamming_closer_than_opposite_ones() -> None:
    base = np.array([0.9, 0.1, 0.3, -0.2, 0.5, 0.05, -0.4, 0.2], dtype=np.float32)
    close = base + np.float32(0.01)
    h0, h1, h2 = (sem_hash(v, seed=42) for v in (base, close, -base))
    assert hamming(h0, h1) < hamming(h0, h2)
    assert hamming_close(h0, h1, 8)
    assert hamming(h0, h2) == 64 - sum(  # an exactly opposite vector flips every nonzero dot
        1 for d in planes(42, 8) @ base.astype(np.float64) if d == 0
    )


def test_zero_and_empty_vectors_hash_to_all_ones() -> None:
    assert sem_hash(np.zeros(8, dtype=np.float32)) == (1 << 64) - 1
    assert sem_hash([]) == (1 << 64) - 1


def test_nan_dot_gives_zero_bits() -> None:
    assert sem_hash([math.nan] * 4) == 0


def test_batch_equals_single() -> None:
    rng = np.random.default_rng(0)
    mat = rng.standard_normal((5, 12)).astype(np.float32)
    assert sem_hashes(mat, 9) == [sem_hash(row, 9) for row in mat]


@given(U64)
def test_hex_round_trips_as_16_lowercase_chars(value: int) -> None:
    text = format_sem_hash(value)
    assert len(text) == 16 and text == text.lower()
    assert text == f"{value:016x}"
    assert parse_sem_hash(text) == value


@pytest.mark.parametrize("bad", ["", "abc", "0" * 15, "0" * 17, "zz" * 8, "0" * 64])
def test_parse_requires_exactly_8_bytes(bad: str) -> None:
    with pytest.raises(InvalidHash):
        parse_sem_hash(bad)
    assert parse_sem_hash_or_zero(bad) == 0


def test_cluster_prefix() -> None:
    assert cluster_prefix(0xF000_0000_0000_0000, 4) == 0xF << 60
    assert cluster_prefix(0xABCD_0000_0000_0001, 12) == 0xABC << 52
    assert cluster_prefix(0x1234, 0) == 0
    assert cluster_prefix(0x1234, 64) == 0x1234


@given(U64, st.integers(min_value=1, max_value=63))
def test_prefix_keeps_top_bits(value: int, bits: int) -> None:
    p = cluster_prefix(value, bits)
    assert p >> (64 - bits) == value >> (64 - bits)
    assert p & ((1 << (64 - bits)) - 1) == 0


def test_probe_neighbours() -> None:
    n = probe_neighbours(0xF << 60, 4, 1)
    assert len(n) == 4 and all(hamming(x, 0xF << 60) == 1 for x in n)
    assert n[0] == 0x7 << 60  # MSB first
    assert probe_neighbours(0, 4, 0) == []
    assert len(probe_neighbours(0, 4, 99)) == 15


def test_noise_floor() -> None:
    assert not noise_floor_met(1, 2)
    assert noise_floor_met(2, 2)


def test_clusterer_floor_and_sorting() -> None:
    c = SimHashClusterer(bits=4, noise_floor=2)
    out = c.cluster([("b", 0xA1 << 56), ("a", 0xA2 << 56), ("z", 0x1 << 60)])
    assert out == {"digest:1:cluster:a000000000000000:4": ("a", "b")}
    out = c.cluster([("x", 0x2 << 60), ("y", 0x2 << 60), ("a", 0x1 << 60), ("b", 0x1 << 60)])
    assert list(out) == sorted(out)


def test_probes_join_existing_clusters_and_never_create() -> None:
    c = SimHashClusterer(bits=4, noise_floor=2, probe_radius=1)
    items = [("a", 0x8 << 60), ("b", 0x8 << 60), ("c", 0x9 << 60), ("d", 0x3 << 60)]
    out = c.cluster(items)
    assert out == {"digest:1:cluster:8000000000000000:4": ("a", "b", "c")}
    # "c" and "d" alone (distance 2 from each other's buckets) create nothing.
    assert c.cluster([("c", 0x9 << 60), ("d", 0x3 << 60)]) == {}


@given(
    st.lists(
        st.tuples(st.text(min_size=1, max_size=4), U64), max_size=30, unique_by=lambda t: t[0]
    ),
    st.integers(min_value=0, max_value=2),
)
def test_every_cluster_meets_the_floor_with_primary_members(
    items: list[tuple[str, int]], radius: int
) -> None:
    c = SimHashClusterer(bits=4, noise_floor=2, probe_radius=radius)
    for cid, members in c.cluster(items).items():
        prefix = int(cid.split(":")[3], 16)
        primary = [m for m, h in items if cluster_prefix(h, 4) == prefix]
        assert len(primary) >= 2
        assert list(members) == sorted(members)


@given(U64, st.integers(min_value=1, max_value=64))
def test_cluster_id_is_a_function_of_prefix_and_bits(value: int, bits: int) -> None:
    c = SimHashClusterer(bits=bits, noise_floor=1)
    first = c.cluster([("a", value)])
    more = c.cluster([("a", value), ("b", value), ("c", value ^ 1)])
    assert set(first) <= set(more) or bits == 64
