"""A navigation corpus nobody here wrote: pytest's own Sphinx documentation (``doc/en`` of
its sdist on PyPI, MIT licence), read with the ``files`` adapter.

The sdist is fetched once with ``pip download --no-deps --no-binary :all:`` into the user
cache and unpacked there; nothing is stored in the repository. Release announcements, the
changelog and the generated plugin list are left out: they are lists of versions and names,
not pages a user navigates to.

Shape: a real documentation tree (how-to guides, explanations, reference, examples), about 60
reStructuredText pages, long ones split by their top-level sections -- prose, not one-line
entries, and much of it about the same few concepts (fixtures, marks, plugins).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import platformdirs

from picocontext.build import load_files, slug

PYTEST_VERSION = "8.3.3"
LEFT_OUT = ("announce/", "changelog.rst", "reference/plugin_list.rst")


class CorpusUnavailable(RuntimeError):
    """The sdist could not be fetched (the message carries pip's)."""


def cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("picocontext")) / "corpora"


def ensure_corpus(version: str = PYTEST_VERSION) -> tuple[Path, int]:
    """``doc/en`` of the pytest sdist (cached) and its number of pages."""
    out = cache_dir() / f"pytest-docs-{version}"
    done = out / ".complete"
    if done.is_file():
        return out, int(done.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
        cmd += ["--no-binary", ":all:", "--dest", tmp, f"pytest=={version}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        sdists = sorted(Path(tmp).glob("pytest-*.tar.gz"))
        if proc.returncode != 0 or not sdists:
            raise CorpusUnavailable(f"pip download pytest=={version}: {proc.stderr[-300:]}")
        with tarfile.open(sdists[0]) as tar:
            tar.extractall(tmp, filter="data")
        docs = Path(tmp) / f"pytest-{version}" / "doc" / "en"
        staging = out.with_name(out.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        n = 0
        for page in sorted(docs.rglob("*.rst")):
            rel = page.relative_to(docs).as_posix()
            if rel.startswith(LEFT_OUT) or rel in LEFT_OUT:
                continue
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(page, target)
            n += 1
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)
    done.write_text(str(n), encoding="utf-8")
    return out, n


def origin_ids(corpus: Path) -> dict[str, str]:
    """``page.rst`` or ``page.rst#section-slug`` -> the id the files adapter gives it (a page
    split into sections is a branch whose leaves are its top-level sections)."""
    tree = load_files(corpus, "pytest")
    return {n.origin: n.id for n in tree.root.walk() if n.origin}


def case_key(page: str, section: str | None) -> str:
    """How a case names its target: the page, and the section title when it has one."""
    return page if section is None else f"{page}#{slug(section)}"
