"""The lesson on induction heads, on the two-layer attention-only micro-model (model/micro/induction.py).

On a random sequence repeated once, the induction head in block 2 attends from each token of the
repeat to the token after that token's first occurrence: a stripe parallel to the diagonal, n − 1
positions back. It can, because the previous-token head in block 1 has written into each position
which token came before it. The checkpoints saved while training show when it forms."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from glassbox.model.analysis.circuits import random_tokens
from glassbox.model.course.exercises import Exercise, draw
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
    half = random_tokens(loaded.cfg.vocab_size, length, seed)
    trace = run_trace(loaded.model, half + half, names=["*hook_pattern", "hook_loss"])
    patterns = np.stack([trace[f"blocks.{i}.attn.hook_pattern"].double().numpy() for i in range(loaded.cfg.n_layers)])
    return Repeat(half + half, patterns, trace["hook_loss"].double().numpy())


def stripe_share(pattern: np.ndarray, n: int) -> float:
    """The mean weight the repeat's queries put on the token after their earlier occurrence."""
    return float(np.mean([pattern[t, t - n + 1] for t in range(n, 2 * n)]))


def split_losses(seen: Repeat, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each position's loss in three parts:

    - the n predictions with nothing to copy (the first copy's tokens after the first, and the
      second copy's first token, predicted before anything has repeated);
    - the one from the repeat's first position (n), predicting the second copy's second token: it
      is not copied (its loss is near a uniform guess on every seed, see ``first_repeat``);
    - the n − 2 copyable ones, from positions n + 1 … 2n − 2."""
    return seen.loss[:n], seen.loss[n : n + 1], seen.loss[n + 1 : 2 * n - 1]


def first_repeat(seen: Repeat, n: int, previous: dict, induction_head: dict) -> dict:
    """Why the repeat's first position cannot copy. Its token's earlier occurrence is at position
    0, which has no token before it: the previous-token head there can only look at itself, so it
    writes "the token before me was x" into position 0 as well as into position 1. The induction
    head's query then finds two keys that say x came before them and splits its weight between
    position 0 (whose value is x itself) and position 1 (the right one)."""
    prev = seen.patterns[previous["block"], previous["head"]]
    ind = seen.patterns[induction_head["block"], induction_head["head"]]
    return {
        "loss": float(seen.loss[n]),
        "previous_head_at_0_on_itself": float(prev[0, 0]),
        "induction_weight_on_0": float(ind[n, 0]),
        "induction_weight_on_1": float(ind[n, 1]),
    }


def composition(seen: Repeat, n: int, query: int, previous: dict, induction_head: dict) -> dict:
    """The two heads composing for one query of the repeat (n + 1 ≤ query ≤ 2n − 2): the token at
    ``query`` first occurred at ``query − n``; the previous-token head at the position after it
    (``key``) attends to it and writes it into ``key``'s stream; block 2's induction head, whose
    keys are read from that stream, attends from ``query`` to ``key`` and copies ``key``'s token,
    the next one of the repeat. Weights from the traced patterns; p is the model's probability of
    that next token (from the traced loss)."""
    key = query - n + 1
    prev = seen.patterns[previous["block"], previous["head"]]
    ind = seen.patterns[induction_head["block"], induction_head["head"]]
    return {
        "query": query,
        "key": key,
        "source": key - 1,
        "query_token": seen.tokens[query],
        "copied_token": seen.tokens[key],
        "previous_weight": float(prev[key, key - 1]),
        "induction_weight": float(ind[query, key]),
        "p_next": float(np.exp(-seen.loss[query])),
    }


def figures(loaded=None) -> dict:
    """The lesson's figures on the shipped micro-model (the course's model, ``loaded``, is not used)."""
    model = load(MODEL)
    seen = repeated(model, 0)
    n = LENGTH
    curve = read_curve(model.path)
    unseen, first, repeat = split_losses(seen, n)
    heads = induction.figures(model)
    why = first_repeat(seen, n, heads["previous_token_head"], heads["induction_head"])
    return heads | {
        "example": {
            "length": n,
            "stripe_share_block2": [stripe_share(p, n) for p in seen.patterns[-1]],
            "loss_nothing_to_copy": float(unseen.mean()),
            "loss_copyable": float(repeat.mean()),
            "copyable_tokens": [n + 2, 2 * n - 1],
            "uniform_guess": float(np.log(model.cfg.vocab_size)),
            "first_repeat": why,
        },
        "training_curve": {"score_step": curve["score_step"], "induction_score": curve["induction_score"]},
    }


# --- exercises ------------------------------------------------------------------------------


@cache  # one traced pass per sequence: a learner's seeds come back
def _repeat(seed: int, length: int) -> Repeat:
    return repeated(load(MODEL), seed, length)


def head_name(block: int, head: int) -> str:
    return f"block {block + 1}, head {head + 1}"


def exercises(seed: int, loaded=None) -> list[Exercise]:
    """Which head of the micro-induction model is the previous-token head, the key an induction head
    reads from a position of a repeat, and the induction score from a head's stripe weights (on the
    shipped micro-model; ``loaded`` is not used)."""
    rng = draw("induction", seed)
    model = load(MODEL)
    blocks, heads = model.cfg.n_layers, model.cfg.n_heads

    sequence_seed, n = int(rng.integers(0, 10**6)), int(rng.integers(8, 16))
    seen = _repeat(sequence_seed, n)
    previous = np.array(
        [[np.mean([seen.patterns[b, h, t, t - 1] for t in range(1, 2 * n)]) for h in range(heads)] for b in range(blocks)]
    )
    choices = tuple(head_name(b, h) for b in range(blocks) for h in range(heads))
    which_ex = Exercise(
        "which_head",
        f"The micro-induction model reads {n} random syllables and then the same {n} again. The "
        "induction head in block 2 needs another head to write into each position which token came before it. Which "
        "head is that previous-token head?",
        head_name(*np.unravel_index(int(previous.argmax()), previous.shape)),
        choices=choices,
        hint="It must run before the induction head, and it attends from each token to the one just before it.",
        solution="The mean weight each head puts on the position just before the query, on this sequence: "
        + "; ".join(f"{head_name(b, h)} {previous[b, h]:.3f}" for b in range(blocks) for h in range(heads))
        + ".",
        data={"model": MODEL, "sequence_seed": sequence_seed, "length": n},
    )

    n = int(rng.integers(5, 30))
    query = int(rng.integers(n + 2, 2 * n + 1))  # counted from 1: a position of the repeat after its first
    key = query - n + 1
    key_ex = Exercise(
        "key",
        f"A sequence of {n} distinct random tokens is followed by the same {n} tokens again (positions 1 to {2 * n}). "
        f"From position {query}, which position does an induction head attend to?",
        key,
        unit="position",
        hint="Find where the token at that position first occurred, then take the position after it.",
        solution=f"The token at position {query} first occurred at {query} − {n} = {query - n}; the token after it, at "
        f"{key}, is the one that comes next: the head attends to {key} and copies it.",
        data={"length": n, "query": query},
    )

    sequence_seed, n = int(rng.integers(0, 10**6)), 6
    seen = _repeat(sequence_seed, n)
    head = int(np.argmax([stripe_share(p, n) for p in seen.patterns[-1]]))  # block 2's likelier induction head
    stripe = [round(float(seen.patterns[-1, head, t, t - n + 1]), 3) for t in range(n, 2 * n)]
    score = float(np.mean(stripe))
    score_ex = Exercise(
        "score",
        f"Six random syllables repeated once (12 positions). From positions 7 to 12, {head_name(blocks - 1, head)} "
        f"puts these weights on the token after each token's first occurrence: {', '.join(f'{w:.3f}' for w in stripe)}. "
        "What is its induction score on this sequence? Answer to 2 decimals.",
        score,
        tolerance=5e-3,
        hint="The induction score is the mean of those weights over the repeat's positions.",
        solution=f"({' + '.join(f'{w:.3f}' for w in stripe)}) / {n} = {score:.4f}.",
        data={"weights": stripe, "model": MODEL, "sequence_seed": sequence_seed, "length": n, "block": blocks - 1, "head": head},
    )
    return [which_ex, key_ex, score_ex]
