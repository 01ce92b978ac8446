"""Digest node ids: formats, parsing and classification.

Ids are pure functions of what they name, so they stay stable while content and membership
drift: an L0 id of its source, a scope id of (name, value), a cluster id of (prefix, bits).
"""

from __future__ import annotations

from picocontext.distill.errors import InvalidId

ROOT_ID = "digest:2:tenant"
UNCLUSTERED_ID = "digest:1:unclustered"
L0_PREFIX = "digest:0:"
SCOPE_PREFIX = "digest:1:scope:"
CLUSTER_PREFIX = "digest:1:cluster:"

LEVEL_ENTITY = 0
LEVEL_SCOPE = 1
LEVEL_TENANT = 2

KIND_ENTITY = "entity"
KIND_SCOPE = "scope"
KIND_CLUSTER = "cluster"
KIND_TENANT = "tenant"


def hex16(value: int) -> str:
    """A uint64 as 16 lowercase hex characters (big-endian), the wire form of SemHashes."""
    return f"{value & 0xFFFFFFFFFFFFFFFF:016x}"


def escape(part: str) -> str:
    """'#' marks intermediates, so it is percent-escaped inside names and values."""
    return part.replace("%", "%25").replace("#", "%23")


def unescape(part: str) -> str:
    return part.replace("%23", "#").replace("%25", "%")


def l0_id(source_kind: str, unit_id: str) -> str:
    if not source_kind or not unit_id:
        raise InvalidId("An L0 id needs a non-empty source kind and unit id.")
    if ":" in source_kind or "#" in source_kind:
        raise InvalidId(f"Source kind {source_kind!r} must not contain ':' or '#'.")
    return f"{L0_PREFIX}{source_kind}:{escape(unit_id)}"


def scope_id(name: str, value: str) -> str:
    if not name or not value:
        raise InvalidId("A scope id needs a non-empty scope name and value.")
    if ":" in name or "#" in name:
        raise InvalidId(f"Scope name {name!r} must not contain ':' or '#'.")
    return f"{SCOPE_PREFIX}{name}:{escape(value)}"


def parse_scope_id(node_id: str) -> tuple[str, str]:
    """(name, value); the value may contain ':' because we split on the first one only."""
    if not node_id.startswith(SCOPE_PREFIX) or "#" in node_id:
        raise InvalidId(f"{node_id!r} is not a scope id ({SCOPE_PREFIX}NAME:VALUE).")
    rest = node_id[len(SCOPE_PREFIX) :]
    name, sep, value = rest.partition(":")
    if not sep or not name or not value:
        raise InvalidId(f"{node_id!r} is not a scope id ({SCOPE_PREFIX}NAME:VALUE).")
    return name, unescape(value)


def cluster_id(prefix: int, bits: int) -> str:
    if not 0 <= bits <= 64:
        raise InvalidId(f"Cluster bits must be in 0..64, got {bits}.")
    return f"{CLUSTER_PREFIX}{hex16(prefix)}:{bits}"


def parse_cluster_id(node_id: str) -> tuple[int, int]:
    """(prefix, bits); intermediates (ids with '#') are rejected."""
    if not node_id.startswith(CLUSTER_PREFIX) or "#" in node_id:
        raise InvalidId(f"{node_id!r} is not a cluster id ({CLUSTER_PREFIX}HEX16:BITS).")
    hex_part, sep, bits_part = node_id[len(CLUSTER_PREFIX) :].partition(":")
    try:
        if not sep or len(hex_part) != 16:
            raise ValueError
        prefix = int(hex_part, 16)
        bits = int(bits_part)
    except ValueError:
        raise InvalidId(f"{node_id!r} is not a cluster id ({CLUSTER_PREFIX}HEX16:BITS).") from None
    if not 0 <= bits <= 64:
        raise InvalidId(f"{node_id!r} has cluster bits outside 0..64.")
    return prefix, bits


def intermediate_id(parent_id: str, sub_prefix: int) -> str:
    return f"{parent_id}#{hex16(sub_prefix)}"


def is_intermediate(node_id: str) -> bool:
    return "#" in node_id


def is_scope_id(node_id: str) -> bool:
    return node_id.startswith(SCOPE_PREFIX) and "#" not in node_id
