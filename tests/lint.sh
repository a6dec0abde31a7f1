#!/usr/bin/env bash
# The gates before the tests (.ci/run, the README's test command): ruff's bug-finding and import
# rules, the formatting, and mypy on the engine, io and analysis ([tool.ruff], [tool.mypy] in
# pyproject.toml). About 40 s on 2 cores with a cold mypy cache; the cache is kept outside the
# checkout (a clean clone reuses it: mypy checks each file's hash against it), under 1 s warm.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check --quiet .
ruff format --check --quiet .
mypy --cache-dir "${XDG_CACHE_HOME:-$HOME/.cache}/glassbox/mypy" -p glassbox.model.engine -p glassbox.model.io -p glassbox.model.analysis
