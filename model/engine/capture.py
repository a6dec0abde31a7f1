"""Per-call capture of named intermediate tensors.

The forward pass calls ``hook(name, tensor)`` at every point worth seeing. Outside a
``capture()`` block that call returns its argument and does nothing else, so the plain
forward stays plain. Inside one, the tensor is recorded under its name.

The active recorders live in a ``contextvars.ContextVar``, not on the model: each thread
(each browser session) sees only its own, nothing is registered on modules, and nothing is
left behind when the block ends. That is what lets one model object serve many callers at once.

Blocks nest: a tensor passes through every active recorder's ``edit`` (outermost first: nested
edits compose), then every one's ``record`` sees what the pass goes on with. So a trace taken
inside ``editing`` (model/engine/edits.py) is a trace of the edited model.
"""

from __future__ import annotations

import contextvars
import fnmatch
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch

_active: contextvars.ContextVar[tuple[Recorder, ...] | None] = contextvars.ContextVar(
    "glassbox_recorder", default=None
)  # the active recorders, outermost first; None outside every capture


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
        self.parameters: dict[str, torch.Tensor] = {}  # offloaded weights as the pass used them (placement.py)
        self._wanted: dict[str, bool] = {}

    def wants(self, name: str) -> bool:
        if name not in self._wanted:
            self._wanted[name] = matches(name, self.patterns)
        return self._wanted[name]

    def edit(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """What the pass goes on with instead of ``tensor`` (an Editor's edit); a plain
        recorder changes nothing."""
        return tensor

    def record(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """Keep ``tensor`` under ``name``; the forward pass goes on with what this returns (the
        tensor itself: a subclass may return another, as the tests do to perturb one)."""
        self.tensors[name] = tensor
        return tensor


def hook(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` edited and recorded under ``name`` by the active recorders that want it
    (every edit first, outermost first, then every record); returned."""
    recorders = _active.get()
    if recorders is None:  # a plain forward pass: nothing to edit or record (the hot path)
        return tensor
    wanting = [r for r in recorders if r.wants(name)]
    for recorder in wanting:
        tensor = recorder.edit(name, tensor)
    for recorder in wanting:
        tensor = recorder.record(name, tensor)
    return tensor


def used_parameter(name: str, parameter: torch.Tensor) -> None:
    """A weight that exists only during its block's forward (a block offloaded to the disk,
    placement.py), as this pass uses it: every active recorder keeps it, so that a gradient can
    be taken with respect to it."""
    for recorder in _active.get() or ():
        recorder.parameters[name] = parameter


def wants(name: str) -> bool:
    """True when an active capture records (or edits) ``name``.

    The forward pass asks this before computing tensors it would not otherwise need
    (explicit attention weights, each head's separate output).
    """
    recorders = _active.get()
    return recorders is not None and any(r.wants(name) for r in recorders)


def sparse_embedding() -> bool:
    """True inside a capture whose innermost recorder takes the embedding's gradient sparse
    (run_trace's, which densifies it)."""
    recorders = _active.get()
    return bool(recorders and recorders[-1].sparse_embedding)


def matches(name: str, patterns: Iterable[str] | None) -> bool:
    """The one name filter: shell patterns (``fnmatch``), ``None`` matches everything. Used
    for captured tensors and, in run_trace, for the parameters whose gradients are kept."""
    return patterns is None or any(fnmatch.fnmatchcase(name, p) for p in patterns)


@contextmanager
def capture(patterns: Iterable[str] | None = None, recorder: Recorder | None = None) -> Iterator[Recorder]:
    """Record, for the duration of the block, the hooked tensors matching ``patterns`` (into
    ``recorder`` when one is given), inside whatever captures and edits are already active."""
    recorder = recorder or Recorder(patterns)
    token = _active.set((*(_active.get() or ()), recorder))
    try:
        yield recorder
    finally:
        _active.reset(token)
