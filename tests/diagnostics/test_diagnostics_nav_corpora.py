"""The third-party navigation corpora: man-page conversion, target ids, and the bench's flat
reference lines (computed from a tiny manifest, no corpus needed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from picocontext.manifest.eval import NavCase, run_eval
from picocontext.manifest.routing import SubtreeNavigator
from picocontext.manifest.validate import load_manifest
from picocontext_diagnostics.bench import manpages, pytest_docs
from picocontext_diagnostics.bench.navigation import (
    first_leaf_right,
    flat_rows,
    nav_row,
    target_opened,
)

RENDERED = """LS(1)                     User Commands                    LS(1)

NAME
       ls - list directory contents

DESCRIPTION
       List  information  about  the FILEs, sorted alphabet\u2010
       ically by default.

GNU coreutils 9.1            September 2022                    LS(1)
"""
ROOT = Path(__file__).resolve().parents[2]


def test_a_rendered_page_becomes_markdown_with_its_name_line() -> None:
    converted = manpages.to_markdown(RENDERED, "ls")
    assert converted is not None
    desc, body = converted
    assert desc == "list directory contents"
    assert body.startswith("# ls\n") and "## Description" in body
    assert "alphabetically" in body  # groff's end-of-line hyphenation is undone
    assert manpages.to_markdown("X(1)\nNAME\n  nothing here\nfooter\n", "x") is None


def test_page_ids_follow_the_docs_adapter(tmp_path: Path) -> None:
    page = tmp_path / "user-commands" / "coreutils" / "mkfs.ext4.md"
    page.parent.mkdir(parents=True)
    page.write_text('---\ntitle: "mkfs.ext4"\n---\n# mkfs.ext4\n', encoding="utf-8")
    assert manpages.page_ids(tmp_path) == {"mkfs.ext4(1)": "user-commands/coreutils/mkfs.ext4"}


def test_section_targets_are_the_files_adapter_ids(tmp_path: Path) -> None:
    rst = "Guide\n=====\n\n" + "\n\n".join(f"Part {i}\n------\n\n" + "words " * 400 for i in (1, 2))
    (tmp_path / "how-to").mkdir()
    (tmp_path / "how-to" / "guide.rst").write_text(rst, encoding="utf-8")
    ids = pytest_docs.origin_ids(tmp_path)
    assert ids[pytest_docs.case_key("how-to/guide.rst", "Part 2")] == "how-to/guide/part-2"
    assert ids["how-to/guide.rst"] == "how-to/guide/"


def test_every_committed_case_names_a_target_in_its_own_form() -> None:
    forms = {"manpages": r"[\w.+-]+\([18]\)", "pytest-docs": r"[\w/.-]+\.rst(#[\w.-]+)?"}
    for name, pattern in forms.items():
        cases = json.loads((ROOT / "resources/corpora" / name / "cases.json").read_text())
        assert len(cases) >= 25
        assert all(re.fullmatch(pattern, c["target"]) for c in cases)
        assert len({c["query"] for c in cases}) == len(cases)


def test_flat_lines_and_first_leaf() -> None:
    doc = {
        "pcx_version": "0.2",
        "source": {"id": "t", "kind": "docs"},
        "variant": {"budget": 4096},
        "root": {"id": "r", "what": "Root", "when": "always", "children": ["g"]},
        "nodes": {
            "g": {"what": "Group", "when": "tools", "children": ["a", "z"]},
            "a": {"title": "Disk", "what": "free space on disks", "when": "space",
                  "tokens": 10, "payload": {"ref": "node://a"}},
            "z": {"title": "Net", "what": "network addresses", "when": "ip",
                  "tokens": 10, "payload": {"ref": "node://z"}},
        },
    }  # fmt: skip
    m = load_manifest(json.loads(json.dumps(doc)))
    cases = [NavCase(query="free disk space", target="a"), NavCase(query="ip address", target="a")]
    rows = flat_rows(m, cases, {"a": "df reports space", "z": "ip address show"})
    assert rows == {"bm25_descriptors": 0.5, "bm25_content": 0.5}
    report = run_eval(m, cases, SubtreeNavigator())
    assert first_leaf_right(m, report) == 0.5


def test_strict_success_counts_only_the_target_node_itself() -> None:
    def page(n: int) -> dict[str, object]:
        return {
            "title": f"df (part {n} of 2)",
            "what": "report free disk space",
            "when": "space",
            "tokens": 10,
            "payload": {"ref": f"node://df~p{n}"},
        }

    doc = {
        "pcx_version": "0.2",
        "source": {"id": "t", "kind": "docs"},
        "variant": {"budget": 4096},
        "root": {"id": "r", "what": "Root", "when": "always", "children": ["df", "ip"]},
        "nodes": {
            "df": {"title": "df", "what": "df: disk space", "when": "space",
                   "children": ["df~p1", "df~p2"]},
            "df~p1": page(1),
            "df~p2": page(2),
            "ip": {"title": "ip", "what": "network addresses", "when": "ip",
                   "tokens": 10, "payload": {"ref": "node://ip"}},
        },
    }  # fmt: skip
    m = load_manifest(json.loads(json.dumps(doc)))
    cases = [NavCase(query="free disk space", target="df")]
    lateral = run_eval(m, cases, SubtreeNavigator(scan=True))
    walked = run_eval(m, cases, SubtreeNavigator())
    assert lateral.navigation_success == walked.navigation_success == 1.0
    assert lateral.cases[0].path[-1].startswith("df~p") and target_opened(lateral) == 0.0
    assert walked.cases[0].path == ("df",) and target_opened(walked) == 1.0
    row = nav_row(m, cases, "subtree-scan", 4096)
    assert (row["success"], row["target_opened"]) == (1.0, 0.0)
