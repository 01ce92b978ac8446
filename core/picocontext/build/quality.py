"""Descriptor quality measures shared by the engines, the pipeline and the gates.

* :func:`clean_line` -- one line, at most 160 characters, cut on a word boundary, never empty:
  the schema's limits hold by construction (B2, B16);
* :func:`similarity` -- Jaccard over the stemmed content words of what + when + keywords (a
  lexical measure so the build needs no model);
* :func:`vacuity_flags` -- descriptors that read fine but cannot be searched;
* :func:`lexical_fidelity` -- how much of a descriptor the content actually supports.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from picocontext.manifest.model import DESCRIPTOR_MAX_CHARS
from picocontext.manifest.text import terms as _terms

_WS = re.compile(r"\s+")
VAGUE = frozenset(
    [
        "various",
        "general",
        "generic",
        "miscellaneous",
        "misc",
        "stuff",
        "things",
        "everything",
        "anything",
        "several",
        "related",
        "etc",
    ]
)


@lru_cache(maxsize=65536)
def _cached_terms(text: str) -> tuple[str, ...]:
    return tuple(_terms(text))


def terms(text: str) -> list[str]:
    """The navigator's stemmed content words, memoized (the pipeline re-reads lines often)."""
    return list(_cached_terms(text))


class Descriptor(BaseModel):
    """The navigation lines of one node."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    what: str = Field(min_length=1, max_length=DESCRIPTOR_MAX_CHARS)
    when: str = Field(min_length=1, max_length=DESCRIPTOR_MAX_CHARS)
    keywords: tuple[str, ...] = ()


def clean_line(text: str, limit: int = DESCRIPTOR_MAX_CHARS, fallback: str = "-") -> str:
    """Collapse whitespace (newlines included) and cut at a word boundary within ``limit``."""
    s = _WS.sub(" ", text).strip()
    if not s:
        s = _WS.sub(" ", fallback).strip() or "-"
    if len(s) <= limit:
        return s
    cut = s[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:-") + "…"


def make_descriptor(what: str, when: str, keywords: Sequence[str], title: str) -> Descriptor:
    kws: list[str] = []
    for k in keywords:
        k2 = clean_line(k, 40)
        if k2 and k2 != "-" and k2.lower() not in (x.lower() for x in kws):
            kws.append(k2)
    return Descriptor(
        what=clean_line(what, fallback=title),
        when=clean_line(when, fallback=f"For {title}"),
        keywords=tuple(kws[:8]),
    )


def descriptor_terms(d: Descriptor) -> set[str]:
    return set(terms(" ".join([d.what, d.when, *d.keywords])))


def similarity(a: Descriptor, b: Descriptor) -> float:
    ta, tb = descriptor_terms(a), descriptor_terms(b)
    if not ta and not tb:
        return 1.0
    return len(ta & tb) / len(ta | tb)


def worst_pair(descs: Sequence[Descriptor]) -> tuple[float, int, int]:
    """(similarity, i, j) of the most similar pair; (0, -1, -1) for fewer than two."""
    best = (0.0, -1, -1)
    bags = [descriptor_terms(d) for d in descs]
    for i in range(len(bags)):
        for j in range(i + 1, len(bags)):
            union = bags[i] | bags[j]
            s = len(bags[i] & bags[j]) / len(union) if union else 1.0
            if s > best[0]:
                best = (s, i, j)
    return best


def vacuity_flags(title: str, d: Descriptor) -> list[str]:
    """Reasons a descriptor cannot be navigated on, empty when it is fine."""
    flags: list[str] = []
    what_t = set(terms(d.what))
    title_t = set(terms(title))
    if title_t and title_t <= what_t and len(what_t - title_t) <= 1:
        flags.append("what only restates the title")
    when_t = terms(d.when)
    if len(set(when_t)) < 2:
        flags.append("when has fewer than two content words")
    lowered = {w.lower() for w in re.findall(r"[A-Za-z]+", d.when)}
    if lowered & VAGUE and len(set(when_t) - VAGUE) < 2:
        flags.append("when is non-specific")
    return flags


def lexical_fidelity(d: Descriptor, content: str) -> float:
    """1..5: 1 + 4 x the share of descriptor words that occur in the content."""
    dt = descriptor_terms(d)
    if not dt:
        return 1.0
    ct = set(terms(content))
    return 1.0 + 4.0 * len(dt & ct) / len(dt)
