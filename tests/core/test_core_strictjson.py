"""Strict JSON: what the standard parser would guess about is refused, by name."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picocontext.strictjson import DuplicateKey, strict_loads

_SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
_JSON = st.recursive(
    _SCALARS | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)


@given(_JSON)
def test_valid_json_reads_as_the_standard_parser_reads_it(value: Any) -> None:
    text = json.dumps(value)
    assert strict_loads(text) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "key"),
    [('{"a": 1, "a": 2}', "a"), ('[{"x": {"k": 1, "j": 2, "k": 3}}]', "k")],
)
def test_a_repeated_key_is_refused_at_any_depth_naming_the_key(text: str, key: str) -> None:
    with pytest.raises(DuplicateKey, match=f"duplicate key '{key}'") as raised:
        strict_loads(text)
    assert raised.value.key == key


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_the_non_json_constants_are_refused(constant: str) -> None:
    with pytest.raises(ValueError, match=f"{constant} is not JSON"):
        strict_loads(f'{{"v": {constant}}}')
