"""The feed-forward network: x W_in + b_in, an activation, then W_out (or a gated variant:
act(x W_gate) × (x W_in), e.g. SwiGLU). ``neurons`` is the hidden layer alone, shared with the
experts of a mixture of experts (moe.py), which are MLPs of their own weights."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from glassbox.model.engine.capture import hook
from glassbox.model.engine.config import ModelConfig


def activation(name: str, x: torch.Tensor) -> torch.Tensor:
    if name == "relu":
        return F.relu(x)
    if name == "gelu":
        return F.gelu(x)
    if name == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    return F.silu(x)


def neurons(cfg: ModelConfig, prefix: str, x: torch.Tensor, linear: Callable[[torch.Tensor, str], torch.Tensor]) -> torch.Tensor:
    """The hidden layer, hooked under ``prefix``: act(x W_in + b_in), or gated, act(x W_gate + b_gate)
    × (x W_in + b_in). ``linear(x, "in")`` computes x W_in (+ b_in) with the caller's weights."""
    if cfg.gated_mlp:  # act(x W_gate) * (x W_in), e.g. SwiGLU
        pre = hook(prefix + "hook_pre", linear(x, "gate"))
        gate = hook(prefix + "hook_gate", activation(cfg.activation, pre))
        linear_part = hook(prefix + "hook_linear", linear(x, "in"))
        return hook(prefix + "hook_post", gate * linear_part)
    pre = hook(prefix + "hook_pre", linear(x, "in"))
    return hook(prefix + "hook_post", activation(cfg.activation, pre))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig, prefix: str, width: int | None = None):
        """``width``: the hidden layer's (default d_ff; a mixture of experts' shared expert has its own)."""
        super().__init__()
        self.cfg, self.prefix = cfg, prefix
        D, Fd = cfg.d_model, width or cfg.d_ff
        self.W_in = nn.Parameter(torch.zeros(D, Fd))
        self.W_out = nn.Parameter(torch.zeros(Fd, D))
        if cfg.gated_mlp:
            self.W_gate = nn.Parameter(torch.zeros(D, Fd))
        if cfg.mlp_bias:
            self.b_in = nn.Parameter(torch.zeros(Fd))
            self.b_out = nn.Parameter(torch.zeros(D))
            if cfg.gated_mlp:
                self.b_gate = nn.Parameter(torch.zeros(Fd))

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        out = x @ getattr(self, "W_" + name)
        return out + getattr(self, "b_" + name) if self.cfg.mlp_bias else out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._linear(neurons(self.cfg, self.prefix, x, self._linear), "out")
