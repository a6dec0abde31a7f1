#!/usr/bin/env bash
# Everything the tests need: the Python packages, and Debian's Chromium for the real-browser
# tests (Playwright drives it; Playwright's own browser download cannot work offline).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -r requirements-dev.txt
if ! command -v chromium >/dev/null; then
    SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
    $SUDO apt-get update -q && $SUDO apt-get install -y -q chromium
fi
