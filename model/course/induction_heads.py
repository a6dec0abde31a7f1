"""Lesson 9, induction heads, on the two-layer attention-only micro-model (model/micro/induction.py).

On a random sequence repeated once, the induction head in block 2 attends from each token of the
repeat to the token after that token's first occurrence: a stripe parallel to the diagonal, n − 1
positions back. It can, because the previous-token head in block 1 has written into each position
which token came before it. The checkpoints saved while training show when it forms."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glassbox.model.engine import run_trace
from glassbox.model.io.checkpoint import LoadedModel, load
from glassbox.model.micro import induction
from glassbox.model.micro.common import read_curve

MODEL = "micro-induction"
LENGTH = 12  # the random sequence repeated once in the lesson's picture


@dataclass
class Repeat:
    tokens: list[int]  # the random half, then the same again
    patterns: np.ndarray  # (block, head, query, key)
    loss: np.ndarray  # each position's next-token loss (the last: NaN, it has no next token)


def repeated(loaded: LoadedModel, seed: int, length: int = LENGTH) -> Repeat:
    """A random sequence of ``length`` tokens (from ``seed``) repeated once, traced."""
    half = np.random.default_rng(seed).integers(0, loaded.cfg.vocab_size, length).tolist()
    trace = run_trace(loaded.model, half + half, names=["*hook_pattern", "hook_loss"])
    patterns = np.stack([trace[f"blocks.{i}.attn.hook_pattern"].double().numpy() for i in range(loaded.cfg.n_layers)])
    return Repeat(half + half, patterns, trace["hook_loss"].double().numpy())


def stripe_share(pattern: np.ndarray, n: int) -> float:
    """The mean weight the repeat's queries put on the token after their earlier occurrence."""
    return float(np.mean([pattern[t, t - n + 1] for t in range(n, 2 * n)]))


def split_losses(seen: Repeat, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The losses of the n predictions that cannot copy (the first copy's tokens after the first,
    and the second copy's first token) and of the n − 1 that can (the rest of the second copy)."""
    return seen.loss[:n], seen.loss[n:2 * n - 1]


def figures(loaded=None) -> dict:
    """The lesson's figures on the shipped micro-model (the course's model, ``loaded``, is not used)."""
    model = load(MODEL)
    seen = repeated(model, 0)
    n = LENGTH
    curve = read_curve(model.path)
    unseen, repeat = split_losses(seen, n)
    return induction.figures(model) | {
        "example": {"length": n, "stripe_share_block2": [stripe_share(p, n) for p in seen.patterns[-1]],
                    "loss_nothing_to_copy": float(unseen.mean()), "loss_copyable": float(repeat.mean())},
        "training_curve": {"score_step": curve["score_step"], "induction_score": curve["induction_score"]}}
