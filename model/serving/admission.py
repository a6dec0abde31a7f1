"""Model passes in flight, admitted against a memory budget, so that many visitors at once
cannot take the server past its memory: a request waits, first come first served, until the
bytes in flight plus what the trace cache keeps plus its own fit. A request larger than the
whole budget is refused before it waits (sizing.check_budget says how many tokens would fit).

What a pass costs while it is computed is what it keeps plus its working memory (sizing.py).
Once computed, a trace counts only while the trace cache keeps it (``kept``): the cache is
bounded and lets go of everything when a request has to wait (``on_pressure``). A finished
trace a page still holds is never waited for: a page comparing two prompts holds the first
while the second is admitted, and a wait on the first would never end.

A wait is bounded (``max_wait`` seconds, then a GlassboxError saying the server is busy) and
checked every second: ``on_wait`` is called then, and a page's call raises when its session
has gone or the visitor asked for something else, which takes the request out of the queue
(a ``finally``: no ticket outlives its request).

A budget counts bytes; the server's resident memory follows it only if freed tensors go back
to the operating system. glibc keeps blocks under its mmap threshold (which it raises to 32 MB
as big blocks are freed) in its heaps, where a trace's hundreds of 1–30 MB tensors fragment
them: 16 sessions took the server to 17.6 GiB under a 10.4 GiB budget. ``return_freed_memory``
fixes the threshold at 1 MiB: 9.5 GiB under a 10.3 GiB budget (`python -m app.bench.load --sessions 16`).
It applies to the whole process, for good; each freed block of 1 MiB or more is then mapped
afresh when it is next needed.

Settings: ``GLASSBOX_TRACE_BUDGET_GB`` (default: half the memory available when the server
starts: free RAM, or the GPU's free memory); ``GLASSBOX_QUEUE_WAIT_S`` (default 120).
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from glassbox.model.engine import GlassboxError
from glassbox.model.io.guard import available_memory, gigabytes_setting, seconds_setting
from glassbox.model.serving.sizing import size_text

TRACE_BUDGET_GB = "GLASSBOX_TRACE_BUDGET_GB"
M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def return_freed_memory(threshold: int = 2**20) -> bool:
    """Have glibc map every block of ``threshold`` bytes or more on its own, so that freeing
    it returns it to the operating system at once (module docstring). For a server process;
    False where the C library is not glibc."""
    try:
        return ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, threshold) == 1
    except (OSError, AttributeError):
        return False


def default_budget(device: torch.device | None = None) -> int:
    budget = gigabytes_setting(TRACE_BUDGET_GB)
    return available_memory(device) // 2 if budget is None else budget


QUEUE_WAIT_S = "GLASSBOX_QUEUE_WAIT_S"
DEFAULT_QUEUE_WAIT_S = 120.0
HEARTBEAT_S = 1.0  # how often a waiting request looks again, and tells its page


def default_max_wait() -> float:
    return seconds_setting(QUEUE_WAIT_S, DEFAULT_QUEUE_WAIT_S)


class Admission:
    def __init__(
        self,
        budget: int,
        on_pressure: Callable[[], None] | None = None,
        kept: Callable[[], int] | None = None,
        max_wait: float | None = None,
    ):
        self.budget = budget
        self.on_pressure = on_pressure  # let go of finished traces (the app: empty the trace cache)
        self.kept = kept or (lambda: 0)  # bytes of finished traces still counted (the trace cache's)
        self.max_wait = default_max_wait() if max_wait is None else max_wait
        self.in_flight = 0  # bytes of passes being computed
        self.running = 0
        self._queue: deque[int] = deque()  # tickets waiting, first come first served
        self._tickets = itertools.count()
        self._changed = threading.Condition()

    def _fits(self, ticket: int, nbytes: int) -> bool:
        return self._queue[0] == ticket and self.in_flight + self.kept() + nbytes <= self.budget

    def _unlocked(self, call: Callable[[], None]) -> None:
        """Run ``call`` without the lock: finalizers and page updates may take other locks."""
        self._changed.release()
        try:
            call()
        finally:
            self._changed.acquire()

    @contextmanager
    def admit(self, nbytes: int, on_wait: Callable[[int, float, float], None] | None = None) -> Iterator[None]:
        """Hold ``nbytes`` of the budget for the block. While waiting, ``on_wait(ahead, waited,
        max_wait)`` is called every second (``ahead``: requests before this one, running ones
        included); an exception it raises ends the wait. A GlassboxError past ``max_wait``
        seconds, or at once for more than the whole budget."""
        if nbytes > self.budget:
            raise GlassboxError(
                f"This needs {size_text(nbytes)} while it is computed; the server allows "
                f"{size_text(self.budget)} for all traces at once (GLASSBOX_TRACE_BUDGET_GB)."
            )
        started = time.monotonic()
        with self._changed:
            ticket = next(self._tickets)
            self._queue.append(ticket)
            try:
                while not self._fits(ticket, nbytes):
                    first = self._queue[0] == ticket
                    if first and self.kept() and self.in_flight + nbytes <= self.budget and self.on_pressure:
                        self._unlocked(self.on_pressure)  # only when letting go of the cache lets it in
                        if self._fits(ticket, nbytes):
                            break
                    waited = time.monotonic() - started
                    if waited >= self.max_wait:
                        raise GlassboxError(
                            f"The server is busy: {self._ahead(ticket)} requests were still ahead of "
                            f"this one after {self.max_wait:.0f} s. Try again in a minute."
                        )
                    if on_wait is not None:
                        ahead = self._ahead(ticket)
                        self._unlocked(lambda: on_wait(ahead, waited, self.max_wait))  # noqa: B023 (called now)
                    self._changed.wait(min(HEARTBEAT_S, self.max_wait - waited))
            finally:
                self._queue.remove(ticket)  # admitted, timed out, or its page gone
                self._changed.notify_all()  # the next in line may fit now
            self.in_flight += nbytes
            self.running += 1
        try:
            yield
        finally:
            with self._changed:
                self.in_flight -= nbytes
                self.running -= 1
                self._changed.notify_all()

    def _ahead(self, ticket: int) -> int:
        return self._queue.index(ticket) + self.running

    def waiting(self) -> int:
        with self._changed:
            return len(self._queue)
