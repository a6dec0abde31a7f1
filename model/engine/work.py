"""Long computations that can be stopped between model passes, and whose passes are counted.

An analysis that makes many passes (path patching, a head catalog, integrated gradients, a
training run) runs inside ``working(work)``; every pass of the model (``Transformer.forward``,
``forward_from``, an encoder-decoder's ``forward``) first calls ``pass_started``, which counts
the pass on the current ``Work`` and raises ``Cancelled`` once someone has called
``work.cancel()`` (a page that closed or reran, a Cancel button, a time limit). So a
computation stops within one pass of being cancelled, wherever its loops are, and nothing is
left on the shared model: the ``Work`` is held in a ContextVar for the duration of one call,
as captures are (capture.py).

Outside ``working`` (the CLI, a notebook, a light page request) ``pass_started`` costs one
ContextVar read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from glassbox.model.engine.errors import GlassboxError


class Cancelled(GlassboxError):
    """A computation stopped between two passes because its ``Work`` was cancelled."""


class Work:
    """One long computation: ``total`` passes expected (None: unknown), ``passes`` made so far.
    ``cancel`` may be called from any thread; the computation raises ``Cancelled`` with
    ``reason`` at its next pass."""

    def __init__(self, total: int | None = None, what: str = "The computation"):
        self.total, self.what = total, what
        self.passes = 0
        self.estimate: float | None = None  # seconds, where the caller estimated it
        self.steps: tuple[int, int] | None = None  # (done, total) where the computation reports its own steps
        self.between: Callable[[], None] | None = None  # called before each pass (the lane: a pause for light work)
        self.paused = 0.0  # seconds spent in ``between``
        self.started = time.monotonic()
        self.reason = f"{what} was cancelled."
        self._cancelled = threading.Event()

    def cancel(self, reason: str | None = None) -> None:
        if reason is not None and not self._cancelled.is_set():
            self.reason = reason
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def report(self, done: int, total: int) -> None:
        """A computation's own progress (a training run's steps), read by whoever waits for it."""
        self.steps = (done, total)

    @property
    def done(self) -> float:
        """The share done: the steps reported, else the passes made of those expected (0 unknown)."""
        if self.steps is not None:
            return self.steps[0] / max(self.steps[1], 1)
        return min(self.passes / self.total, 1.0) if self.total else 0.0

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def pass_started(self) -> None:
        if self.between is not None and not self._cancelled.is_set():
            start = time.monotonic()
            self.between()
            self.paused += time.monotonic() - start
        if self._cancelled.is_set():
            raise Cancelled(self.reason)
        self.passes += 1


_current: ContextVar[Work | None] = ContextVar("glassbox_work", default=None)


def pass_started() -> None:
    """Called by the engine at the start of every pass: counts it on the current Work, or
    raises Cancelled if that Work was cancelled."""
    work = _current.get()
    if work is not None:
        work.pass_started()


def current_work() -> Work | None:
    return _current.get()


def report(done: int, total: int) -> None:
    """A computation's own progress (a training run's ``on_step``), on the current Work if any."""
    work = _current.get()
    if work is not None:
        work.report(done, total)


@contextmanager
def working(work: Work) -> Iterator[Work]:
    """Run the block as ``work``: its passes counted on it, stopped at the next pass once it is
    cancelled."""
    token = _current.set(work)
    try:
        yield work
    finally:
        _current.reset(token)
