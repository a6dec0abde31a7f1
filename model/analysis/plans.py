"""The passes each long analysis will make, before it runs: with a pass time measured on the
server (model/serving/compute.py's PassClock), what it will cost in time. Each pass is counted
by the engine when it runs (model/engine/work.py).

A ``Plan`` is the passes an analysis makes and the sequence-tokens they carry, all passes
together: those of plain forward passes, and those of passes with a backward.

Each analysis's plan mirrors its loops (tests/test_compute_bounds.py holds every ``passes`` to
the engine's count of the real run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from glassbox.model.analysis.batches import per_pass


@dataclass(frozen=True)
class Plan:
    what: str
    passes: int  # model passes: the engine counts each one (work.py)
    tokens: int  # sequence-tokens through the whole model in plain forward passes, all together
    backward_tokens: int  # … and in passes followed by a backward
    length: int  # the prompt's length, for the pass time

    def __add__(self, other: Plan) -> Plan:
        return Plan(
            self.what,
            self.passes + other.passes,
            self.tokens + other.tokens,
            self.backward_tokens + other.backward_tokens,
            max(self.length, other.length),
        )


def path_patching(cfg, n_tokens: int, receiver_input: str, shared: int = 0) -> Plan:
    """The ``shared`` first positions once (``path_patching.shared_prefix``), two runs; then per
    sender with a later receiver, one pass from its block keeping the receivers' inputs, and per
    later block one batch of its receivers from that block (path_patching.py). Each pass is
    counted over the whole prompt: after shared positions it computes fewer, but copies their keys
    and values into its batch, which for a long shared prefix costs more than the positions it
    computes; so this overestimates prompts that share positions, never underestimates."""
    n_receiving = cfg.n_heads if receiver_input == "q" else cfg.n_kv_heads
    per_block = cfg.n_heads + (0 if cfg.attn_only else 1)
    rest = n_tokens
    L, passes, tokens = cfg.n_layers, 2 + bool(shared), shared + 2 * rest
    for block in range(L - 1):  # the last block's senders have no later receiver
        receiving = sum(n_receiving * (L - b) / L for b in range(block + 1, L))  # the share of the blocks each runs
        passes += per_block * (1 + L - 1 - block)
        tokens += per_block * round(rest * (L - block) / L + receiving * rest)
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
    return Plan(
        "Integrated gradients",
        1 + baseline + math.ceil(steps / per_pass(n_tokens)) + 2,
        n_tokens * (1 + baseline + 2),
        n_tokens * steps,
        n_tokens,
    )


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
