"""A navigation corpus nobody here wrote: the English manual pages (sections 1 and 8) of a
fixed list of everyday Debian packages, one markdown file per page.

The pages are not stored in the repository (their licences vary by package); they are derived
at run time from the machine's installed packages (``/var/lib/dpkg/info/<pkg>.list``), or,
for a package that is not installed, from its ``.deb`` fetched with ``apt-get download`` and
unpacked with ``dpkg-deb -x``. Each page is rendered to text with ``groff -man -Tutf8`` and
written as ``<section>/<package>/<page>.md`` with its NAME line as frontmatter ``title`` and
``description``. The result is cached under the user cache directory, keyed by the package
list and versions, so only the first run pays for groff.

Shape: two levels of folders (section, then Debian package -- names a user rarely knows:
"coreutils", "util-linux", "procps"), about 850 pages, some of them long (each body is cut
at :data:`MAX_BODY` characters, about 1,500 tokens, and says so).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import platformdirs

PACKAGES = (
    "coreutils",
    "procps",
    "psmisc",
    "git-man",
    "openssh-client",
    "iproute2",
    "e2fsprogs",
    "passwd",
    "util-linux",
    "mount",
    "xz-utils",
    "gzip",
    "bzip2",
    "zstd",
    "tar",
    "diffutils",
    "grep",
    "sed",
    "findutils",
    "less",
    "systemd",
    "openssl",
    "curl",
    "wget",
    "file",
    "zip",
    "unzip",
    "hostname",
    "gpg",
    "gnupg-utils",
    "strace",
    "bsdutils",
    "bsdextrautils",
    "login",
    "man-db",
    "apt",
    "dpkg",
    "debianutils",
    "net-tools",
    "ncurses-bin",
    "patch",
    "make",
    "sensible-utils",
)
SECTIONS = {"1": "user-commands", "8": "system-administration"}
MAX_BODY = 6_000
FORMAT = 2  # bump when the rendering changes: part of the cache key
_PAGE = re.compile(r"^/usr/share/man/man([18])/([A-Za-z0-9][\w.+-]*)\.([18][a-z]*)\.gz$")
_HEADING = re.compile(r"^[A-Z][A-Z0-9 /&(),'-]+$")


class CorpusUnavailable(RuntimeError):
    """The corpus cannot be derived on this machine (the message says what is missing)."""


def _dpkg_list(pkg: str) -> Path | None:
    info = Path("/var/lib/dpkg/info")
    for name in (f"{pkg}.list", f"{pkg}:amd64.list", f"{pkg}:arm64.list"):
        if (info / name).is_file():
            return info / name
    return None


def _version(pkg: str) -> str:
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", pkg], capture_output=True, text=True, check=False
    )
    return proc.stdout.strip() if proc.returncode == 0 else "absent"


def _fetched_root(pkg: str, cache: Path) -> Path:
    """Unpack ``pkg``'s .deb (``apt-get download``) under ``cache`` and return its root."""
    root = cache / "debs" / pkg
    if root.is_dir():
        return root
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            ["apt-get", "download", pkg], cwd=tmp, capture_output=True, text=True, check=False
        )
        debs = sorted(Path(tmp).glob("*.deb"))
        if proc.returncode != 0 or not debs:
            raise CorpusUnavailable(f"{pkg} is not installed and apt-get download failed")
        staging = Path(tmp) / "root"
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(staging)], check=True)
        root.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), str(root))
    return root


def package_pages(pkg: str, cache: Path) -> list[tuple[str, str, Path]]:
    """(section, page name, gz file) for the package's English section 1/8 pages; aliases
    (symlinks) are skipped so every page is one document."""
    listing = _dpkg_list(pkg)
    if listing is not None:
        root = Path("/")
        paths = listing.read_text(encoding="utf-8").splitlines()
    else:
        root = _fetched_root(pkg, cache)
        paths = ["/" + str(p.relative_to(root)) for p in root.rglob("*.gz")]
    out = []
    for raw in sorted(paths):
        m = _PAGE.match(raw)
        path = root / raw.lstrip("/")
        if m and path.is_file() and not path.is_symlink():
            out.append((m.group(1), m.group(2), path))
    return out


