"""One bounded cache of traces shared by every session."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable

from model.engine import Trace
from model.serving.sizing import trace_bytes


class TraceCache:
    """Traces by key, least recently used dropped first once they hold more than ``max_bytes``
    (the newest always stays). Thread-safe; the traces it hands out must not be modified."""

    def __init__(self, max_bytes: int = 3 * 2**30, max_entries: int = 16):
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self._traces: OrderedDict[Hashable, tuple[Trace, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], Trace]) -> Trace:
        with self._lock:
            if key in self._traces:
                self._traces.move_to_end(key)
                return self._traces[key][0]
        trace = compute()  # outside the lock: other sessions' cached traces stay available
        with self._lock:
            self._traces[key] = (trace, trace_bytes(trace))
            self._traces.move_to_end(key)
            while len(self._traces) > 1 and (len(self._traces) > self.max_entries or self.nbytes() > self.max_bytes):
                self._traces.popitem(last=False)
        return trace

    def nbytes(self) -> int:
        return sum(size for _, size in self._traces.values())

    def __len__(self) -> int:
        return len(self._traces)
