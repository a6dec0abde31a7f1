#!/usr/bin/env bash
# The gates before the tests (.ci/run, the README's test command): ruff's bug-finding and import
# rules, the formatting, and mypy on the engine, io and analysis ([tool.ruff], [tool.mypy] in
# pyproject.toml). About 40 s on 2 cores with a cold mypy cache.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check --quiet .
ruff format --check --quiet .
mypy -p glassbox.model.engine -p glassbox.model.io -p glassbox.model.analysis
