"""What a trace holds and costs before it is computed, and what to capture when a full trace
would not fit: everything under the budget (one trace serves every view), else only what the
open view needs."""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import numpy as np

from model.engine import Target, Trace, Transformer, run_trace


@dataclass(frozen=True)
class Needs:
    """What a view reads from a trace: tensor name patterns, and whether it shows gradients."""

    names: tuple[str, ...]
    backward: bool = False


def trace_bytes(trace: Trace) -> int:
    return sum(t.nbytes for t in trace.held())


_probes: "weakref.WeakKeyDictionary[Transformer, tuple]" = weakref.WeakKeyDictionary()
_probing = threading.Lock()


def _probe(model: Transformer) -> tuple[tuple[float, float, float], list[str]]:
    """Every captured shape is constant, linear or quadratic (attention) in the length, so three
    short traces give the exact polynomial of a full trace's bytes, and its tensor names.
    Measured once per model object, one short trace at a time: each holds every parameter's
    gradient (GPT-2: 0.5 GB), and sixteen sessions arriving at once had probed side by side."""
    with _probing:
        if model not in _probes:
            lengths = [t for t in (1, 2, 3) if t <= model.cfg.n_ctx]
            sizes, names = [], None
            for length in lengths:
                trace = run_trace(model, [0] * length, backward=True, target=Target(0))
                sizes.append(trace_bytes(trace))
                names = names or trace.names()
                del trace  # before the next one
            coefficients = np.polyfit(lengths, sizes, len(lengths) - 1)[::-1]
            _probes[model] = (tuple(float(c) for c in coefficients) + (0.0,) * (3 - len(lengths)), names)
    return _probes[model]


def full_trace_bytes(model: Transformer, n_tokens: int) -> int:
    """Bytes of a trace with every tensor and every gradient, for ``n_tokens`` tokens."""
    a, b, c = _probe(model)[0]
    return int(round(a + b * n_tokens + c * n_tokens ** 2))


def trace_names(model: Transformer) -> list[str]:
    """The name of every tensor a full trace holds: activations, then gradients."""
    return list(_probe(model)[1])


def capture_plan(model: Transformer, n_tokens: int, needs: Needs, budget: int = 2 * 2**30
                 ) -> tuple[tuple[str, ...] | None, bool]:
    """(names, backward) for run_trace: everything, forward and backward, when that fits in
    ``budget`` bytes (one trace then serves every view); otherwise only what the open view needs."""
    if full_trace_bytes(model, n_tokens) <= budget:
        return None, True
    return needs.names, needs.backward
