"""The long lane: where a server runs its long computations (path patching, a head catalog,
integrated gradients, patching sweeps, training), apart from the light requests (page draws,
the playground's next token, lesson figures), so that light ones never wait behind long ones.

- **A bounded pool.** At most ``slots`` long computations run at once, each on a worker thread
  of the lane at the lowest CPU priority (nice 19; the threads torch starts from it inherit
  it): the light requests, on the page threads, get the processor first. Computations past
  the slots wait in a first-come-first-served queue (admission.py's, counting slots instead of
  bytes), bounded by ``GLASSBOX_QUEUE_WAIT_S``.
- **Light work first.** Priority alone does not share Python's one interpreter lock, which a
  long computation's loop holds between its tensor operations: so while any light request is
  being computed (``light()`` around each page run), a long computation pauses before its next
  pass, for at most ``MAX_PAUSE_S`` at a time, so that it still moves on a busy server.
- **A time budget per request.** Each computation comes with its estimate (compute.py); over
  ``GLASSBOX_MAX_COMPUTE_S`` it is refused before it starts, with the estimate. One that
  runs past twice the limit anyway (a loaded server) is stopped.
- **One at a time per visitor.** A session with a long computation running is refused a
  second one, with what is running and for how long.
- **Stopped when nobody waits.** The caller's thread waits for the result, calling
  ``on_progress`` a few times a second; an exception it raises (a page that closed or reran,
  a Cancel button) cancels the computation, which stops at its next pass (work.py), and the
  call returns only once the worker has stopped, so its slot and memory are free again.

Settings: ``GLASSBOX_MAX_COMPUTE_S`` (default 120: no longer than a request may wait in the
queue, so the first in line always starts within its wait), ``GLASSBOX_LONG_SLOTS`` (default:
half the processor's cores, at least 1).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as Pending
from contextlib import contextmanager
from typing import TypeVar

from glassbox.model.engine import GlassboxError
from glassbox.model.engine.work import Cancelled, Work, working
from glassbox.model.io.guard import seconds_setting
from glassbox.model.serving.admission import Admission

V = TypeVar("V")

MAX_COMPUTE_S = "GLASSBOX_MAX_COMPUTE_S"
DEFAULT_MAX_COMPUTE_S = 120.0
LONG_SLOTS = "GLASSBOX_LONG_SLOTS"
OVERRUN = 2  # a computation running past this many times the limit is stopped
POLL_S = 0.25  # how often the waiting caller looks at its computation (and its page)
MAX_PAUSE_S = 2.0  # the longest a long computation waits for light work before its next pass
LOWEST_PRIORITY = 19


def default_max_seconds() -> float:
    return seconds_setting(MAX_COMPUTE_S, DEFAULT_MAX_COMPUTE_S)


def default_slots() -> int:
    raw = os.environ.get(LONG_SLOTS, "").strip()
    if not raw:
        return max(1, (os.cpu_count() or 2) // 2)
    if not raw.isdigit() or int(raw) < 1:
        raise GlassboxError(f"{LONG_SLOTS} must be a whole number of computations, 1 or more, not {raw!r}")
    return int(raw)


def lowest_priority() -> None:
    """This thread (and the threads it starts, torch's among them) at nice 19, where Linux
    allows; elsewhere the lane still bounds how many run."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST_PRIORITY)
    except (AttributeError, OSError):
        pass


def minutes(seconds: float) -> str:
    """12 s, 0.35 s, 4.5 min."""
    if seconds < 10:
        return f"{seconds:.2g} s"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


class Lane:
    def __init__(self, slots: int | None = None, max_seconds: float | None = None, max_wait: float | None = None):
        self.slots = default_slots() if slots is None else slots
        self.max_seconds = default_max_seconds() if max_seconds is None else max_seconds
        self.queue = Admission(self.slots, max_wait=max_wait)  # one unit a computation
        self._pool = ThreadPoolExecutor(self.slots, thread_name_prefix="glassbox-long", initializer=lowest_priority)
        self._running: dict[Hashable, Work] = {}  # by visitor (a browser session)
        self._lock = threading.Lock()
        self._light = 0  # light requests being computed
        self._light_changed = threading.Condition()
        self._local = threading.local()  # whether this thread's request is counted as light

    @contextmanager
    def light(self) -> Iterator[None]:
        """Around a light request (a page's run): long computations pause between passes while
        any is computed. Nested calls count once; a light request that starts a long computation
        stops counting while it waits for it (``run``)."""
        if getattr(self._local, "light", False):
            yield
            return
        self._count_light(+1)
        try:
            yield
        finally:
            self._count_light(-1)

    def _count_light(self, change: int) -> None:
        self._local.light = change > 0
        with self._light_changed:
            self._light += change
            self._light_changed.notify_all()

    def _pause_for_light(self, work: Work) -> None:
        """Before a long computation's pass: wait while light requests are computed (bounded)."""
        if not self._light:  # the usual case, read without the lock: a pass only starts sooner or later
            return
        deadline = time.monotonic() + MAX_PAUSE_S
        with self._light_changed:
            while self._light > 0 and not work.cancelled and (left := deadline - time.monotonic()) > 0:
                self._light_changed.wait(left)

    def check(self, what: str, seconds: float) -> None:
        """A GlassboxError, with the estimate, for a computation over the limit."""
        if seconds > self.max_seconds:
            raise GlassboxError(
                f"{what} would take about {minutes(seconds)} on this server, longer than the "
                f"{minutes(self.max_seconds)} a computation may take here (GLASSBOX_MAX_COMPUTE_S): "
                "choose less work (the limits are beside the settings)."
            )

    def running(self, visitor: Hashable) -> Work | None:
        with self._lock:
            return self._running.get(visitor)

    def run(
        self,
        visitor: Hashable,
        what: str,
        seconds: float,
        compute: Callable[[], V],
        total: int | None = None,
        on_wait: Callable[[int, float, float], None] | None = None,
        on_progress: Callable[[Work], None] | None = None,
        admitted: Callable[[], object] | None = None,
    ) -> V:
        """``compute()`` on the lane for ``visitor``, estimated at ``seconds`` and ``total``
        passes. ``on_wait(ahead, waited, max_wait)`` while it waits for a slot, ``on_progress(work)``
        while it runs (either may raise to stop it); ``admitted()``: a context manager held
        around the run once it has a slot (the memory budget's admission)."""
        self.check(what, seconds)
        work = Work(total, what)
        work.between = lambda: self._pause_for_light(work)
        with self._lock:
            if visitor in self._running:
                other = self._running[visitor]
                raise GlassboxError(
                    f"{other.what} is still running for you ({other.elapsed:.0f} s so far): one long "
                    "computation at a time. Wait for it, or cancel it."
                )
            self._running[visitor] = work
        waiting_light = getattr(self._local, "light", False)
        if waiting_light:  # this request waits from now on: light work no more
            self._count_light(-1)
        try:
            with self.queue.admit(1, on_wait):
                if admitted is None:
                    return self._wait(work, compute, seconds, on_progress)
                with admitted():
                    return self._wait(work, compute, seconds, on_progress)
        finally:
            with self._lock:
                self._running.pop(visitor, None)
            if waiting_light:
                self._count_light(+1)

    def _wait(self, work: Work, compute: Callable[[], V], seconds: float, on_progress: Callable[[Work], None] | None) -> V:
        def on_lane() -> V:
            with working(work):
                return compute()

        work.estimate = seconds
        future: Future = self._pool.submit(on_lane)
        try:
            while True:
                try:
                    return future.result(timeout=POLL_S)
                except Pending:
                    if work.elapsed - work.paused > OVERRUN * self.max_seconds:
                        work.cancel(
                            f"{work.what} was stopped after {minutes(work.elapsed)}: past twice the "
                            f"{minutes(self.max_seconds)} a computation may take here (GLASSBOX_MAX_COMPUTE_S)."
                        )
                    if on_progress is not None:
                        on_progress(work)
        finally:
            if not future.done():
                work.cancel()  # the caller has gone (its page closed, reran or cancelled): stop at the next pass
                try:
                    future.result()  # within one pass: then its slot and memory are free
                except Cancelled:
                    pass
                except Exception:  # noqa: BLE001 (the caller's own exception is the one that counts)
                    pass
