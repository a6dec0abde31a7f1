"""LayerNorm (biased variance, eps inside the square root) or RMSNorm, over the last axis:
d_model for the blocks' norms, d_head for QK-norm. (Gemma's RMSNorm multiplies by 1 + w; its
converter stores 1 + w as w, so the same formula serves.) A half-precision model's norms
compute in float32, their hooks (mean, scale, normalized) included. A model with norm "none"
makes no Norm at all: its blocks' sublayers read the stream itself (block.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from glassbox.model.engine.capture import hook, wants
from glassbox.model.engine.config import ModelConfig
from glassbox.model.engine.device import widened


class Norm(nn.Module):
    def __init__(self, cfg: ModelConfig, prefix: str, size: int | None = None):
        super().__init__()
        if cfg.norm == "none":
            raise ValueError("a model without norms (norm 'none') makes no Norm")
        self.kind, self.eps, self.prefix = cfg.norm, cfg.norm_eps, prefix
        size = size or cfg.d_model
        self.w = nn.Parameter(torch.ones(size))
        self.b = nn.Parameter(torch.zeros(size)) if cfg.norm == "layernorm" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p, dtype = self.prefix, x.dtype
        x = widened(x)  # statistics in float32 for a half model, the output in its precision, as transformers does
        if not any(wants(p + name) for name in ("hook_mean", "hook_scale", "hook_normalized")):
            # nothing inside is captured: torch's fused kernel computes the same formula in one
            # launch instead of nine (most of a generation step on a GPU)
            size = x.shape[-1:]
            out = (
                F.layer_norm(x, size, self.w, self.b, self.eps)
                if self.kind == "layernorm"
                else F.rms_norm(x, size, self.w, self.eps)
            )
            return hook(p + "hook_out", out.to(dtype))
        if self.kind == "layernorm":
            # the mean and the variance in one kernel: the variance read from x itself rather than
            # from x − mean changes no gradient, since ∂var/∂mean = −2·mean(x − mean) = 0
            var, mean = torch.var_mean(x, dim=-1, correction=0)
            mean = hook(p + "hook_mean", mean)
            x = x - mean[..., None]
        else:
            var = x.pow(2).mean(-1)  # RMSNorm: the mean square
        scale = hook(p + "hook_scale", (var + self.eps).sqrt())
        normalized = hook(p + "hook_normalized", x / scale[..., None])
        # γ·n + β in one kernel (a launch fewer per norm on a GPU), the same values and gradients
        out = torch.addcmul(self.b, normalized, self.w) if self.b is not None else normalized * self.w
        return hook(p + "hook_out", out.to(dtype))
