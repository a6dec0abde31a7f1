"""Lesson 10, mixture of experts, on the MoE micro-model trained twice (model/micro/moe.py): with the
load-balancing loss and without it.

A router scores each position against 8 experts (x · W_router), keeps the top 2 and mixes their
outputs with the renormalised softmax weights. On a prompt, the lesson shows each token's two
experts and weights per block, and the balance loss N · Σ f_i · P_i written out from that prompt's
routing; over training, each expert's share of the routed token-slots in both runs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.data.stories import corpus
from glassbox.model.engine import check_prompt, load_balancing_loss, variant
from glassbox.model.io.checkpoint import LoadedModel, load
from glassbox.model.micro import moe
from glassbox.model.micro.common import read_curve

BALANCED, UNBALANCED = "micro-moe", "micro-moe" + moe.UNBALANCED
PROMPT = "the cat sat on the mat and the dog ran to the park"


@dataclass
class Routing:
    tokens: list[int]
    probs: np.ndarray  # (block, position, expert): the router's softmax
    weights: np.ndarray  # (block, position, expert): the weight each expert's output gets (0: not chosen, or dropped)
    top_k: int = 2  # experts per position
    capacity: int | None = None  # the most positions an expert takes (None: no capacity factor)

    @property
    def chosen(self) -> np.ndarray:
        """(block, position, expert): the router's top_k at each position."""
        top = np.argsort(-self.probs, axis=-1, kind="stable")[..., :self.top_k]
        chosen = np.zeros_like(self.probs, dtype=bool)
        np.put_along_axis(chosen, top, True, axis=-1)
        return chosen

    @property
    def dropped(self) -> np.ndarray:
        """(block, position, expert): chosen, but over the expert's capacity, so its weight is 0."""
        return self.chosen & (self.weights == 0)


def route(loaded: LoadedModel, tokens: list[int], capacity_factor: float | None = None) -> Routing:
    """Every block's routing of ``tokens``; with a capacity factor C, as GShard caps each expert at
    ceil(C · positions · k / experts) positions (the same weights: ``variant``)."""
    check_prompt(loaded.cfg, tokens)
    model = loaded.model if capacity_factor is None else variant(loaded.model, expert_capacity=capacity_factor)
    seen = moe.routing(model, tokens)
    blocks = range(loaded.cfg.n_layers)
    capacity = None if capacity_factor is None else math.ceil(
        capacity_factor * len(tokens) * loaded.cfg.experts_top_k / loaded.cfg.n_experts)
    return Routing(tokens, np.stack([seen[f"blocks.{i}.mlp.hook_router_probs"].double().numpy() for i in blocks]),
                   np.stack([seen[f"blocks.{i}.mlp.hook_expert_weights"].double().numpy() for i in blocks]),
                   loaded.cfg.experts_top_k, capacity)


def sentences() -> list[str]:
    """Story sentences for the page's Route button: the corpus's generator, with another seed than
    the training text's."""
    return [s.strip() + "." for story in corpus(40, seed=12345) for s in story.split(".") if 4 < len(s.split()) < 14]


def balance_terms(routing: Routing, block: int, top_k: int) -> dict:
    """The balance loss of one block on one prompt, term by term: f_i (the share of positions that
    chose expert i among their top_k), P_i (expert i's mean router probability), N · Σ f_i · P_i."""
    probs = routing.probs[block]
    n = probs.shape[-1]
    f = routing.chosen[block].sum(0) / probs.shape[0]
    P = probs.mean(0)
    loss = float(load_balancing_loss(torch.from_numpy(probs), top_k))
    return {"f": f.tolist(), "P": P.tolist(), "N": n, "loss": loss}


def share_curves(loaded: LoadedModel) -> np.ndarray:
    """(step, block, expert): each expert's share of the token-slots at each training step."""
    return np.array(read_curve(loaded.path)["shares"])


def running_mean(curves: np.ndarray, window: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """(steps, means): the mean of each column of ``curves`` (step, …) over the ``window`` steps
    ending at each step from ``window`` on (fewer steps than that: one mean of them all); steps
    counted from 1."""
    window = min(window, len(curves))
    sums = np.cumsum(np.concatenate([np.zeros_like(curves[:1]), curves]), axis=0)
    return np.arange(window, len(curves) + 1), (sums[window:] - sums[:-window]) / window


def figures(loaded=None) -> dict:
    """Both runs' figures (the course's model, ``loaded``, is not used)."""
    balanced = load(BALANCED)
    routing = route(balanced, balanced.encode(PROMPT))
    return moe.figures(balanced) | {"prompt": PROMPT,
                                    "balance_terms_block1": balance_terms(routing, 0, balanced.cfg.experts_top_k)}
