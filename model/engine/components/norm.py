"""LayerNorm (biased variance, eps inside the square root) or RMSNorm, over the last axis:
d_model for the blocks' norms, d_head for QK-norm. (Gemma's RMSNorm multiplies by 1 + w; its
converter stores 1 + w as w, so the same formula serves.) A half-precision model's norms
compute in float32, their hooks (mean, scale, normalized) included."""

from __future__ import annotations

import torch
from torch import nn

from model.engine.capture import hook
from model.engine.config import ModelConfig
from model.engine.device import widened


class Norm(nn.Module):
    def __init__(self, cfg: ModelConfig, prefix: str, size: int | None = None):
        super().__init__()
        self.kind, self.eps, self.prefix = cfg.norm, cfg.norm_eps, prefix
        size = size or cfg.d_model
        self.w = nn.Parameter(torch.ones(size))
        self.b = nn.Parameter(torch.zeros(size)) if cfg.norm == "layernorm" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p, dtype = self.prefix, x.dtype
        x = widened(x)  # statistics in float32 for a half model, the output in its precision, as transformers does
        if self.kind == "layernorm":
            mean = hook(p + "hook_mean", x.mean(-1))
            x = x - mean[..., None]
        scale = hook(p + "hook_scale", (x.pow(2).mean(-1) + self.eps).sqrt())
        normalized = hook(p + "hook_normalized", x / scale[..., None])
        out = normalized * self.w
        if self.b is not None:
            out = out + self.b
        return hook(p + "hook_out", out.to(dtype))
