"""Lesson 8, zero and one layer: the two smallest transformers, trained here (model/micro/).

With no block, a model's logits are W_E · W_U: each position predicts from its own token alone, so
the best it can learn is the corpus's bigram table. The bigram micro-model's table is set beside
the table counted from its training text. One block of attention heads (no MLP) adds, per head,
skip-trigrams "a … b → c" read from its QK and OV circuits; the validation losses say what the block
buys over the bigram table."""

from __future__ import annotations

from functools import cache

import torch

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
    ids = list(dict.fromkeys(counted.topk(k).indices.tolist() + model.topk(k).indices.tolist()))[:k + k // 2]
    return [(i, float(counted[i]), float(model[i])) for i in ids]


def frequent(loaded: LoadedModel, k: int = 40) -> list[int]:
    """The corpus's k most frequent tokens (the pickers' choices)."""
    return attention_only.frequent_tokens(story_tokens(bigram.N_STORIES, bigram.SEED)[1], loaded.cfg.vocab_size, k)


def losses(zero: LoadedModel, one: LoadedModel) -> dict:
    """Both micro-models' validation loss on the same held-out windows, and the floor no bigram
    model beats (the counted table's conditional entropy on the training text)."""
    val = story_tokens(bigram.N_STORIES, bigram.SEED)[2]
    return {"zero_layer": attention_only.validation_loss(zero.model, val),
            "one_layer": attention_only.validation_loss(one.model, val),
            "bigram_floor": bigram.compare(corpus_counts(zero.cfg.vocab_size), bigram.model_table(zero.model))[
                "conditional_entropy_nats"]}


def curves(zero: LoadedModel, one: LoadedModel) -> dict:
    return {"zero_layer": read_curve(zero.path), "one_layer": read_curve(one.path)}


def figures(loaded=None) -> dict:
    """The lesson's figures, on the shipped micro-models (``loaded``, the course's model, is not used)."""
    zero, one = load(BIGRAM), load(ONE_LAYER)
    return {"bigram": bigram.figures(zero), "one_layer": attention_only.figures(one), "losses": losses(zero, one)}
