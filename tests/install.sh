#!/usr/bin/env bash
# Everything the tests need: the Python packages, Debian's Chromium for the real-browser tests
# (Playwright drives it; Playwright's own browser download cannot work offline) and Debian's
# nginx for the replicas behind one address (app/replicas.py).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -r requirements-dev.txt
# circuit-tracer, the attribution graph's reference (tests/test_circuit_tracer.py), without its
# dependencies: its pins (huggingface-hub<1, transformers<=4.57.3) would downgrade ours, and the
# TransformerLens path the test runs works with ours
python -m pip install -q --no-deps circuit-tracer==0.5.0
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx)
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
    $SUDO apt-get update -q && $SUDO apt-get install -y -q "${missing[@]}"
fi
