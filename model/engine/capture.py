"""Per-call capture of named intermediate tensors.

The forward pass calls ``hook(name, tensor)`` at every point worth seeing. Outside a
``capture()`` block that call returns its argument and does nothing else, so the plain
forward stays plain. Inside one, the tensor is recorded under its name.

The active recorder lives in a ``contextvars.ContextVar``, not on the model: each thread
(each browser session) sees only its own recorder, nothing is registered on modules, and
nothing is left behind when the block ends. That is what lets one model object serve
many callers at once.
"""

from __future__ import annotations

import contextvars
import fnmatch
from contextlib import contextmanager
from typing import Iterable, Iterator

import torch

_active: contextvars.ContextVar["Recorder | None"] = contextvars.ContextVar(
    "glassbox_recorder", default=None
)


class Recorder:
    """Collects the tensors of one forward pass whose names match ``patterns``.

    Patterns are shell-style (``fnmatch``): ``"blocks.0.*"``, ``"*hook_pattern"``.
    ``None`` records everything.
    """

    # run_trace's recorder asks for the embedding's gradient sparse (it densifies it; see
    # Transformer.forward); a training loop that captures keeps the dense one its optimizer reads
    sparse_embedding = False

    def __init__(self, patterns: Iterable[str] | None = None):
        self.patterns = None if patterns is None else tuple(patterns)
        self.tensors: dict[str, torch.Tensor] = {}
        self._wanted: dict[str, bool] = {}

    def wants(self, name: str) -> bool:
        if name not in self._wanted:
            self._wanted[name] = matches(name, self.patterns)
        return self._wanted[name]

    def record(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """Keep ``tensor`` under ``name``; the forward pass goes on with what this returns (the
        tensor itself: a subclass may return another, as the tests do to perturb one)."""
        self.tensors[name] = tensor
        return tensor


def hook(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """Record ``tensor`` under ``name`` if a capture is active and wants it; return it."""
    recorder = _active.get()
    if recorder is not None and recorder.wants(name):
        return recorder.record(name, tensor)
    return tensor


def wants(name: str) -> bool:
    """True when the active capture records ``name``.

    The forward pass asks this before computing tensors it would not otherwise need
    (explicit attention weights, each head's separate output).
    """
    recorder = _active.get()
    return recorder is not None and recorder.wants(name)


def sparse_embedding() -> bool:
    """True inside a capture whose recorder takes the embedding's gradient sparse (run_trace's)."""
    recorder = _active.get()
    return recorder is not None and recorder.sparse_embedding


def matches(name: str, patterns: Iterable[str] | None) -> bool:
    """The one name filter: shell patterns (``fnmatch``), ``None`` matches everything. Used
    for captured tensors and, in run_trace, for the parameters whose gradients are kept."""
    return patterns is None or any(fnmatch.fnmatchcase(name, p) for p in patterns)


@contextmanager
def capture(patterns: Iterable[str] | None = None, recorder: Recorder | None = None) -> Iterator[Recorder]:
    """Record, for the duration of the block, the hooked tensors matching ``patterns`` (into
    ``recorder`` when one is given)."""
    recorder = recorder or Recorder(patterns)
    token = _active.set(recorder)
    try:
        yield recorder
    finally:
        _active.reset(token)
