"""What a long computation will cost in time, before it starts: the passes it will make (each
counted by the engine when it runs, model/engine/work.py) and a measured pass time on this
server. The memory side of the same question is sizing.py.

A ``Plan`` is the passes an analysis makes and the sequence-tokens they carry, all passes
together: those of plain forward passes, and those of passes with a backward. ``PassClock``
times the model itself, once per model and prompt length (rounded up to a power of two): a
forward pass of one sequence and of a small batch give ``seconds = a + b × tokens``, and the
batch's forward and backward (every weight's gradient, a training step's) gives how many
forwards a backward pass costs, ``r``; the fastest of a few tries each. So an estimate is
``passes × a + (tokens + r × backward_tokens) × b``, from this server's own speed, not a table.

Each analysis's plan mirrors its loops (tests/test_compute.py holds every ``passes`` to the
engine's count of the real run).
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from dataclasses import dataclass

import torch

from glassbox.model.analysis.batches import per_pass
from glassbox.model.engine import Transformer

@dataclass(frozen=True)
class Plan:
    what: str
    passes: int  # model passes: the engine counts each one (work.py)
    tokens: int  # sequence-tokens through the whole model in plain forward passes, all together
    backward_tokens: int  # … and in passes followed by a backward
    length: int  # the prompt's length, for the pass time

    def __add__(self, other: "Plan") -> "Plan":
        return Plan(self.what, self.passes + other.passes, self.tokens + other.tokens,
                    self.backward_tokens + other.backward_tokens, max(self.length, other.length))


def path_patching(cfg, n_tokens: int, receiver_input: str) -> Plan:
    """Two whole runs; then per sender with a later receiver, one pass from its block keeping the
    receivers' inputs and one batch of its receivers from the next block (path_patching.py)."""
    n_receiving = cfg.n_heads if receiver_input == "q" else cfg.n_kv_heads
    per_block = cfg.n_heads + (0 if cfg.attn_only else 1)
    L, passes, tokens = cfg.n_layers, 2, 2 * n_tokens
    for block in range(L - 1):  # the last block's senders have no later receiver
        later = (L - 1 - block) * n_receiving
        share_from, share_next = (L - block) / L, (L - block - 1) / L  # the blocks each pass runs
        passes += 2 * per_block
        tokens += per_block * round(n_tokens * share_from + later * n_tokens * share_next)
    return Plan("Path patching", passes, tokens, 0, n_tokens)


def head_catalog(lengths: list[int]) -> Plan:
    """One pass per text (head_catalog.py)."""
    return Plan("The head catalog", len(lengths), sum(lengths), 0, max(lengths, default=1))


def patching(cfg, n_tokens: int, site: str) -> Plan:
    """The clean run, every patch in batches of ``per_pass``, and attribution patching's forward
    and backward on the corrupted run (patching.py)."""
    width = {"resid_pre": n_tokens, "head": cfg.n_heads}.get(site, 1)
    patches = cfg.n_layers * width
    batches = math.ceil(patches / per_pass(n_tokens))
    return Plan("Patching", 2 + batches, n_tokens * (1 + patches), n_tokens, n_tokens)


def attribution(n_tokens: int, method: str, steps: int, baseline: bool) -> Plan:
    """The embeddings' pass; then integrated gradients' points in batches, each forward and
    backward, and the two ends' logits; or one forward and backward (attribution.py)."""
    if method == "attention_rollout":
        return Plan("Attribution", 3, 3 * n_tokens, 0, n_tokens)
    if method != "integrated_gradients":
        return Plan("Attribution", 2, n_tokens, n_tokens, n_tokens)
    return Plan("Integrated gradients", 1 + baseline + math.ceil(steps / per_pass(n_tokens)) + 2,
                n_tokens * (1 + baseline + 2), n_tokens * steps, n_tokens)


def training(steps: int, batch: int, n_tokens: int) -> Plan:
    """``steps`` forward and backward passes of ``batch`` sequences of ``n_tokens``."""
    return Plan("Training", steps, 0, batch * n_tokens * steps, n_tokens)


def forwards(passes: int, batch: int, n_tokens: int) -> Plan:
    """``passes`` plain passes of ``batch`` sequences (a training run's evaluations)."""
    return Plan("Evaluation", passes, passes * batch * n_tokens, 0, n_tokens)


def train_it_live(steps: int, batch: int, n_tokens: int, example_tokens: int) -> Plan:
    """Train it live's run (lesson/training.py's ``train_copy``): each step a forward and backward
    of the batch and the example's forward (its p(target)), then both once more after the last."""
    return training(steps, batch, n_tokens) + forwards(steps + 1, 1, example_tokens) + forwards(1, batch, n_tokens)


class PassClock:
    """Seconds a pass takes on this server, measured on the model itself once per model and
    length bucket (thread-safe; the numbers are kept as long as the model is)."""

    def __init__(self):
        self._fits: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def fit(self, model: Transformer, n_tokens: int) -> tuple[float, float, float]:
        """(a, b, r): a forward pass of ``t`` sequence-tokens at about this length takes a + b·t
        seconds, and with its backward about r times its b·t."""
        length = min(1 << max(0, math.ceil(math.log2(max(n_tokens, 1)))), model.cfg.n_ctx)
        with self._lock:
            fits = self._fits.setdefault(model, {})
            if length not in fits:
                fits[length] = _measure(model, length)
            return fits[length]

    def seconds(self, model: Transformer, plan: Plan) -> float:
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
