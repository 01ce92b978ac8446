"""Emergent clusters: SemHash prefix buckets above a noise floor, with optional probing.

A cluster id is a pure function of (prefix, bits), so it survives membership drift. Only
*primary* members count toward the floor; probes join clusters that already exist.
"""

from __future__ import annotations

from collections.abc import Sequence

from picocontext.distill.errors import ConfigError
from picocontext.distill.ids import cluster_id
from picocontext.distill.semhash import cluster_prefix, probe_neighbours


class SimHashClusterer:
    def __init__(self, bits: int = 12, noise_floor: int = 2, probe_radius: int = 0) -> None:
        if not 1 <= bits <= 64:
            raise ConfigError(f"cluster_bits must be in 1..64, got {bits}.")
        if noise_floor < 1:
            raise ConfigError(f"noise_floor must be >= 1, got {noise_floor}.")
        if probe_radius < 0:
            raise ConfigError(f"probe_radius must be >= 0, got {probe_radius}.")
        self.bits = bits
        self.noise_floor = noise_floor
        self.probe_radius = probe_radius

    def cluster(self, items: Sequence[tuple[str, int]]) -> dict[str, tuple[str, ...]]:
        """cluster id -> sorted member ids, for buckets with >= noise_floor primary members."""
        buckets: dict[int, list[str]] = {}
        prefix_of: dict[str, int] = {}
        for node_id, sem in items:
            prefix = cluster_prefix(sem, self.bits)
            prefix_of[node_id] = prefix
            buckets.setdefault(prefix, []).append(node_id)
        live = {p: set(m) for p, m in buckets.items() if len(m) >= self.noise_floor}
        if self.probe_radius > 0:
            for node_id, prefix in prefix_of.items():
                for neighbour in probe_neighbours(prefix, self.bits, self.probe_radius):
                    if neighbour in live:
                        live[neighbour].add(node_id)
        return {
            cluster_id(p, self.bits): tuple(sorted(members))
            for p, members in sorted(live.items(), key=lambda kv: cluster_id(kv[0], self.bits))
        }


def noise_floor_met(primary_members: int, floor: int) -> bool:
    return primary_members >= floor
