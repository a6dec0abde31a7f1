"""The lesson on zero and one layer: the two smallest transformers, trained here (model/micro/).

With no block, a model's logits are W_E · W_U: each position predicts from its own token alone, so
the best it can learn is the corpus's bigram table. The bigram micro-model's table is set beside
the table counted from its training text. One block of attention heads (no MLP) adds, per head,
skip-trigrams "a … b → c" read from its QK and OV circuits; the validation losses say what the block
buys over the bigram table."""

from __future__ import annotations

import math
from functools import cache

import torch

from glassbox.model.course.exercises import Exercise, draw
from glassbox.model.io.checkpoint import LoadedModel, load
from glassbox.model.micro import attention_only, bigram
from glassbox.model.micro.common import read_curve, story_tokens

BIGRAM, ONE_LAYER = "micro-bigram", "micro-attention-only"
TOP = 8  # continuations shown per token


@cache
def corpus_counts(vocab_size: int) -> torch.Tensor:
    """The bigram micro-model's training text, counted: [a, b] = how often b follows a."""
    return bigram.counted(story_tokens(bigram.N_STORIES, bigram.SEED)[1], vocab_size)


def continuations(loaded: LoadedModel, token: int, k: int = TOP) -> list[tuple[int, float, float]]:
    """The k likeliest next tokens after ``token`` by the corpus or by the zero-layer model (the
    union, the corpus's first), each with (id, counted probability, model probability)."""
    counts = corpus_counts(loaded.cfg.vocab_size)[token]
    counted = counts / counts.sum() if counts.sum() > 0 else counts
    model = bigram.model_table(loaded.model)[token]
    ids = list(dict.fromkeys(counted.topk(k).indices.tolist() + model.topk(k).indices.tolist()))[: k + k // 2]
    return [(i, float(counted[i]), float(model[i])) for i in ids]


def frequent(loaded: LoadedModel, k: int = 40) -> list[int]:
    """The corpus's k most frequent tokens (the pickers' choices)."""
    return attention_only.frequent_tokens(story_tokens(bigram.N_STORIES, bigram.SEED)[1], loaded.cfg.vocab_size, k)


def losses(zero: LoadedModel, one: LoadedModel) -> dict:
    """Both micro-models' validation loss on the same held-out windows, and the floor no bigram
    model beats (the counted table's conditional entropy on the training text)."""
    val = story_tokens(bigram.N_STORIES, bigram.SEED)[2]
    return {
        "zero_layer": attention_only.validation_loss(zero.model, val),
        "one_layer": attention_only.validation_loss(one.model, val),
        "bigram_floor": bigram.compare(corpus_counts(zero.cfg.vocab_size), bigram.model_table(zero.model))[
            "conditional_entropy_nats"
        ],
    }


def curves(zero: LoadedModel, one: LoadedModel) -> dict:
    return {"zero_layer": read_curve(zero.path), "one_layer": read_curve(one.path)}


def figures(loaded=None) -> dict:
    """The lesson's figures, on the shipped micro-models (``loaded``, the course's model, is not used)."""
    zero, one = load(BIGRAM), load(ONE_LAYER)
    return {"bigram": bigram.figures(zero), "one_layer": attention_only.figures(one), "losses": losses(zero, one)}


# --- exercises ------------------------------------------------------------------------------

WORDS = ("the", "cat", "sat", "on", "mat", "dog", "ran", "park")


def exercises(seed: int, loaded=None) -> list[Exercise]:
    """A bigram probability from a small count table, the loss the best zero-layer model pays for
    that pair, and the bigram micro-model's likeliest next token after a frequent token (``loaded``
    is not used)."""
    rng = draw("zero-one-layer", seed)

    words = [str(w) for w in rng.choice(WORDS, 3, replace=False)]
    counts = rng.integers(0, 13, (3, 3))
    counts[:, rng.integers(0, 3)] += 1  # no row of zeros
    a, b = (int(v) for v in rng.integers(0, 3, 2))
    while counts[a, b] == 0:
        b = (b + 1) % 3
    p = counts[a, b] / counts[a].sum()
    table = "; ".join(f"after {words[i]}: " + ", ".join(f"{words[j]} {counts[i, j]}" for j in range(3)) for i in range(3))
    asked = f"A corpus of three words is counted: {table}."
    probability_ex = Exercise(
        "bigram",
        f"{asked} What probability does the best zero-layer model give to “{words[b]}” after “{words[a]}”? Answer to 2 decimals.",
        float(p),
        tolerance=5e-3,
        hint="A zero-layer model can only learn the bigram table: each row's counts over the row's total.",
        solution=f"{counts[a, b]} / ({' + '.join(str(c) for c in counts[a])}) = {counts[a, b]} / {counts[a].sum()} = {p:.4f}.",
        data={"words": words, "counts": counts.tolist(), "current": a, "next": b},
    )
    loss_ex = Exercise(
        "bigram_loss",
        f"{asked} What loss (in nats) does that model pay each time “{words[b]}” follows “{words[a]}”? Answer to 2 decimals.",
        float(-math.log(p)),
        tolerance=5e-3,
        hint="The loss of one prediction is −ln of the probability given to the token that came.",
        solution=f"−ln({counts[a, b]} / {counts[a].sum()}) = −ln({p:.4f}) = {-math.log(p):.4f} nats.",
        data={"words": words, "counts": counts.tolist(), "current": a, "next": b},
    )

    model = load(BIGRAM)
    current = int(rng.choice(frequent(model, 12)))
    counted = corpus_counts(model.cfg.vocab_size)[current]
    offered = [int(t) for t in rng.permutation(counted.topk(4).indices.numpy())]  # the corpus's four commonest
    table = bigram.model_table(model.model)[current]
    best = max(offered, key=lambda t: float(table[t]))
    names = tuple(repr(model.pieces[t]) for t in offered)
    next_ex = Exercise(
        "likeliest",
        f"After the token {model.pieces[current]!r}, which of these does the bigram micro-model (zero layers) rate likeliest?",
        repr(model.pieces[best]),
        choices=names,
        hint="Its logits are W_E · W_U: the corpus's commonest continuation is what it learns to rate highest.",
        solution="The model's probabilities: "
        + ", ".join(f"{model.pieces[t]!r} {float(table[t]):.3f}" for t in offered)
        + "; the corpus's counts: "
        + ", ".join(f"{int(counted[t])}" for t in offered)
        + ".",
        data={"model": BIGRAM, "current": current, "offered": offered},
    )
    return [probability_ex, loss_ex, next_ex]
