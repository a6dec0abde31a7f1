"""What a long computation will cost in time, before it starts: the passes it will make
(model/analysis/plans.py, each counted by the engine when it runs, model/engine/work.py) and a
pass time measured on this server. The memory side of the same question is sizing.py.

``PassClock`` times the model itself, once per model and prompt length (rounded up to a power
of two): a forward pass of one sequence and of a small batch give ``seconds = a + b × tokens``,
and the batch's forward and backward (every weight's gradient, a training step's) gives how
many forwards a backward pass costs, ``r``; the fastest of a few tries each. So a plan's
estimate is ``passes × a + (tokens + r × backward_tokens) × b``, from this server's own speed,
not a table.
"""

from __future__ import annotations

import math
import threading
import time
import weakref

import torch

from glassbox.model.engine import Transformer

REMEASURE_S = 300.0  # a fit older than this is measured again, and the faster of the two kept


class PassClock:
    """Seconds a pass takes on this server, measured on the model itself per model and length
    bucket (thread-safe; kept as long as the model is). A server measures while it serves, so a
    fit taken under load is slow: every ``REMEASURE_S`` it is measured again and the faster kept,
    so the estimate comes down to the server's own speed and stays there."""

    def __init__(self, remeasure_s: float = REMEASURE_S):
        self._fits: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self.remeasure_s = remeasure_s

    def fit(self, model: Transformer, n_tokens: int) -> tuple[float, float, float]:
        """(a, b, r): a forward pass of ``t`` sequence-tokens at about this length takes a + b·t
        seconds, and with its backward about r times its b·t."""
        length = min(1 << max(0, math.ceil(math.log2(max(n_tokens, 1)))), model.cfg.n_ctx)
        with self._lock:
            fits = self._fits.setdefault(model, {})
            if length not in fits or time.monotonic() - fits[length][1] > self.remeasure_s:
                fresh = _measure(model, length)
                kept = fits.get(length, (fresh, 0.0))[0]
                faster = min(kept, fresh, key=lambda fit: fit[0] + fit[1] * length)  # a forward of this length
                fits[length] = (faster, time.monotonic())
            return fits[length][0]

    def seconds(self, model: Transformer, plan) -> float:
        """The seconds ``plan`` (a Plan of model/analysis/plans.py) takes on ``model``."""
        a, b, r = self.fit(model, plan.length)
        return plan.passes * a + (plan.tokens + r * plan.backward_tokens) * b


def _measure(model: Transformer, length: int) -> tuple[float, float, float]:
    """One sequence, then a batch of ``k``, forward; then the batch forward and backward: the
    fastest of a few tries each (the first may pay for allocation)."""
    k = max(2, min(8, 4096 // length))
    ids = torch.zeros((k, length), dtype=torch.long, device=model.device)
    weights = [p for p in model.parameters() if p.requires_grad]

    def run(batch: int, backward: bool = False) -> None:
        with torch.set_grad_enabled(backward):
            if model.cfg.encoder_decoder:
                out = model(ids[:batch], ids[:batch], last_only=True)
            else:
                out = model(ids[:batch], last_only=True)
            if backward:  # into new tensors, never into the shared model's .grad
                torch.autograd.grad(out.logits.float().sum(), weights, allow_unused=True)

    def timed(batch: int, backward: bool = False) -> float:
        """The fastest of two tries, or of up to five while they take under 0.1 s together (a
        small model's pass is short enough for a stray pause to double it)."""
        best, spent, tries = math.inf, 0.0, 0
        while tries < 2 or (tries < 5 and spent < 0.1):
            start = time.perf_counter()
            run(batch, backward)
            took = time.perf_counter() - start
            best, spent, tries = min(best, took), spent + took, tries + 1
        return best

    one, many, trained = timed(1), timed(k), timed(k, backward=True)
    b = max(many - one, 0.0) / ((k - 1) * length)
    b = max(b, one / length / k)  # never 0: a pass of more tokens never costs nothing
    a = max(one - b * length, 0.0)
    return a, b, max((trained - a) / (b * k * length), 1.0)
