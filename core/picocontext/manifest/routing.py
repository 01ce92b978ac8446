"""Subtree routing: the document navigators by name, each built on one that scores a branch
by everything below it (:class:`~picocontext.manifest.subtree.SubtreeNavigator`, BM25 over
every descriptor, never a payload), and :func:`make_navigator`, which builds one by name. The
table imports every navigator it names, the embedding-ranked one included, and none of them
imports it, so each dependency runs one way.

The navigators, each named so the eval shows the gain of each idea:

* ``subtree`` -- best-first over the frontier by subtree score;
* ``subtree-backout`` -- the same, and it closes an open branch whose subtree cannot beat
  the next choice before opening anything else (``close`` reclaims its budget, so a wrong
  turn costs one hop, not a resident reveal);
* ``subtree-lateral`` -- backs out too, and reaches the best leaf sideways when the format
  lets it: a visible node's see-also link to it (``related``), else one ``search`` that
  discloses the top hits (charged like any line), before walking down the tree;
* ``subtree-scan`` -- a wider search, and a page read that was not it rules out its document.

Everything a navigator shows the model goes through the session verbs and is charged there;
the index itself is the runtime's local data, like the built-in search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from picocontext.manifest.embedrank import EmbedNavigator
from picocontext.manifest.navigator import KeywordNavigator, Navigator
from picocontext.manifest.subtree import SCAN_K as SCAN_K
from picocontext.manifest.subtree import SubtreeNavigator as SubtreeNavigator

NAVIGATORS: dict[str, Callable[[], Navigator]] = {
    "keyword": KeywordNavigator,
    "subtree": SubtreeNavigator,
    "subtree-backout": lambda: SubtreeNavigator(backout=True),
    "subtree-lateral": lambda: SubtreeNavigator(lateral=True),
    "subtree-scan": lambda: SubtreeNavigator(scan=True),
}


MODEL_NAVIGATORS = ("subtree-expand", "subtree-embed")


def make_navigator(
    name: str,
    *,
    expander: Callable[[str], str] | None = None,
    embedder: Callable[[Sequence[str]], npt.NDArray[np.floating]] | None = None,
) -> Navigator:
    """A navigator by name: the model-free ones (``keyword``, ``subtree``,
    ``subtree-backout``, ``subtree-lateral``, ``subtree-scan``), ``subtree-expand``, which
    needs an ``expander`` (a :class:`picocontext.manifest.expand.QueryExpander` over a local
    model), or ``subtree-embed``, which needs an ``embedder`` (texts -> one row per text, e.g.
    a :class:`picocontext.manifest.embedrank.CachedEmbedder` over a model's hidden states)."""
    if name == "subtree-expand":
        if expander is None:
            raise ValueError("the subtree-expand navigator needs an expander (a local model)")
        return SubtreeNavigator(expander=expander)
    if name == "subtree-embed":
        if embedder is None:
            raise ValueError("the subtree-embed navigator needs an embedder (a local model)")
        return EmbedNavigator(embedder)
    try:
        return NAVIGATORS[name]()
    except KeyError:
        known = ", ".join(sorted([*NAVIGATORS, *MODEL_NAVIGATORS]))
        raise ValueError(f"unknown navigator {name!r}; use one of {known}") from None