def render(page: Path) -> str:
    """groff's plain-text rendering of one page (empty when it is only a ``.so`` alias)."""
    source = gzip.decompress(page.read_bytes())
    if source.lstrip().startswith(b".so "):
        return ""
    proc = subprocess.run(
        ["groff", "-man", "-t", "-Tutf8", "-P-cbou"],
        input=source,
        capture_output=True,
        check=False,
        env={"MANWIDTH": "80", "PATH": "/usr/bin:/bin"},
    )
    return proc.stdout.decode("utf-8", errors="replace")


def to_markdown(text: str, page: str) -> tuple[str, str] | None:
    """(description from the NAME line, markdown body), or None when there is no NAME."""
    text = re.sub(r"\u2010\n\s*(?=[a-z])", "", text)  # words groff hyphenated at a line end
    lines = text.splitlines()
    body: list[str] = []
    name_lines: list[str] = []
    section = ""
    for ln in lines[1:-1]:  # the first and last lines are the page's header and footer
        if _HEADING.match(ln):
            section = ln.strip()
            body.append(f"\n## {section.title()}\n")
            continue
        if section == "NAME" and ln.strip():
            name_lines.append(ln.strip())
        body.append(ln[7:] if ln.startswith("       ") else ln.strip())
    name = " ".join(name_lines)
    if " - " not in name and " — " not in name:
        return None
    desc = re.split(r"\s[-—]\s", name, maxsplit=1)[1].strip()
    md = re.sub(r"\n{3,}", "\n\n", "\n".join(body)).strip()
    if len(md) > MAX_BODY:
        md = md[:MAX_BODY].rsplit("\n", 1)[0] + "\n\n(page cut here for the benchmark)"
    return desc, f"# {page}\n\n{md}\n"


def _frontmatter(title: str, desc: str) -> str:
    clean = desc.replace('"', "'").replace("\\", "/")
    return f'---\ntitle: "{title}"\ndescription: "{clean}"\n---\n'


def cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("picocontext")) / "corpora"


def corpus_key(packages: Sequence[str]) -> str:
    blob = json.dumps([FORMAT, MAX_BODY, [[p, _version(p)] for p in packages]])
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def ensure_corpus(packages: Sequence[str] = PACKAGES) -> tuple[Path, int]:
    """The corpus folder (built once, then cached) and its number of documents."""
    if shutil.which("groff") is None:
        raise CorpusUnavailable("groff is needed to render manual pages (apt-get install groff)")
    base = cache_dir()
    out = base / f"manpages-{corpus_key(packages)}"
    done = out / ".complete"
    if done.is_file():
        return out, int(done.read_text(encoding="utf-8"))
    jobs = [(pkg, *page) for pkg in packages for page in package_pages(pkg, base)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        texts = list(pool.map(lambda job: render(job[3]), jobs))
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    n = 0
    for (pkg, sec, name, _), text in zip(jobs, texts, strict=True):
        converted = to_markdown(text, name) if text else None
        if converted is None:
            continue
        path = tmp / SECTIONS[sec] / pkg / f"{name}.md"
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_frontmatter(name, converted[0]) + converted[1], encoding="utf-8")
        n += 1
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    done.write_text(str(n), encoding="utf-8")
    return out, n


def page_ids(corpus: Path) -> dict[str, str]:
    """``name(section)`` -> the docs adapter's id for that page's file."""
    from picocontext.build import path_id

    out: dict[str, str] = {}
    for sec, folder in SECTIONS.items():
        for path in sorted((corpus / folder).glob("*/*.md")):
            key = f"{path.stem}({sec})"
            out.setdefault(key, path_id([folder, path.parent.name, path.stem]))
    return out
