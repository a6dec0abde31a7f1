"""Traces in flight, admitted against a memory budget, so that many visitors at once cannot
take the server past its memory: a request waits, first come first served, until the bytes
in flight plus its own fit; one larger than the whole budget waits until nothing else runs
and then runs alone. A waiting request is told how many are ahead of it.

What a trace costs while it is computed is its captured bytes (sizing.py, exact) times
WORKING_FACTOR: the autograd graph's saved tensors come on top of what the trace keeps. Once
computed, the trace's own bytes stay counted for as long as the trace lives (a page drawing
it, the trace cache keeping it), and are released when it is garbage collected: a finished
trace takes memory as surely as one being computed (16 sessions drawing their traces at once
took this 2-core machine to 21 GiB before they were counted). A request that has to wait
first asks ``on_pressure`` (the app: empty the trace cache) to let go of finished traces.
`python -m model bench` measured the peak rise of resident memory during a traced backward
at 1.46× (T = 128) and 1.23× (T = 512) the trace's bytes on a GPT-2-small shape.

A budget counts bytes; the server's resident memory follows it only if freed tensors go back
to the operating system. glibc keeps blocks under its mmap threshold (which it raises to 32 MB
as big blocks are freed) in its heaps, where a trace's hundreds of 1–30 MB tensors fragment
them: 16 sessions took the server to 17.6 GiB under a 10.4 GiB budget. ``return_freed_memory``
fixes the threshold at 1 MiB: 9.5 GiB under a 10.3 GiB budget (`python -m app.load --sessions 16`).
It applies to the whole process, for good; each freed block of 1 MiB or more is then mapped
afresh when it is next needed.

Setting: ``GLASSBOX_TRACE_BUDGET_GB`` (default: half the memory available when the server
starts: free RAM, or the GPU's free memory).
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import weakref
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import torch

from model.io.guard import gigabytes_setting

TRACE_BUDGET_GB = "GLASSBOX_TRACE_BUDGET_GB"
WORKING_FACTOR = 1.5
M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def return_freed_memory(threshold: int = 2**20) -> bool:
    """Have glibc map every block of ``threshold`` bytes or more on its own, so that freeing
    it returns it to the operating system at once (module docstring). For a server process;
    False where the C library is not glibc."""
    try:
        return ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, threshold) == 1
    except (OSError, AttributeError):
        return False


def available_memory(device: torch.device | None = None) -> int:
    """Free memory now: the GPU's (cuda) or MemAvailable from /proc/meminfo (else total RAM)."""
    if device is not None and device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    from model.io.guard import physical_memory

    return physical_memory()


def default_budget(device: torch.device | None = None) -> int:
    budget = gigabytes_setting(TRACE_BUDGET_GB)
    return available_memory(device) // 2 if budget is None else budget


class Admission:
    def __init__(self, budget: int, on_pressure: Callable[[], None] | None = None):
        self.budget = budget
        self.on_pressure = on_pressure
        self.in_flight = 0  # bytes admitted or held and not yet released
        self.running = 0
        self._queue: deque[int] = deque()  # tickets waiting, first come first served
        self._tickets = itertools.count()
        self._changed = threading.Condition()

    def _fits(self, ticket: int, nbytes: int) -> bool:
        return self._queue[0] == ticket and (self.in_flight == 0 or self.in_flight + nbytes <= self.budget)

    @contextmanager
    def admit(self, nbytes: int, on_wait: Callable[[int], None] | None = None) -> Iterator[Callable[[object, int], None]]:
        """Hold ``nbytes`` of the budget for the block. While waiting, ``on_wait(n)`` is told how
        many requests are ahead (running ones included) whenever that changes. The block gets
        ``keep(result, kept_bytes)``: hold ``kept_bytes`` on after the block, until ``result`` is
        garbage collected."""
        pressed = False
        with self._changed:
            ticket = next(self._tickets)
            self._queue.append(ticket)
            told = None
            while not self._fits(ticket, nbytes):
                if not pressed and self.on_pressure is not None:
                    pressed = True
                    self._changed.release()  # let go of finished traces without holding the lock:
                    try:  # their finalizers take it, possibly from threads that hold other locks
                        self.on_pressure()
                    finally:
                        self._changed.acquire()
                    continue
                ahead = self._queue.index(ticket) + self.running
                if on_wait is not None and ahead != told:
                    on_wait(ahead)
                    told = ahead
                self._changed.wait()
            self._queue.popleft()
            self.in_flight += nbytes
            self.running += 1
            self._changed.notify_all()  # the next in line may fit too
        try:
            yield self._keep
        finally:
            with self._changed:
                self.in_flight -= nbytes
                self.running -= 1
                self._changed.notify_all()

    def _keep(self, result: object, nbytes: int) -> None:
        with self._changed:
            self.in_flight += nbytes
        weakref.finalize(result, self._release, nbytes)

    def _release(self, nbytes: int) -> None:
        with self._changed:
            self.in_flight -= nbytes
            self._changed.notify_all()

    def waiting(self) -> int:
        with self._changed:
            return len(self._queue)
