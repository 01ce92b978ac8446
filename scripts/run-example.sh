#!/usr/bin/env bash
# The project's main command: create/update .venv, install, fetch the model if needed, run
# `picocontext` with the given arguments (the app, or a headless smoke with --smoke).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$ROOT"
picocontext_system_packages fonts-dejavu-core libopenblas0-pthread libegl1 libxkbcommon0 libfontconfig1 libgl1 libglib2.0-0
picocontext_venv "$(picocontext_extras mlx,gui)"
exec "$VENV/bin/picocontext" "$@"
