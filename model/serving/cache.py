"""Bounded caches shared by every session: least recently used dropped first."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from glassbox.model.engine import Trace
from glassbox.model.serving.sizing import trace_bytes

V = TypeVar("V")


class BoundedCache(Generic[V]):
    """Values by key, least recently used dropped first once they hold more than ``max_bytes``
    (as ``size`` counts them) or number more than ``max_entries``. The newest stays even alone
    over ``max_bytes`` where ``newest_stays`` (a model: else it would load on every request);
    otherwise a value larger than ``max_bytes`` is handed out and not kept. Thread-safe. A value is computed once even when several sessions ask for it at once (they
    wait for the first); other keys stay available meanwhile. Values handed out must not be
    modified."""

    def __init__(self, size: Callable[[V], int], max_bytes: int, max_entries: int, newest_stays: bool = True):
        self.size, self.max_bytes, self.max_entries = size, max_bytes, max_entries
        self.newest_stays = newest_stays
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0  # the sizes of _items, kept as they change: read without the lock
        self._computing: dict[Hashable, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], V], waiting: Callable[[], None] | None = None) -> V:
        """The value of ``key``, computed once. A call that finds another computing it waits, and
        calls ``waiting()`` every second meanwhile (an exception it raises ends the wait)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
            key_lock = self._computing.setdefault(key, threading.Lock())
        while not key_lock.acquire(timeout=1.0):
            if waiting is not None:
                waiting()
        try:
            with self._lock:
                if key in self._items:  # computed while this call waited
                    self._items.move_to_end(key)
                    return self._items[key][0]
            value = compute()  # outside the main lock: other keys stay available
            size = self.size(value)
            if size > self.max_bytes and not self.newest_stays:
                return value
            with self._lock:
                self._items[key] = (value, size)
                self._bytes += size
                while len(self._items) > 1 and (len(self._items) > self.max_entries or self._bytes > self.max_bytes):
                    self._bytes -= self._items.popitem(last=False)[1][1]
            return value
        finally:
            with self._lock:
                self._computing.pop(key, None)
            key_lock.release()

    def clear(self) -> None:
        """Drop every value (those still in use elsewhere live on there)."""
        with self._lock:
            items, self._items, self._bytes = self._items, OrderedDict(), 0
        del items  # outside the lock: dropping a value may run its finalizers

    def keys(self) -> list[Hashable]:
        """Oldest first."""
        with self._lock:
            return list(self._items)

    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)


class TraceCache(BoundedCache[Trace]):
    """Traces by (model, prompt, target, capture): a trace depends on nothing else. One larger
    than the whole cache is not kept."""

    def __init__(self, max_bytes: int = 3 * 2**30, max_entries: int = 16):
        super().__init__(trace_bytes, max_bytes, max_entries, newest_stays=False)
