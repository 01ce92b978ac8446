"""`pcx eval --navigator` offers every navigator the library has; the default is the best one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picocontext.manifest import cli
from picocontext.manifest.routing import MODEL_NAVIGATORS, NAVIGATORS

ROOT = Path(__file__).resolve().parents[3]
HOMELAB = ROOT / "resources" / "manifests" / "homelab"


def test_every_library_navigator_is_a_choice_and_subtree_scan_is_the_default() -> None:
    choices = {*cli.MODEL_FREE_NAVIGATORS, *cli.MODEL_NAVIGATOR_NAMES}
    assert choices == {*NAVIGATORS, *MODEL_NAVIGATORS, "llm"}
    assert cli.DEFAULT_NAVIGATOR == "subtree-scan"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_default_navigator_is_what_pcx_eval_runs(capsys: pytest.CaptureFixture[str]) -> None:
    manifest = str(HOMELAB / "homelab.pcx.2k.json")
    cases = str(HOMELAB / "cases.json")
    code, out, _ = run(capsys, "eval", manifest, cases, "--json")
    assert code == 0
    default = json.loads(out)
    code, out, _ = run(capsys, "eval", manifest, cases, "--json", "--navigator", "keyword")
    keyword = json.loads(out)
    assert default["navigator"].startswith("subtree-scan")
    assert default["navigation_success"] >= keyword["navigation_success"]


@pytest.mark.parametrize("name", ["llm", "subtree-expand", "subtree-embed"])
def test_a_model_navigator_without_a_model_is_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    manifest = str(HOMELAB / "homelab.pcx.2k.json")
    code, _, err = run(capsys, "eval", manifest, str(HOMELAB / "cases.json"), "--navigator", name)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("pcx eval: error: ")
    assert f"--navigator {name} needs a local model" in err and "--model" in err
