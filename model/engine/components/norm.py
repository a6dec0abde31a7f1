"""LayerNorm (biased variance, eps inside the square root) or RMSNorm."""

from __future__ import annotations

import torch
from torch import nn

from model.engine.capture import hook
from model.engine.config import ModelConfig


class Norm(nn.Module):
    def __init__(self, cfg: ModelConfig, prefix: str):
        super().__init__()
        self.kind, self.eps, self.prefix = cfg.norm, cfg.norm_eps, prefix
        self.w = nn.Parameter(torch.ones(cfg.d_model))
        self.b = nn.Parameter(torch.zeros(cfg.d_model)) if cfg.norm == "layernorm" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.prefix
        if self.kind == "layernorm":
            mean = hook(p + "hook_mean", x.mean(-1))
            x = x - mean[..., None]
        scale = hook(p + "hook_scale", (x.pow(2).mean(-1) + self.eps).sqrt())
        normalized = hook(p + "hook_normalized", x / scale[..., None])
        out = normalized * self.w
        if self.b is not None:
            out = out + self.b
        return hook(p + "hook_out", out)
