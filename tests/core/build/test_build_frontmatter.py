"""Frontmatter: the YAML subset real files use, and SourceError (never another exception) for
anything else."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picocontext.build.errors import SourceError
from picocontext.build.frontmatter import as_list, flat_meta, split_frontmatter


def test_scalars_lists_and_one_nested_mapping() -> None:
    text = (
        "---\nname: Prune\ndescription: \"Cut: the shoots\"\nkeywords: [a, 'b c']\n"
        "tags:\n  - x\n  - y\nmetadata:\n  type: task\n  namespace: ops\n---\nBody\n"
    )
    front, body = split_frontmatter(text)
    assert front["name"] == "Prune"
    assert front["description"] == "Cut: the shoots"
    assert front["keywords"] == ["a", "b c"]
    assert front["tags"] == ["x", "y"]
    assert front["metadata"] == {"type": "task", "namespace": "ops"}
    assert body == "Body\n"
    assert flat_meta(front)["metadata.type"] == "task"
    assert as_list("a, b") == ["a", "b"]


def test_no_frontmatter_returns_the_text() -> None:
    assert split_frontmatter("# Title\n---\n") == ({}, "# Title\n---\n")


@pytest.mark.parametrize(
    "bad",
    [
        "---\nname: x\n",
        "---\n  indented: first\n---\n",
        "---\njust words\n---\n",
        "---\nk: |\n---\n",
    ],
)
def test_malformed_frontmatter_names_the_file(bad: str) -> None:
    with pytest.raises(SourceError, match=r"where\.md"):
        split_frontmatter(bad, "where.md")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab:- []'\"\n#|>\t")), max_size=80))
def test_parser_never_raises_anything_but_source_error(block: str) -> None:
    try:
        front, _ = split_frontmatter(f"---\n{block}\n---\nbody", "f.md")
    except SourceError:
        return
    assert isinstance(front, dict)
