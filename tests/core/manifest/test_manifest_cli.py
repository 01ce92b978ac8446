"""The pcx CLI: validate, schema, show, eval, and the subcommand plug-in registry."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import types
from typing import Any

from picocontext.manifest import cli


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_validate_ok_and_invalid(capsys: Any, b: Any, tmp_path: Any) -> None:
    good = b.homelab_dir / "homelab.pcx.2k.json"
    rc, out, _ = run(capsys, "validate", str(good), "--schema")
    assert rc == 0 and out.startswith("OK:")
    d = b.tree_doc()
    d["root"]["children"] = ["a", "b", "a"]
    d["nodes"]["a"]["meta"] = 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    rc, _, err = run(capsys, "validate", str(bad))
    assert rc == 1 and "meta" in err and len(err.splitlines()) == 1  # one problem, one line
    assert err.startswith(f"pcx validate: error: {bad} is not a valid manifest: ")
    rc, _, err = run(capsys, "validate", str(bad), "--schema")
    assert rc == 1 and "schema: nodes/a" in err
    d["nodes"]["a"].pop("meta")
    bad.write_text(json.dumps(d))
    rc, out, _ = run(capsys, "validate", str(bad), "--json")
    data = json.loads(out)
    assert rc == 1 and not data["ok"] and "duplicate child ref 'a'" in data["errors"][0]
    rc, _, err = run(capsys, "validate", str(tmp_path / "none.json"))
    assert rc == 2 and "cannot read" in err and err.startswith("pcx validate: error: ")


def test_validate_hostile_depth_limit_flag(capsys: Any, tmp_path: Any) -> None:
    nodes: dict[str, dict[str, Any]] = {
        f"n{i}": {"what": "x", "when": "y", "children": [f"n{i + 1}"]} for i in range(60)
    }
    nodes["n60"] = {"what": "x", "when": "y", "payload": {"ref": "node://n60"}}
    d = {
        "pcx_version": "0.2",
        "source": {"id": "s", "kind": "k"},
        "variant": {"budget": 9},
        "root": {"what": "r", "when": "r", "children": ["n0"]},
        "nodes": nodes,
    }
    p = tmp_path / "deep.json"
    p.write_text(json.dumps(d))
    assert run(capsys, "validate", str(p))[0] == 1
    assert run(capsys, "validate", str(p), "--max-depth", "100")[0] == 0


def test_schema_check(capsys: Any, b: Any, tmp_path: Any) -> None:
    shipped = b.resources / "schemas" / "pcx-0.2.schema.json"
    assert run(capsys, "schema", "--check", str(shipped))[0] == 0
    stale = tmp_path / "s.json"
    stale.write_text("{}")
    assert run(capsys, "schema", "--check", str(stale))[0] == 1
    rc, out, _ = run(capsys, "schema")
    assert rc == 0 and json.loads(out) == json.loads(shipped.read_text())


def test_show_and_eval(capsys: Any, b: Any) -> None:
    m = str(b.homelab_dir / "homelab.pcx.2k.json")
    rc, out, _ = run(capsys, "show", m, "--open", "network")
    assert rc == 0 and "network.dns [leaf]" in out and "-- spent" in out
    rc, out, _ = run(
        capsys,
        "eval",
        m,
        str(b.homelab_dir / "cases.json"),
        "--json",
        "--leaves",
        str(b.homelab_dir / "leaves"),
    )
    data = json.loads(out)
    assert rc == 0 and data["n"] == 10 and 0 < data["navigation_success"] <= 1
    assert data["oracle_success"] == 1.0 and "flat_list_success" in data
    rc, out, _ = run(capsys, "eval", m, str(b.homelab_dir / "cases.json"), "-v")
    assert "[ok  ]" in out and "route:" in out
    rc, _, err = run(capsys, "eval", m, str(b.homelab_dir / "cases.json"), "--min-success", "1.01")
    assert rc == 3 and "gate" in err


def test_eval_unknown_target_and_small_budget(capsys: Any, b: Any, tmp_path: Any) -> None:
    m = str(b.homelab_dir / "homelab.pcx.2k.json")
    cases = tmp_path / "c.json"
    cases.write_text(json.dumps([{"query": "q", "target": "ghost"}]))
    rc, _, err = run(capsys, "eval", m, str(cases))
    assert rc == 2 and "'ghost'" in err
    rc, _, err = run(capsys, "eval", m, str(b.homelab_dir / "cases.json"), "--budget", "10")
    assert rc == 2 and "below the baseline" in err
    rc, _, err = run(capsys, "eval", m, str(cases), "--navigator", "llm")
    assert rc == 2 and "--model" in err


def _hello_register(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser("hello", help="say hello")
    p.add_argument("who")
    p.set_defaults(func=lambda args: print(f"hello {args.who}") or 4)
    return p


def _with_builtins(monkeypatch: Any, **extra: str) -> None:
    monkeypatch.setattr(cli, "BUILTIN_PCX_COMMANDS", {**cli.BUILTIN_PCX_COMMANDS, **extra})


def test_plugin_modules_add_subcommands(capsys: Any, monkeypatch: Any) -> None:
    mod = types.ModuleType("pcx_test_plugin")
    mod.register = _hello_register  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pcx_test_plugin", mod)
    _with_builtins(
        monkeypatch,
        hello="pcx_test_plugin:register",
        gone="pcx_not_installed_anywhere:register",
    )
    commands = cli.pcx_commands()
    assert {"validate", "eval", "show", "schema", "build", "hello"} <= set(commands)
    assert "gone" not in commands and capsys.readouterr().err == ""
    rc = cli.main(["hello", "world"])
    assert rc == 4 and capsys.readouterr().out == "hello world\n"


def test_broken_plugin_is_reported_not_fatal(monkeypatch: Any, capsys: Any) -> None:
    real = importlib.import_module

    def fake(name: str) -> Any:
        if name == "pcx_broken_plugin":
            raise ModuleNotFoundError("No module named 'missing_dep'", name="missing_dep")
        if name == "pcx_crashing_plugin":
            raise ValueError("bad plugin")
        return real(name)

    monkeypatch.setattr(importlib, "import_module", fake)
    _with_builtins(
        monkeypatch,
        broken="pcx_broken_plugin:register",
        crashing="pcx_crashing_plugin:register",
    )
    commands = cli.pcx_commands()
    assert "validate" in commands and not {"broken", "crashing"} & set(commands)
    err = capsys.readouterr().err
    assert "pcx_broken_plugin:register failed to import" in err and "bad plugin" in err


def test_the_pcx_tree_is_the_picocontext_pcx_command(capsys: Any, tmp_path: Any) -> None:
    from picocontext import cli as top

    rc = top.main(["pcx", "validate", str(tmp_path / "none.json")])
    assert rc == 2 and "cannot read" in capsys.readouterr().err
    assert top.main(["pcx", "schema"]) == 0 and '"$schema"' in capsys.readouterr().out
