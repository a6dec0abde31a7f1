"""The MLP's neurons: which are active, which write most, which are dead (no gradient). In a
mixture-of-experts block they are one expert's (or the shared expert's): ``expert`` picks the
unit (model/analysis/experts.py), and a routed expert counts only the positions routed to it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.analysis.architecture import require
from glassbox.model.analysis.experts import unit
from glassbox.model.engine import GRAD, ModelConfig, Trace, Transformer


def active(trace: Trace, cfg: ModelConfig, layer: int, expert: int | str | None = None) -> torch.Tensor:
    """(positions, neurons) booleans: the neuron passes signal. ReLU: output > 0; smooth
    activations (GELU, SiLU) have no exact off: pre-activation > 0. A routed expert's neurons are
    computed at every position; ``Unit.ran`` says where they count."""
    require(cfg, mlp=True)
    chosen = unit(cfg, layer, expert)
    relu = cfg.activation == "relu" and not cfg.gated_mlp
    return chosen.read(trace, "hook_post" if relu else "hook_pre") > 0


@dataclass(frozen=True)
class Neuron:
    index: int
    pre: float
    post: float
    write: float  # |post × scale| × ‖W_out[n]‖: the size of what it adds to the residual stream


def top_neurons(
    model: Transformer, trace: Trace, layer: int, position: int, k: int = 10, expert: int | str | None = None
) -> list[Neuron]:
    """The neurons that write most into the residual stream at ``position``; an expert's output
    is scaled by its weight there (0 where it was not chosen) and the shared expert's by its gate."""
    require(model.cfg, mlp=True)
    chosen = unit(model.cfg, layer, expert)
    pre, post = chosen.read(trace, "hook_pre")[position], chosen.read(trace, "hook_post")[position]
    scale = chosen.scale(trace)[position].to(post.dtype)
    write = (post * scale).abs() * chosen.parameter(model, "W_out").norm(dim=1)
    order = write.argsort(descending=True, stable=True)[:k]
    return [Neuron(int(n), float(pre[n]), float(post[n]), float(write[n])) for n in order]


@dataclass(frozen=True)
class Dead:
    neurons: np.ndarray  # indices of neurons off at every position of the prompt (an expert: that it ran on)
    zero_grad_fraction: float  # of ∂L/∂pre entries that are exactly 0 (at those positions)
    off_fraction: float  # of (position, neuron) pairs that are off (at those positions)
    weight_grad_max: float  # max |∂L/∂W_in| over the dead neurons' columns: exactly 0 for ReLU
    positions: int  # the positions counted: all, or those a routed expert ran on


def dead_neurons(trace: Trace, cfg: ModelConfig, layer: int, expert: int | str | None = None) -> Dead:
    """ReLU passes no gradient where it is off; a neuron off at every position gets no
    gradient at all, so its W_in column and bias get none either. A routed expert's neuron gets
    gradient only where the expert ran: it is dead when it is off at each of those positions
    (and every neuron of an expert that ran nowhere is)."""
    chosen = unit(cfg, layer, expert)
    ran = chosen.ran(trace, cfg)
    off = ~active(trace, cfg, layer, expert)[ran]
    dead = off.all(0).nonzero()[:, 0]
    grad_pre = chosen.read(trace, GRAD + "hook_pre")[ran]
    W_in = trace.grads.get(GRAD + chosen.prefix + ("W_gate" if cfg.gated_mlp else "W_in"))
    W_in = None if W_in is None else chosen.select(W_in)
    weight_max = float(W_in[:, dead].abs().max()) if W_in is not None and len(dead) else 0.0
    mean = lambda x: float(x.double().mean()) if x.numel() else 0.0  # noqa: E731 (an expert that ran nowhere)
    return Dead(dead.cpu().numpy(), mean(grad_pre == 0), mean(off), weight_max, int(ran.sum()))
