"""The app's benchmarks, run from a checkout (not installed with the package): ``python -m
app.bench`` times each explorer view in Chromium (views.py), ``python -m app.bench.load``
opens N sessions at once on one server (load.py)."""
