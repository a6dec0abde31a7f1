"""The MLP's neurons: which are active, which write most, which are dead (no gradient)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from model.analysis.architecture import require
from model.engine import GRAD, ModelConfig, Trace, Transformer


def active(trace: Trace, cfg: ModelConfig, layer: int) -> torch.Tensor:
    """(positions, neurons) booleans: the neuron passes signal. ReLU: output > 0; smooth
    activations (GELU, SiLU) have no exact off: pre-activation > 0."""
    require(cfg, mlp=True)
    p = f"blocks.{layer}.mlp."
    return trace[p + "hook_post"] > 0 if cfg.activation == "relu" and not cfg.gated_mlp else trace[p + "hook_pre"] > 0


@dataclass(frozen=True)
class Neuron:
    index: int
    pre: float
    post: float
    write: float  # |post| × ‖W_out[n]‖: the size of what it adds to the residual stream


def top_neurons(model: Transformer, trace: Trace, layer: int, position: int, k: int = 10) -> list[Neuron]:
    """The neurons that write most into the residual stream at ``position``."""
    require(model.cfg, mlp=True)
    p = f"blocks.{layer}.mlp."
    pre, post = trace[p + "hook_pre"][position], trace[p + "hook_post"][position]
    write = post.abs() * model.blocks[layer].mlp.W_out.detach().norm(dim=1)
    order = write.argsort(descending=True)[:k]
    return [Neuron(int(n), float(pre[n]), float(post[n]), float(write[n])) for n in order]


@dataclass(frozen=True)
class Dead:
    neurons: np.ndarray  # indices of neurons off at every position of the prompt
    zero_grad_fraction: float  # of ∂L/∂pre entries that are exactly 0
    off_fraction: float  # of (position, neuron) pairs that are off
    weight_grad_max: float  # max |∂L/∂W_in| over the dead neurons' columns: exactly 0 for ReLU


def dead_neurons(trace: Trace, cfg: ModelConfig, layer: int) -> Dead:
    """ReLU passes no gradient where it is off; a neuron off at every position gets no
    gradient at all, so its W_in column and bias get none either."""
    p = f"blocks.{layer}.mlp."
    off = ~active(trace, cfg, layer)
    dead = off.all(0).nonzero()[:, 0]
    grad_pre = trace[GRAD + p + "hook_pre"]
    W_in = trace.grads.get(GRAD + p + ("W_gate" if cfg.gated_mlp else "W_in"))
    weight_max = float(W_in[:, dead].abs().max()) if W_in is not None and len(dead) else 0.0
    return Dead(dead.cpu().numpy(), float((grad_pre == 0).double().mean()), float(off.double().mean()), weight_max)
