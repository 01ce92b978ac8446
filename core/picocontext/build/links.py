"""See-also cross-links and bridge nodes, without an O(N^2) pass (B14).

Candidates come from an inverted index over each leaf's most salient terms; a term shared by
too many leaves is skipped (it links everything to everything, which was most of the peer's
noise). Candidates are scored by TF-IDF cosine and kept only across tier-1 branches. Each link
carries a why-phrase made of the words the two leaves share most strongly.

Betweenness is approximated Brandes style from ``pivots`` evenly spaced sources with a deque
BFS: O(pivots x (V + E)) instead of the peer's exact all-sources pass with a list queue.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

from picocontext.build.ir import SourceNode
from picocontext.build.signals import Signals, cosine

Links = dict[str, list[tuple[str, str]]]


def infer_links(
    root: SourceNode,
    signals: Signals,
    *,
    k: int = 3,
    min_sim: float = 0.3,
    index_terms: int = 12,
    max_posting: int = 50,
    max_candidates: int = 200,
) -> Links:
    groups: dict[str, str] = {}
    for branch in root.children:
        for n in branch.walk():
            groups[n.id] = branch.id
    leaves = [n for n in root.walk() if n.is_leaf and n is not root]
    vecs = [signals.vector(n) for n in leaves]
    postings: dict[str, list[int]] = {}
    tops: list[list[str]] = []
    for i, v in enumerate(vecs):
        top = [t for t, _ in sorted(v.items(), key=lambda kv: (-kv[1], kv[0]))[:index_terms]]
        tops.append(top)
        for t in top:
            postings.setdefault(t, []).append(i)
    cap = max(max_posting, len(leaves) // 100)
    out: Links = {}
    for i, leaf in enumerate(leaves):
        cands: dict[int, int] = {}
        for t in tops[i]:
            post = postings.get(t, ())
            if len(post) > cap:
                continue
            for j in post:
                if j != i and groups.get(leaves[j].id) != groups.get(leaf.id):
                    cands[j] = cands.get(j, 0) + 1
        best = sorted(cands.items(), key=lambda kv: (-kv[1], kv[0]))[:max_candidates]
        scored = []
        for j, _ in best:
            s = cosine(vecs[i], vecs[j])
            if s >= min_sim:
                scored.append((s, leaves[j].id, j))
        scored.sort(key=lambda x: (-x[0], x[1]))
        chosen = []
        for s, nid, j in scored[:k]:
            chosen.append((nid, why_phrase(leaf, leaves[j], signals, s)))
        if chosen:
            out[leaf.id] = chosen
    return out


def why_phrase(a: SourceNode, b: SourceNode, signals: Signals, score: float) -> str:
    va, vb = signals.vector(a), signals.vector(b)
    shared = sorted((t for t in va if t in vb), key=lambda t: (-(va[t] * vb[t]), t))[:3]
    surf = signals.info(a)[1]
    words = [surf.get(t, t) for t in shared]
    if not words:
        return f"similar content ({score:.2f})"
    return f"both cover {', '.join(words)}"


def betweenness(adjacency: Mapping[str, Sequence[str]], pivots: int = 64) -> dict[str, float]:
    """Approximate betweenness (undirected), scaled to the full source count."""
    nodes = sorted(adjacency)
    n = len(nodes)
    if n < 3:
        return dict.fromkeys(nodes, 0.0)
    step = max(1, n // max(pivots, 1))
    sources = nodes[::step][:pivots]
    bc = dict.fromkeys(nodes, 0.0)
    for s in sources:
        sigma = {s: 1.0}
        dist = {s: 0}
        preds: dict[str, list[str]] = {}
        order: list[str] = []
        queue = deque([s])
        while queue:
            v = queue.popleft()
            order.append(v)
            for w in adjacency.get(v, ()):
                if w not in dist:
                    dist[w] = dist[v] + 1
                    queue.append(w)
                if dist[w] == dist[v] + 1:
                    sigma[w] = sigma.get(w, 0.0) + sigma[v]
                    preds.setdefault(w, []).append(v)
        delta = dict.fromkeys(order, 0.0)
        for w in reversed(order):
            for v in preds.get(w, ()):
                delta[v] += sigma[v] / sigma[w] * (1.0 + delta[w])
            if w != s:
                bc[w] += delta[w]
    scale = n / len(sources) / 2.0
    return {k: round(v * scale, 4) for k, v in bc.items()}


def graph_of(root: SourceNode, links: Links) -> dict[str, list[str]]:
    adj: dict[str, list[str]] = {}
    for node in root.walk():
        adj.setdefault(node.id, [])
        for c in node.children:
            adj[node.id].append(c.id)
            adj.setdefault(c.id, []).append(node.id)
    for src, targets in links.items():
        for to, _ in targets:
            if to in adj and src in adj:
                adj[src].append(to)
                adj[to].append(src)
    return adj
