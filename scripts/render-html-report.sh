#!/usr/bin/env bash
# Look at an HTML report the way a reader's browser shows it: headless Chromium renders the
# page to a PNG, offline (the page must need no network), with its <details> folded as sent.
#
#   scripts/render-html-report.sh out/v.html out/v-html.png [WIDTHxHEIGHT]
#
# Without an HTML file it first writes one: the scripted four-policy retention run under
# pressure (scripts/render-html-report.sh "" out/v-html.png). Installs Debian's chromium when
# it is missing and we are root; the test suite never needs it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$ROOT"
page="${1:-}"
png="${2:-out/report-html.png}"
size="${3:-1280x2400}"
if [ -z "$page" ]; then
    page="out/report-example.html"
    "$VENV/bin/picocontext" --episode-smoke retention --pressure \
        --policies append-only,editable,navigated,distilled --backend scripted \
        --report "$page" --image out/report-example.png >/dev/null
fi
browser="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
if [ -z "$browser" ]; then
    picocontext_system_packages chromium
    browser="$(command -v chromium || true)"
fi
[ -n "$browser" ] || { echo "no chromium found; install it (apt-get install chromium)" >&2; exit 2; }
mkdir -p "$(dirname "$png")"
# --no-sandbox: Chromium refuses to run as root otherwise (containers); the page is our own.
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
    --disable-background-networking --window-size="${size/x/,}" \
    --screenshot="$(realpath -m "$png")" "file://$(realpath "$page")" 2>/dev/null
echo "rendered $page -> $png ($size)"
