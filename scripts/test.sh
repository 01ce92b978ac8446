#!/usr/bin/env bash
# The project's test command: venv + install + ruff + mypy + pytest. Any failure, or a pytest run
# that collects no tests, exits non-zero.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$ROOT"
picocontext_system_packages fonts-dejavu-core libopenblas0-pthread libegl1 libxkbcommon0 libfontconfig1 libgl1 libglib2.0-0
picocontext_venv "$(picocontext_extras mlx,gui,dev)"
PY="$VENV/bin/python"

echo "== ruff" >&2
"$PY" -m ruff check core diagnostics playground tests scripts
"$PY" -m ruff format --check core diagnostics playground tests scripts

echo "== mypy" >&2
# pyproject.toml's mypy_path lists the three code folders, whose package folders carry the
# import names, and tests/support.
"$PY" -m mypy -p picocontext -p picocontext_diagnostics -p picocontext_playground
"$PY" -m mypy --exclude "^tests/support/" tests

echo "== pytest" >&2
export QT_QPA_PLATFORM="${QT_QPA_PLATFORM:-offscreen}"
set +e
"$PY" -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests: failing on purpose" >&2
    exit 1
fi
exit "$rc"
