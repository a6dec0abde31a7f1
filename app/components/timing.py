"""Server time per script or fragment run, for ``python -m app.bench``: with GLASSBOX_TIMING set
to a file, each run appends one JSON line {"run": name, "view": the explorer's view, "seconds"}.
Each trace computed inside a run adds a line {"compute": "trace", "seconds"}. Unset (the
default), nothing is written."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st


def _log(record: dict) -> None:
    """One JSON line in the GLASSBOX_TIMING file, if it is set."""
    path = os.environ.get("GLASSBOX_TIMING")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(record) + "\n")


_depth = threading.local()  # a fragment run inside a page run is counted once, in the page's


@contextmanager
def computing(what: str) -> Iterator[None]:
    """The model's own pass inside a run (a trace): logged as {"compute": what, "seconds"}, so
    the bench can tell the model's time from the page's."""
    start = time.perf_counter()
    try:
        yield
    finally:
        _log({"compute": what, "seconds": time.perf_counter() - start})


@contextmanager
def timed(name: str) -> Iterator[None]:
    path = os.environ.get("GLASSBOX_TIMING")
    depth = getattr(_depth, "value", 0)
    if not path or depth:
        yield
        return
    start = time.perf_counter()
    _depth.value = 1
    try:
        yield
    finally:
        _depth.value = 0
        _log({"run": name, "view": st.session_state.get("explore_view"), "seconds": time.perf_counter() - start})
