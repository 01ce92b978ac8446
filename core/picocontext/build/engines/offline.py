"""The offline engine: deterministic descriptors with real signal, no model (fix B13).

* leaf ``what`` -- the title plus the first real sentence of the hint or content (headings,
  code blocks and signatures skipped);
* branch ``what`` -- the title plus the names of what is inside (child titles), so a reader
  sees the subtree's members, not "Docs under X/";
* ``when`` and ``keywords`` -- the node's salient words by TF-IDF over the corpus (never a
  hex identifier's fragment); ``contrast``
  re-ranks them by how rare they are among the siblings, so each line says what separates the
  node from its neighbours rather than what they share.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from picocontext.build.engines.base import Grade
from picocontext.build.ir import SourceNode
from picocontext.build.quality import Descriptor, make_descriptor, terms
from picocontext.build.signals import Signals, Vector

VERSION = "offline-tfidf/1"

_FENCED = re.compile(r"^(```|~~~).*?^\1\s*$", re.MULTILINE | re.DOTALL)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(])")
_SIGNATURE = re.compile(r"^\s*(def |class |async def |[\w.]+\(.*\)\s*(->.*)?$)")
_MD_NOISE = re.compile(r"[*_`>#|]|\[([^\]]*)\]\([^)]*\)")
# A fragment of a hex identifier ("d45630", "b9d"): rare, so TF-IDF ranks it first, but no
# reader routes by it, and it costs several tokens per word in every line it appears in.
_HEX_FRAGMENT = re.compile(r"(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{3,}")


def first_sentence(text: str, limit: int = 200) -> str:
    """The first sentence of the first prose paragraph (>= 3 words)."""
    body = _FENCED.sub(" ", text)
    for para in re.split(r"\n\s*\n", body):
        lines = [
            ln
            for ln in para.strip().splitlines()
            if ln.strip()
            and not ln.lstrip().startswith(("#", "|", "---", "===", ":", "..", "<"))
            and not _SIGNATURE.match(ln)
        ]
        if not lines:
            continue
        prose = _MD_NOISE.sub(lambda m: m.group(1) or " ", " ".join(ln.strip() for ln in lines))
        prose = re.sub(r"^[-+*]\s+|^\d+[.)]\s+", "", " ".join(prose.split()))
        if len(prose.split()) < 3:
            continue
        sentence = _SENTENCE_END.split(prose, maxsplit=1)[0]
        return sentence[:limit]
    return ""


_PART = re.compile(r"\((part \d+ of \d+)\)$")


def _strip_common_prefix(names: list[str]) -> list[str]:
    """``["shutil.copy", "shutil.move"]`` -> ``["copy", "move"]`` (dotted/slashed prefixes);
    the pages of one document, ``["Intro: setup (part 1 of 3)", ...]``, -> ``["part 1 of 3",
    ...]``; a decimal point (``Qwen2.5``) is never a cut: the branch line names its children,
    so a remainder like ``5-Coder models (part 1 of 5)`` would repeat the title in pieces."""
    if len(names) < 2:
        return names
    parts = [_PART.search(n) for n in names]
    if all(parts) and len({n[: m.start()] for n, m in zip(names, parts, strict=True) if m}) == 1:
        return [m.group(1) for m in parts if m]
    prefix = names[0]
    for n in names[1:]:
        while prefix and not n.startswith(prefix):
            prefix = prefix[:-1]
    cuts = [i for i, ch in enumerate(prefix) if ch in "./:" and not _in_number(names[0], i)]
    cut = max(cuts, default=-1)
    if cut <= 0:
        return names
    return [n[cut + 1 :] or n for n in names]


def _in_number(text: str, i: int) -> bool:
    """Whether the dot at ``i`` is a decimal point (``Qwen2.5``, ``v1.2``), not a separator."""
    return 0 < i < len(text) - 1 and text[i - 1].isdigit() and text[i + 1].isdigit()


def _interleave(first: list[str], second: list[str]) -> list[str]:
    """a1, b1, a2, b2, ... without repeats: the subtree's strongest words alternate with
    words that stand for individual children."""
    out: list[str] = []
    seen: set[str] = set()
    for i in range(max(len(first), len(second))):
        for seq in (first, second):
            if i < len(seq) and seq[i] not in seen:
                seen.add(seq[i])
                out.append(seq[i])
    return out


def _ranked(vec: Vector, exclude: set[str]) -> list[str]:
    return [t for t, _ in sorted(vec.items(), key=lambda kv: (-kv[1], kv[0])) if t not in exclude]


class OfflineEngine:
    """TF-IDF descriptors. ``n_terms`` bounds the words in ``when``."""

    name = "offline"

    def __init__(self, n_terms: int = 6, n_keywords: int = 6) -> None:
        self.n_terms = n_terms
        self.n_keywords = n_keywords
        self._signals: Signals | None = None

    def bind(self, signals: Signals) -> None:
        self._signals = signals

    @property
    def signals(self) -> Signals:
        if self._signals is None:
            raise RuntimeError("OfflineEngine.bind(signals) must be called first")
        return self._signals

    @property
    def signature(self) -> str:
        return (
            f"{VERSION};terms={self.n_terms},{self.n_keywords};idf={self.signals.idf.fingerprint}"
        )

    # ------------------------------------------------------------------ helpers
    def _words(self, node: SourceNode, ranked: list[str], n: int) -> list[str]:
        surf = self.signals.info(node)[1]
        out: list[str] = []
        for t in ranked:
            w = surf.get(t, t)
            if _HEX_FRAGMENT.fullmatch(w.lower()):
                continue
            if w not in out:
                out.append(w)
            if len(out) == n:
                break
        return out

    def _lines(
        self,
        node: SourceNode,
        what: str,
        ranked: list[str],
        feedback: str | None,
        extra: int = 0,
    ) -> Descriptor:
        n = self.n_terms + extra + (3 if feedback else 0)
        shown = set(terms(what))
        fresh = [t for t in ranked if t not in shown]
        when_words = self._words(node, fresh or ranked, n)
        author_when = node.meta.get("when", "")
        if author_when:
            when = author_when
        elif when_words:
            when = "Needed for " + ", ".join(when_words)
        else:
            when = f"Needed for {node.title}"
        used = set(terms(when)) | shown
        kw = [
            *node.keywords,
            *self._words(node, [t for t in ranked if t not in used], self.n_keywords),
        ]
        return make_descriptor(what, when, kw, node.title)

    # ------------------------------------------------------------------ protocol
    def describe_leaf(self, node: SourceNode, feedback: str | None = None) -> Descriptor:
        sentence = first_sentence(node.hint) or first_sentence(node.content)
        if sentence and not sentence.lower().startswith(node.title.lower()):
            what = f"{node.title}: {sentence}"
        else:
            what = sentence or node.title
        exclude = set(terms(node.title))
        ranked = _ranked(self.signals.vector(node), exclude)
        return self._lines(node, what, ranked, feedback)

    def describe_branch(
        self,
        node: SourceNode,
        children: Sequence[tuple[SourceNode, Descriptor]],
        feedback: str | None = None,
    ) -> Descriptor:
        lead = first_sentence(node.hint) or self._overview(node, children)
        head = f"{node.title}: {lead} " if lead else f"{node.title}: "
        names = _strip_common_prefix([c.title for c, _ in children])
        listed: list[str] = []
        room = 150 - len(head)
        for name in names:
            if sum(len(x) + 2 for x in listed) + len(name) > room:
                break
            listed.append(name)
        rest = len(names) - len(listed)
        what = head + ", ".join(listed) + (f" (+{rest} more)" if rest else "")
        exclude = set(terms(node.title))
        ranked = _interleave(_ranked(self.signals.vector(node), exclude), self._coverage(node))
        leaves = sum(1 for _ in node.leaves())
        return self._lines(node, what, ranked, feedback, extra=min(12, 2 * leaves.bit_length()))

    def _coverage(self, node: SourceNode) -> list[str]:
        """One characteristic word per child (its strongest term that is not in its title),
        so every member of the subtree is represented in the branch's line."""
        own = set(terms(node.title))
        out: list[str] = []
        for child in node.children:
            skip = own | set(terms(child.title)) | set(out)
            vec = self.signals.vector(child)
            best = next((t for t in _ranked(vec, skip)), None)
            if best is not None:
                out.append(best)
        weight = self.signals.vector(node)
        return sorted(out, key=lambda t: (-weight.get(t, 0.0), t))

    @staticmethod
    def _overview(node: SourceNode, children: Sequence[tuple[SourceNode, Descriptor]]) -> str:
        """The lead sentence of the branch's own overview page (``index``, ``README``, a
        page titled like the branch), when it has one."""
        want = node.title.strip().lower()
        for child, _ in children:
            stem = child.id.rstrip("/").rsplit("/", 1)[-1].rsplit(".", 1)[-1].lower()
            if child.is_leaf and (
                child.title.strip().lower() == want
                or stem in ("index", "readme", "overview", "module", "intro")
            ):
                return first_sentence(child.hint) or first_sentence(child.content)
        return ""

    def contrast(
        self, parent: SourceNode, members: Sequence[tuple[SourceNode, Descriptor]]
    ) -> list[Descriptor]:
        """Re-rank each member's words by rarity among the siblings (a within-group IDF)."""
        vecs = [self.signals.vector(n) for n, _ in members]
        g = len(vecs)
        df: Counter[str] = Counter()
        for v in vecs:
            df.update(v.keys())
        out = []
        for (node, desc), vec in zip(members, vecs, strict=True):
            scored = {t: w * math.log((g + 1) / df[t]) for t, w in vec.items()}
            exclude = set(terms(node.title))
            ranked = _ranked(scored, exclude)
            if not node.is_leaf:
                cover = [t for t in self._coverage(node) if g == 1 or df.get(t, 0) < g]
                ranked = _interleave(ranked, cover)
            extra = 0 if node.is_leaf else min(12, 2 * sum(1 for _ in node.leaves()).bit_length())
            fresh = self._lines(node, desc.what, ranked, None, extra=extra)
            out.append(fresh)
        return out

    def grade(
        self, node: SourceNode, desc: Descriptor, siblings: Sequence[Descriptor]
    ) -> Grade | None:
        return None

    def fidelity(self, node: SourceNode, desc: Descriptor) -> float | None:
        return None
