"""A pre-norm transformer block: x + attn(ln1(x)), then + mlp(ln2(.))."""

from __future__ import annotations

import torch
from torch import nn

from model.engine.capture import hook
from model.engine.components.attention import Attention
from model.engine.components.mlp import MLP
from model.engine.components.norm import Norm
from model.engine.config import ModelConfig
from model.engine.kv_cache import KVCache


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int):
        super().__init__()
        self.prefix = p = f"blocks.{index}."
        self.ln1 = Norm(cfg, p + "ln1.")
        self.attn = Attention(cfg, p + "attn.", index)
        self.ln2 = Norm(cfg, p + "ln2.")
        self.mlp = MLP(cfg, p + "mlp.")

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        p = self.prefix
        resid_pre = hook(p + "hook_resid_pre", x)
        attn_out = hook(p + "hook_attn_out", self.attn(self.ln1(resid_pre), cache))
        resid_mid = hook(p + "hook_resid_mid", resid_pre + attn_out)
        mlp_out = hook(p + "hook_mlp_out", self.mlp(self.ln2(resid_mid)))
        return hook(p + "hook_resid_post", resid_mid + mlp_out)
