# Shared by the project's commands: create or update .venv with the given extras.
# Sourced, not executed. Installs only when pyproject.toml changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PICOCONTEXT_VENV:-$ROOT/.venv}"
PYTHON_BIN="${PYTHON:-python3}"

picocontext_system_packages() {
    # Fonts for Qt text, OpenBLAS for MLX's CPU matmuls. Best effort: only as root with apt.
    if [ "$(uname -s)" = "Linux" ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
        local need=()
        for pkg in "$@"; do
            dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
        done
        if [ "${#need[@]}" -gt 0 ]; then
            echo "installing system packages: ${need[*]}" >&2
            (apt-get install -y -q "${need[@]}" >/dev/null 2>&1 ||
                (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "${need[@]}" >/dev/null 2>&1)) ||
                echo "warning: could not install ${need[*]}; continuing" >&2
        fi
    fi
}

picocontext_extras() {
    # The given extras, plus llama.cpp on Linux (the default engine there; on macOS MLX on
    # Metal is the default and llama.cpp an opt-in extra).
    if [ "$(uname -s)" = "Linux" ]; then
        echo "$1,llamacpp"
    else
        echo "$1"
    fi
}

picocontext_venv() {
    local extras="$1"
    if [ ! -x "$VENV/bin/python" ]; then
        "$PYTHON_BIN" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' ||
            { echo "picocontext needs Python >= 3.11 (found $("$PYTHON_BIN" --version 2>&1))" >&2; exit 1; }
        "$PYTHON_BIN" -m venv "$VENV"
        "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 ||
            echo "warning: could not upgrade pip in $VENV; continuing with its own" >&2
    fi
    local stamp="$VENV/.picocontext-$extras"
    local want
    want="$(cat "$ROOT/pyproject.toml" | "$VENV/bin/python" -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        # pip relays the build backend's advisory blocks (setuptools' editable-install notice)
        # even with -q: they go to a log, shown whole only when the install fails.
        local log="$VENV/install.log"
        echo "installing picocontext[$extras] into $VENV (log: $log)" >&2
        if ! "$VENV/bin/python" -m pip install -q -e "$ROOT[$extras]" >"$log" 2>&1; then
            cat "$log" >&2
            echo "pip install failed; the log above is also in $log" >&2
            exit 1
        fi
        echo "$want" >"$stamp"
    fi
}
