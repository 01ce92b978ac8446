#!/usr/bin/env bash
# Benchmarks: scripts/bench.sh NAME [ARGS...] runs picocontext_diagnostics.bench.NAME
# (dashes become underscores) and writes JSON (default under out/bench/).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$ROOT"
if [ $# -lt 1 ]; then
    echo "usage: scripts/bench.sh NAME [ARGS...]; available:" >&2
    ls diagnostics/picocontext_diagnostics/bench | sed -n 's/^\([a-z0-9_]*\)\.py$/  \1/p' | grep -v __init__ | tr _ - >&2
    exit 2
fi
picocontext_system_packages libopenblas0-pthread
picocontext_venv "$(picocontext_extras mlx,dev)"
name="${1//-/_}"
shift
exec "$VENV/bin/python" -m "picocontext_diagnostics.bench.$name" "$@"
