"""The feed-forward network: x W_in + b_in, an activation, then W_out (or a gated variant:
act(x W_gate) × (x W_in), e.g. SwiGLU)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from model.engine.capture import hook
from model.engine.config import ModelConfig


def activation(name: str, x: torch.Tensor) -> torch.Tensor:
    if name == "relu":
        return F.relu(x)
    if name == "gelu":
        return F.gelu(x)
    if name == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    return F.silu(x)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig, prefix: str):
        super().__init__()
        self.cfg, self.prefix = cfg, prefix
        D, Fd = cfg.d_model, cfg.d_ff
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
        p, cfg = self.prefix, self.cfg
        if cfg.gated_mlp:  # act(x W_gate) * (x W_in), e.g. SwiGLU
            pre = hook(p + "hook_pre", self._linear(x, "gate"))
            gate = hook(p + "hook_gate", activation(cfg.activation, pre))
            linear = hook(p + "hook_linear", self._linear(x, "in"))
            post = hook(p + "hook_post", gate * linear)
        else:
            pre = hook(p + "hook_pre", self._linear(x, "in"))
            post = hook(p + "hook_post", activation(cfg.activation, pre))
        return self._linear(post, "out")
