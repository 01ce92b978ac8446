#!/usr/bin/env bash
# Benchmarks: scripts/bench.sh NAME [ARGS...] runs picocontext_diagnostics.bench.NAME
# (dashes become underscores) and writes JSON (default under out/bench/).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$ROOT"
if [ $# -lt 1 ]; then
    echo "usage: scripts/bench.sh NAME [ARGS...]; available:" >&2
    # the modules that run as a script; helpers (corpora, the navigation reference) are not listed
    grep -l '^if __name__ == "__main__":' diagnostics/picocontext_diagnostics/bench/*.py |
        sed 's|.*/\([a-z0-9_]*\)\.py$|  \1|' | tr _ - >&2
    exit 2
fi
picocontext_system_packages libopenblas0-pthread
picocontext_venv "$(picocontext_extras mlx,dev)"
name="${1//-/_}"
shift
exec "$VENV/bin/python" -m "picocontext_diagnostics.bench.$name" "$@"
