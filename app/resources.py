"""What every session shares, created once per server: the loaded models and the trace cache.
Each is used by many sessions at once, so calls on them leave no state behind."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import streamlit as st

from glassbox.app.components.labels import plain
from glassbox.app.components.timing import computing
from glassbox.core import Model, load
from glassbox.model.engine import GlassboxError, default_device
from glassbox.model.serving import Admission, BoundedCache, ModelCache, TraceCache, check_budget
from glassbox.model.serving.admission import default_budget, return_freed_memory
from glassbox.model.serving.compute import PassClock
from glassbox.model.serving.lane import Lane
from glassbox.model.serving.sizing import seq2seq_pass_bound, trace_cost


@st.cache_resource(show_spinner=False)  # cheap; and the server's warm() calls it outside any session
def model_cache() -> ModelCache:
    """Bounded by GLASSBOX_MODEL_CACHE_GB (default: half the machine's memory). Its models are
    glassbox.Model objects: the pages call what a Python user calls."""
    return ModelCache(loader=split_load if os.environ.get(DEVICE_MAP_SETTING) else load)


DEVICE_MAP_SETTING = "GLASSBOX_DEVICE_MAP"  # "auto" or "balanced": models split by blocks (docs/devices.md)


def split_load(name: str, **settings) -> Model:
    """``glassbox.load`` with the server's device map (GLASSBOX_DEVICE_MAP): a model bigger than
    one GPU split by blocks across the GPUs, then the CPU, then the disk."""
    return load(name, device_map=os.environ[DEVICE_MAP_SETTING], **{k: v for k, v in settings.items() if k != "device"})


def shared_model(name: str) -> Model:
    """One model object for every browser session, whatever the spelling of its path; calls on
    it leave no state."""
    with st.spinner(f"Loading {plain(name)}… (a large model takes a while: its weights are read, converted and checked)"):
        return model_cache().model(name)


@st.cache_resource(max_entries=4, show_spinner="Opening the sparse autoencoder…")
def shared_sae(model_key: str, source: str, _loaded: Model):
    """One sparse autoencoder per (model, source) for every session, as the models are shared;
    refused above the trace budget's worth of weights (a hub one is fetched on first use)."""
    return _loaded.sae(source, max_bytes=trace_budget())


@st.cache_resource
def trace_budget() -> int:
    """GLASSBOX_TRACE_BUDGET_GB, else half the memory free when the server starts."""
    return default_budget(default_device())


@st.cache_resource
def trace_cache() -> TraceCache:
    """One cache for every session: a trace depends only on (model, prompt, target, capture).
    At most half the trace budget (and 3 GiB), which it shares with the passes in flight."""
    return TraceCache(max_bytes=min(3 * 2**30, trace_budget() // 2))


@st.cache_resource
def admission() -> Admission:
    """Every model pass of every session, bounded by the trace budget together with what the
    trace cache keeps; a request that has to wait first empties the cache. Freed tensors go back
    to the operating system at once, so that the server's memory follows the budget
    (model/serving/admission.py)."""
    return_freed_memory()
    return Admission(trace_budget(), on_pressure=trace_cache().clear, kept=trace_cache().nbytes)


@st.cache_resource
def long_lane() -> Lane:
    """Where every session's long computations run: a few at a time, at the lowest CPU priority,
    one per visitor, each within GLASSBOX_MAX_COMPUTE_S (model/serving/lane.py)."""
    return Lane()


@st.cache_resource
def pass_clock() -> PassClock:
    """Each model's pass time on this server, measured once per length (model/serving/compute.py)."""
    return PassClock()


@st.cache_resource
def shared_results() -> BoundedCache:
    """The results of long computations every visitor shares (a grid, a table: small), by what
    they depend on; the least recently used dropped past 64."""
    return BoundedCache(lambda value: 0, max_bytes=1, max_entries=64)


def check_cost(what: str, cost: Callable[[int], int], n_tokens: int, n_ctx: int) -> int:
    """``cost(n_tokens)`` in bytes, or a GlassboxError when it is over the server's whole trace
    budget, naming the longest prompt that fits (model/serving/sizing.py)."""
    return check_budget(cost, n_tokens, trace_budget(), n_ctx, what)


@contextmanager
def model_pass(what: str, cost: int) -> Iterator[None]:
    """Every model pass a page runs: admitted against the server's trace budget, in its turn (the
    queue shown, the wait bounded; a page that goes or reruns leaves the queue), and logged for
    the view benchmark as ``what``."""
    queued = st.empty()

    def wait(ahead: int, waited: float, limit: float) -> None:
        queued.info(
            plain(
                f"Queued: {ahead} ahead of yours on this server, waiting {waited:.0f} s (at most "
                f"{limit:.0f} s). Yours starts when there is memory for it."
            )
        )

    try:
        with admission().admit(cost, wait):
            queued.empty()
            with computing(what):
                yield
    finally:
        queued.empty()


@contextmanager
def admitted_pass(what: str, loaded: Model, n_tokens: int, backward: bool = False, passes: int = 1) -> Iterator[None]:
    """``passes`` full passes of ``loaded`` (one after the other, each on ``n_tokens``), admitted
    like every other pass: checked against the server's budget and run in turn. An
    encoder-decoder's cost is a bound (``seq2seq_pass_bound``): the sizer probes decoders' traces."""
    if loaded.cfg.kind == "encoder-decoder":
        cost = check_cost(what, lambda n: seq2seq_pass_bound(loaded.model, backward), n_tokens, loaded.cfg.n_ctx)
    else:
        cost = check_cost(what, lambda n: trace_cost(loaded.model, n, None, backward), n_tokens, loaded.cfg.n_ctx)
    with model_pass(what, cost * passes), computing(what):
        yield


@contextmanager
def same_request_waits(what: str) -> Iterator[Callable[[], None]]:
    """For a wait on a request another visitor's page is computing (BoundedCache.get): each
    second, say so on the page (which raises once the page has gone) and end the wait past
    GLASSBOX_QUEUE_WAIT_S, as a wait in the queue ends."""
    note, started = st.empty(), time.monotonic()

    def waiting() -> None:
        waited = time.monotonic() - started
        if waited > admission().max_wait:
            raise GlassboxError(
                f"The server is busy: {what} was still being computed for another visitor after "
                f"{admission().max_wait:.0f} s. Try again in a minute."
            )
        note.info(plain(f"Waiting {waited:.0f} s for {what}, which is being computed for another visitor."))

    try:
        yield waiting
    finally:
        note.empty()
