"""The policy registry: built-ins through the entry-point group, a third-party policy from
outside the package, and the errors for unknown, duplicate and broken registrations."""

from __future__ import annotations

import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from picocontext import ContextSession, ModelResponse, RunBudget, RunMode
from picocontext.models import ByteCounter, ScriptedBackend
from picocontext.policies import (
    ENTRY_POINT_GROUP,
    AppendOnlyPolicy,
    CompactionPolicy,
    ContextPolicy,
    DistilledPolicy,
    EditablePolicy,
    NavigatedPolicy,
    NoConfig,
    PolicyContext,
    PolicyError,
    PolicyRegistry,
    PolicySpec,
    RetrievalPolicy,
    SlidingWindowPolicy,
    UnknownPolicy,
    load_registry,
    policy_registry,
)
from picocontext.policies.registry import BUILTIN_ENTRY_POINT
from picocontext.records import Record, Role, Scope, Snapshot

ROOT = Path(__file__).resolve().parents[3]
BUILTINS = (
    "append-only",
    "editable",
    "summarize",
    "navigated",
    "distilled",
    "sliding-window",
    "compaction",
    "retrieval",
)
SNAPSHOT = Snapshot(
    scope=Scope(user_id="u", conversation_id="c", branch_id="b"),
    records=(Record(id="ask", role=Role.USER, protected=True, body="Say hello."),),
)


def test_builtins_register_in_order_and_make_fresh_objects() -> None:
    registry = policy_registry()
    assert registry.names() == BUILTINS
    backend = ScriptedBackend([])
    kinds = [
        AppendOnlyPolicy,
        EditablePolicy,
        EditablePolicy,
        NavigatedPolicy,
        DistilledPolicy,
        SlidingWindowPolicy,
        CompactionPolicy,
        RetrievalPolicy,
    ]
    for name, kind in zip(BUILTINS, kinds, strict=True):
        made = registry.create(name, backend)
        assert isinstance(made, kind) and isinstance(made, ContextPolicy)
        assert made.name == name and registry.create(name, backend) is not made
        made.close()
    assert registry.get("navigated").mode is RunMode.NAVIGATED


def test_the_builtin_entry_point_is_declared_in_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    points = project["project"]["entry-points"][ENTRY_POINT_GROUP]
    assert points == {"builtin": BUILTIN_ENTRY_POINT}


def test_without_installed_metadata_the_builtins_still_load() -> None:
    assert load_registry("picocontext.no-such-group").names() == BUILTINS


def test_unknown_names_and_bad_configs_say_what_exists() -> None:
    registry = policy_registry()
    with pytest.raises(UnknownPolicy, match="Unknown policy 'sliding'; known policies: append"):
        registry.get("sliding")
    with pytest.raises(PolicyError, match=r"Invalid config for policy 'navigated' \(tail_share"):
        registry.create("navigated", ScriptedBackend([]), {"tail_share": 2})
    with pytest.raises(PolicyError, match=r"'editable'.*EditableConfig takes decision"):
        registry.create("editable", ScriptedBackend([]), {"style": "summarize"})
    with pytest.raises(PolicyError, match=r"'summarize'.*NoConfig takes nothing"):
        registry.create("summarize", ScriptedBackend([]), {"style": "targeted"})
    spec = registry.get("navigated")
    made = spec.create(ScriptedBackend([]), {"max_steps": 3}, "nav-3")
    assert isinstance(made, NavigatedPolicy)
    assert made.name == "nav-3" and made.config.max_steps == 3


def test_a_name_registered_twice_is_refused() -> None:
    spec = policy_registry().get("append-only")
    with pytest.raises(PolicyError, match="registered twice"):
        PolicyRegistry([spec, spec])


_THIRD_PARTY = textwrap.dedent(
    """
    from pydantic import BaseModel, ConfigDict

    from picocontext import RunMode
    from picocontext.policies import AppendOnlyPolicy, PolicySpec


    class ShoutConfig(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")
        suffix: str = "!"


    def make(config, context):
        return AppendOnlyPolicy(name=context.name + config.suffix)


    SPEC = PolicySpec(
        name="shout", config=ShoutConfig, factory=make, mode=RunMode.APPEND_ONLY,
        description="append-only, labelled loudly",
    )
    BROKEN = "not a spec"
    """
)


def _install(tmp_path: Path, entry_points: str) -> None:
    """A distribution outside this repository: a module plus its dist-info on sys.path."""
    (tmp_path / "shout_policy.py").write_text(_THIRD_PARTY, encoding="utf-8")
    info = tmp_path / "shout_policy-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: shout-policy\nVersion: 1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n{entry_points}\n", encoding="utf-8"
    )


def test_a_third_party_policy_registers_through_the_entry_point_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install(tmp_path, "shout = shout_policy:SPEC")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "shout_policy", raising=False)
    registry = load_registry()
    assert registry.names() == (*BUILTINS, "shout")
    assert registry.get("shout").description == "append-only, labelled loudly"
    policy = registry.create("shout", ScriptedBackend([]), {"suffix": "?!"})
    session = ContextSession(
        SNAPSHOT, ByteCounter(), ScriptedBackend([ModelResponse(text="hello", generated_tokens=5)])
    )
    report = policy.turn(session, RunBudget())
    assert report.failure is None and report.answer == "hello"
    assert report.policy == "shout?!" and report.mode is RunMode.APPEND_ONLY
    policy.close()


def test_a_broken_entry_point_is_an_error_not_a_silent_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install(tmp_path, "shout = shout_policy:BROKEN\nmissing = no_such_module:SPEC")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "shout_policy", raising=False)
    with pytest.raises(PolicyError, match="missing = no_such_module:SPEC failed to load"):
        load_registry()


def test_a_spec_must_be_a_policy_spec() -> None:
    class Config(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")

    def make(config: Config, context: PolicyContext) -> AppendOnlyPolicy:
        return AppendOnlyPolicy(context.name)

    registry = PolicyRegistry([PolicySpec("quiet", Config, make, RunMode.APPEND_ONLY)])
    assert registry.names() == ("quiet",) and "quiet" in registry
    assert registry.get("quiet").parse_config(None) == Config()
    assert NoConfig() == NoConfig.model_validate({})
    with pytest.raises(PolicyError, match="is not a PolicySpec"):
        registry.register("quiet")  # type: ignore[arg-type]
