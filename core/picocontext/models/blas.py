"""Faster CPU matrix products for MLX on Linux by preloading OpenBLAS.

The ``mlx[cpu]`` wheel bundles a reference BLAS (a few GFLOPS). Loading Debian's threaded
OpenBLAS with ``RTLD_GLOBAL`` *before* MLX is imported makes the dynamic linker resolve MLX's
``cblas_*`` symbols to OpenBLAS instead (tens to hundreds of GFLOPS). If OpenBLAS is absent we
warn once with the fix and carry on with the slow path.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
from pathlib import Path

log = logging.getLogger(__name__)

OPENBLAS_CANDIDATES: tuple[str, ...] = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)
DISABLE_ENV = "PICOCONTEXT_NO_OPENBLAS"
FIX = "install Debian's libopenblas0-pthread (apt-get install -y libopenblas0-pthread)"

_lock = threading.Lock()
_state: dict[str, str | None] = {}


def blas_status() -> str:
    """One line for reports: which BLAS MLX uses on this machine."""
    return _state.get("status") or "not checked"


def preload_openblas(candidates: tuple[str, ...] = OPENBLAS_CANDIDATES) -> str | None:
    """Load OpenBLAS globally once; return its path, or ``None`` (with one warning).

    Only meaningful before ``mlx.core`` is first imported; afterwards it reports why it could
    not help. No-op on macOS (MLX uses Accelerate/Metal there)."""
    with _lock:
        if "path" in _state:
            return _state["path"]
        path: str | None = None
        if not sys.platform.startswith("linux"):
            _state["status"] = "platform BLAS (not Linux)"
        elif os.environ.get(DISABLE_ENV):
            _state["status"] = f"reference BLAS bundled with mlx ({DISABLE_ENV} set)"
        elif "mlx.core" in sys.modules:
            _state["status"] = "unknown (mlx was imported before picocontext could preload BLAS)"
        else:
            for candidate in candidates:
                if Path(candidate).exists():
                    try:
                        ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
                    except OSError as exc:
                        log.warning("could not load %s: %s", candidate, exc)
                        continue
                    path = candidate
                    break
            if path is None:
                _state["status"] = "reference BLAS bundled with mlx (slow)"
                log.warning(
                    "OpenBLAS not found: MLX uses its slow reference BLAS on the CPU. To fix, %s.",
                    FIX,
                )
            else:
                _state["status"] = f"OpenBLAS preloaded from {path}"
        _state["path"] = path
        return path


def openblas_preload_env(candidates: tuple[str, ...] = OPENBLAS_CANDIDATES) -> dict[str, str]:
    """``LD_PRELOAD`` for a child process (such as ``mlx_lm.server``) that should run MLX on
    the same OpenBLAS :func:`preload_openblas` gives this process; empty where it would not
    preload (not Linux, ``PICOCONTEXT_NO_OPENBLAS`` set, no OpenBLAS installed)."""
    if not sys.platform.startswith("linux") or os.environ.get(DISABLE_ENV):
        return {}
    found = next((c for c in candidates if Path(c).exists()), None)
    if found is None:
        return {}
    preload = " ".join(p for p in (found, os.environ.get("LD_PRELOAD", "")) if p)
    return {"LD_PRELOAD": preload}
