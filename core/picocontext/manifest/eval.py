"""Navigation-success @ budget, with two references the peer lacks.

For each (query -> target) case a navigator walks a fresh :class:`NavSession`. Besides the
peer's metrics (success, first-hop precision, average hops, first-view tokens, tokens to answer,
full-load tokens) the report carries:

* **oracle** -- the share of targets an always-correct navigator reaches within the budget
  (opening exactly the target's ancestors, then the target). It separates "the navigator chose
  badly" from "the manifest cannot be navigated at this budget".
* **flat list** -- the same navigator given one flat list of every leaf instead of the tree. If
  the flat list does as well for fewer tokens, the hierarchy is not earning its keep.

A case is reached when the navigator opens its target or a node below it: a long document
the build cut into pages (or a page into sections) is a branch, and reading one of its parts
reads the target -- the oracle only reveals the parts' lines. A case whose target is not in
the manifest is an error (fix B11), never a silent miss. A case that cannot be evaluated --
the navigator's model refused to render a node (a descriptor with ``<|im_end|>`` in it), a
leaf's content is missing -- is confined to itself: it is a miss whose ``error`` says why
(naming the shown nodes that hold a reserved chat token), the other cases are still
evaluated, and ``EvalReport.errors`` counts them so a caller can say some failed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from picocontext.errors import Cancelled, PicoContextError
from picocontext.manifest.errors import (
    DisclosureRefused,
    EvalError,
    ManifestError,
)
from picocontext.manifest.model import Manifest
from picocontext.manifest.navigator import NavAction, Navigator
from picocontext.manifest.runtime import FrontierEntry, LeafResolver, ViewLevel, render_line
from picocontext.manifest.session import DEFAULT_PROTOCOL, ModeConfig, NavSession
from picocontext.manifest.tokens import HeuristicCounter, TextCounter
from picocontext.manifest.validate import reserved_tokens
from picocontext.strictjson import unique_keys


class NavCase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    query: str = Field(min_length=1)
    target: str = Field(min_length=1)
    note: str | None = None
    facet: dict[str, str] | None = None


class CaseResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    query: str
    target: str
    success: bool
    path: tuple[str, ...]
    # steps that open nothing: looked-at ids, "related:<id>" / "filter:k=v" lateral steps,
    # "close:<id>" back-outs and "search"
    looks: tuple[str, ...] = ()
    first_hop_correct: bool
    hops: int
    tokens_to_answer: int | None
    shown_tokens: int
    budget_exhausted: bool
    stop_reason: str
    oracle_success: bool
    oracle_tokens: int | None
    flat_success: bool
    # the case could not be evaluated (a navigator or resolver error): it counts as a miss
    error: str | None = None
    # the flat-list reference could not be asked (its navigator call failed)
    flat_error: str | None = None


class EvalReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    navigator: str
    budget: int
    reserve: int
    view_level: str
    n: int
    navigation_success: float
    first_hop_precision: float
    avg_hops: float
    budget_exhausted: int
    first_view_tokens: int
    avg_tokens_to_answer: float
    avg_shown_tokens: float
    full_load_tokens: int
    oracle_success: float
    avg_oracle_tokens: float
    flat_list_success: float
    flat_list_tokens: int
    tokenizer: str
    cases: tuple[CaseResult, ...]
    # cases that could not be evaluated (each names why in ``CaseResult.error``)
    errors: int = 0

    @property
    def disclosure_ratio(self) -> float:
        if not self.avg_tokens_to_answer:
            return 0.0
        return self.full_load_tokens / self.avg_tokens_to_answer

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        data["disclosure_ratio"] = round(self.disclosure_ratio, 3)
        return data

    def summary(self, verbose: bool = False) -> str:
        lines = [
            f"navigator                   : {self.navigator} (budget {self.budget}, "
            f"reserve {self.reserve}, view {self.view_level}, {self.tokenizer})",
            f"navigation_success @ budget : {self.navigation_success:.0%} ({self.n} cases)",
            f"first_hop_precision         : {self.first_hop_precision:.0%}",
            f"avg_hops (successes)        : {self.avg_hops:.2f}",
            f"first_view_tokens           : {self.first_view_tokens}",
            f"avg_tokens_to_answer        : {self.avg_tokens_to_answer:.0f} (vs "
            f"{self.full_load_tokens} to load all: {self.disclosure_ratio:.1f}x less)",
            f"avg_shown_tokens            : {self.avg_shown_tokens:.0f}",
            f"budget_exhausted            : {self.budget_exhausted}",
            f"oracle_success              : {self.oracle_success:.0%} "
            f"(avg {self.avg_oracle_tokens:.0f} tokens)",
            f"flat_list_success           : {self.flat_list_success:.0%} "
            f"(flat index {self.flat_list_tokens} tokens)",
        ]
        if self.errors:
            lines.append(f"errors                      : {self.errors} case(s) not evaluated")
        for c in self.cases:
            if verbose or c.error:
                mark = "[ERR ]" if c.error else "[ok  ]" if c.success else "[MISS]"
                route = " > ".join(c.path) or "-"
                lines.append(f"{mark} {c.query!r} -> {c.target}  route: {route}  ({c.stop_reason})")
        return "\n".join(lines)

    @property
    def failed_items(self) -> int:
        """Cases not evaluated plus flat-list references not asked."""
        return self.errors + sum(1 for c in self.cases if c.flat_error and not c.error)


MAX_CASES_BYTES = 16 * 1024 * 1024


def load_cases(path: Path | str) -> list[NavCase]:
    from picocontext.files import InputFileError, read_text_bounded

    try:
        raw = json.loads(read_text_bounded(path, MAX_CASES_BYTES), object_pairs_hook=unique_keys)
    except InputFileError as exc:
        raise EvalError(f"Cannot read cases: {exc.message}") from None
    except RecursionError:
        raise EvalError(f"{path}: JSON nested too deeply to be a cases file") from None
    except ValueError as exc:
        raise EvalError(f"Cannot read cases from {path}: {exc}") from None
    if not isinstance(raw, list):
        raise EvalError(f"{path}: cases must be a JSON array of {{query, target}} objects")
    cases = []
    for number, case in enumerate(raw, 1):
        try:
            cases.append(NavCase.model_validate(case))
        except ValidationError as exc:
            first = exc.errors(include_url=False, include_input=False)[0]
            field = ".".join(str(part) for part in first["loc"])
            if not isinstance(case, dict):
                problem = "is not an object"
            elif first["type"] == "missing":
                problem = f"has no {field!r}"
            else:
                problem = f"has a bad {field!r} ({first['msg'].lower()})"
            raise EvalError(
                f"{path}: case {number} {problem} — each case is an object "
                '{"query": ..., "target": NODE_ID[, "note", "facet"]}'
            ) from exc
    return cases


class CaseFailed(EvalError):
    """One case could not be evaluated; the others still are."""


def _on_screen(manifest: Manifest, entries: Sequence[FrontierEntry]) -> str:
    """The nodes shown to the navigator that hold a reserved chat token, named."""
    bad = []
    for entry in entries:
        hits = reserved_tokens(entry.node_id, manifest.get(entry.node_id))
        if hits:
            bad.append(f"{entry.node_id!r} ({', '.join(hits)})")
    if not bad:
        return ""
    return "; shown nodes with a reserved chat token: " + ", ".join(bad[:5])


def _decide(
    navigator: Navigator,
    manifest: Manifest,
    query: str,
    entries: Sequence[FrontierEntry],
    budget_remaining: int,
) -> NavAction:
    """The navigator's next step; its failure becomes :class:`CaseFailed` naming the nodes
    on screen that a chat template would refuse."""
    try:
        return navigator.decide(query, entries, budget_remaining)
    except Cancelled:
        raise
    except PicoContextError as exc:
        raise CaseFailed(f"navigator: {exc.message}{_on_screen(manifest, entries)}") from None


def check_targets(manifest: Manifest, cases: Sequence[NavCase]) -> None:
    unknown = sorted({c.target for c in cases if c.target not in manifest.nodes})
    if unknown:
        raise EvalError(
            f"{len(unknown)} case target(s) are not nodes of the manifest: "
            + ", ".join(repr(u) for u in unknown[:10])
        )


def _tier1(manifest: Manifest, node_id: str) -> str:
    chain = manifest.ancestors(node_id)
    return chain[1] if len(chain) > 1 else node_id


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    budget: int | None
    reserve: int
    view_level: ViewLevel
    counter: Any
    resolver: Any
    protocol: str | None
    auto_collapse: bool


def _session(manifest: Manifest, s: _Settings) -> NavSession:
    return NavSession(
        manifest,
        config=ModeConfig(view_level=s.view_level, inline_small_leaves=False),
        budget=s.budget,
        reserve=s.reserve,
        resolver=s.resolver,
        counter=s.counter,
        protocol=s.protocol,
        auto_collapse=s.auto_collapse,
    )


def _oracle(manifest: Manifest, case: NavCase, s: _Settings) -> int | None:
    """Tokens an always-right navigator spends to reach the target (None: it cannot), priced
    by the runtime without a walk, so a deep chain costs O(depth), not O(depth²)."""
    return _session(manifest, s).runtime.path_cost(case.target)


def _flat(manifest: Manifest, navigator: Navigator, case: NavCase, s: _Settings) -> bool:
    """One decision over a flat list of every leaf; fits only if the list plus the leaf do."""
    counter: TextCounter = s.counter or HeuristicCounter()
    session = _session(manifest, s)
    effective = session.runtime.effective_budget
    base = counter.count(session.protocol) + counter.count(session.runtime.root_line)
    entries = []
    total = base
    for nid in manifest.leaf_ids:
        node = manifest.nodes[nid]
        text = render_line(nid, node, s.view_level)
        total += counter.count(text)
        entries.append(
            FrontierEntry(
                node_id=nid,
                title=node.title,
                what=node.what,
                when=node.when,
                keywords=tuple(node.keywords or ()),
                depth=1,
                is_leaf=True,
                level=s.view_level,
                text=text,
                expand_cost=node.tokens or 0,
                expanded=False,
                links=tuple(link.to for link in node.links or ()),
                via="@flat",
            )
        )
    if total > effective:
        return False
    action = _decide(navigator, manifest, case.query, entries, effective - total)
    if action.verb != "open" or action.ids[0] != case.target:
        return False
    return total + (manifest.nodes[case.target].tokens or 0) <= effective


def flat_list_tokens(manifest: Manifest, s: _Settings) -> int:
    counter: TextCounter = s.counter or HeuristicCounter()
    session = _session(manifest, s)
    total = counter.count(session.protocol) + counter.count(session.runtime.root_line)
    for nid in manifest.leaf_ids:
        total += counter.count(render_line(nid, manifest.nodes[nid], s.view_level))
    return total


def run_case(
    manifest: Manifest,
    navigator: Navigator,
    case: NavCase,
    *,
    settings: _Settings,
    max_hops: int = 8,
    use_facets: bool = False,
    use_related: bool = False,
) -> CaseResult:
    if case.target not in manifest.nodes:
        raise EvalError(f"Case target {case.target!r} is not a node of the manifest.")
    session = _session(manifest, settings)
    session.index()
    path: list[str] = []
    looks: list[str] = []
    first_hop: bool | None = None
    success = False
    exhausted = False
    tokens_to_answer: int | None = None
    reason = "max hops reached"
    if use_facets and case.facet:
        try:
            session.filter(**case.facet)
        except DisclosureRefused:
            exhausted = True
    steps = 0
    while not exhausted and len(path) < max_hops and steps < 2 * max_hops:
        steps += 1
        entries = session.runtime.peek()
        action = _decide(navigator, manifest, case.query, entries, session.budget_remaining)
        if action.verb == "stop":
            reason = f"stopped: {action.reason}" if action.reason else "stopped"
            break
        try:
            if action.verb == "look":
                session.look(action.ids)
                looks.extend(action.ids)
                continue
            if action.verb == "related":
                session.related(action.ids[0])
                looks.append(f"related:{action.ids[0]}")
                continue
            if action.verb == "filter":
                session.filter(**action.facets)
                looks.append("filter:" + ",".join(f"{k}={v}" for k, v in action.facets.items()))
                continue
            if action.verb == "close":
                session.close(action.ids[0])
                looks.append(f"close:{action.ids[0]}")
                continue
            if action.verb == "search":
                session.search(action.query or case.query, action.k)
                looks.append("search")
                continue
            choice = action.ids[0]
            if first_hop is None:
                first_hop = _tier1(manifest, choice) == _tier1(manifest, case.target)
            session.open(choice)
        except DisclosureRefused as exc:
            exhausted = True
            reason = f"budget: {exc.message}"
            break
        except ManifestError as exc:
            reason = f"refused: {exc.message}"
            break
        path.append(choice)
        if choice == case.target or case.target in manifest.ancestors(choice):
            success = True
            tokens_to_answer = session.spent
            reason = "reached target" if choice == case.target else f"read {choice}, part of it"
            break
    if not success and use_related and not exhausted:
        for nid in path:
            if any(link.to == case.target for link in manifest.get(nid).links or ()):
                try:
                    session.related(nid)
                    session.open(case.target)
                except ManifestError:
                    break
                path.append(case.target)
                success = True
                tokens_to_answer = session.spent
                reason = f"reached target via see-also from {nid}"
                break
    oracle_tokens = _oracle(manifest, case, settings)
    try:
        flat, flat_error = _flat(manifest, navigator, case, settings), None
    except CaseFailed as exc:
        flat, flat_error = False, exc.message
    return CaseResult(
        query=case.query,
        target=case.target,
        success=success,
        path=tuple(path),
        looks=tuple(looks),
        first_hop_correct=bool(first_hop),
        hops=len(path),
        tokens_to_answer=tokens_to_answer,
        shown_tokens=session.shown_tokens,
        budget_exhausted=exhausted,
        stop_reason=reason,
        oracle_success=oracle_tokens is not None,
        oracle_tokens=oracle_tokens,
        flat_success=flat,
        flat_error=flat_error,
    )


def _failed(case: NavCase, exc: PicoContextError) -> CaseResult:
    """A case that could not be evaluated: a miss that says why."""
    return CaseResult(
        query=case.query,
        target=case.target,
        success=False,
        path=(),
        first_hop_correct=False,
        hops=0,
        tokens_to_answer=None,
        shown_tokens=0,
        budget_exhausted=False,
        stop_reason=f"error: {exc.message}",
        oracle_success=False,
        oracle_tokens=None,
        flat_success=False,
        error=exc.message,
    )


def _guarded_case(
    manifest: Manifest, navigator: Navigator, case: NavCase, **kwargs: Any
) -> CaseResult:
    """:func:`run_case`, with an error of the project confined to its case."""
    try:
        return run_case(manifest, navigator, case, **kwargs)
    except Cancelled:
        raise  # the caller stopped the run: not a failure of this case
    except PicoContextError as exc:
        return _failed(case, exc)


def run_eval(
    manifest: Manifest,
    cases: Sequence[NavCase],
    navigator: Navigator,
    *,
    budget: int | None = None,
    reserve: int = 0,
    max_hops: int = 8,
    view_level: ViewLevel = "full",
    counter: TextCounter | None = None,
    resolver: LeafResolver | None = None,
    protocol: str | None = DEFAULT_PROTOCOL,
    auto_collapse: bool = False,
    use_facets: bool = False,
    use_related: bool = False,
) -> EvalReport:
    """Score ``navigator`` on ``cases``. Raises :class:`EvalError` for unknown targets and
    :class:`~picocontext.manifest.errors.BudgetTooSmall` when the budget cannot hold the
    index."""
    if not cases:
        raise EvalError("No cases to evaluate.")
    check_targets(manifest, cases)
    settings = _Settings(
        budget=budget,
        reserve=reserve,
        view_level=view_level,
        counter=counter,
        resolver=resolver,
        protocol=protocol,
        auto_collapse=auto_collapse,
    )
    probe = _session(manifest, settings)
    navigator.prepare(manifest)
    results = [
        _guarded_case(
            manifest,
            navigator,
            c,
            settings=settings,
            max_hops=max_hops,
            use_facets=use_facets,
            use_related=use_related,
        )
        for c in cases
    ]
    n = len(results)
    wins = [r for r in results if r.success]
    oracle = [r for r in results if r.oracle_success]
    return EvalReport(
        navigator=navigator.name,
        budget=probe.runtime.budget,
        reserve=reserve,
        view_level=view_level,
        n=n,
        navigation_success=len(wins) / n,
        first_hop_precision=sum(r.first_hop_correct for r in results) / n,
        avg_hops=sum(r.hops for r in wins) / len(wins) if wins else 0.0,
        budget_exhausted=sum(r.budget_exhausted for r in results),
        first_view_tokens=probe.runtime.baseline_tokens,
        avg_tokens_to_answer=(
            sum(r.tokens_to_answer or 0 for r in wins) / len(wins) if wins else 0.0
        ),
        avg_shown_tokens=sum(r.shown_tokens for r in results) / n,
        full_load_tokens=manifest.computed_full_tokens(),
        oracle_success=len(oracle) / n,
        avg_oracle_tokens=(
            sum(r.oracle_tokens or 0 for r in oracle) / len(oracle) if oracle else 0.0
        ),
        flat_list_success=sum(r.flat_success for r in results) / n,
        flat_list_tokens=flat_list_tokens(manifest, settings),
        tokenizer=probe.runtime.counter.name,
        cases=tuple(results),
        errors=sum(1 for r in results if r.error),
    )
