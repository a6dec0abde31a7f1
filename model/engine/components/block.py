"""A transformer block, read like its math. Pre-norm (GPT-2, Llama):
    mid = x + attn(ln1(x));  out = mid + mlp(ln2(mid))
attention-only (the micro-models whose circuits the course reads), no MLP at all,
    out = x + attn(ln1(x))
parallel (GPT-NeoX): both sublayers read the block's input,
    out = x + attn(ln1(x)) + mlp(ln2(x))
with post norms (Gemma 2 and 3), each sublayer's output is normed again before it is added:
    mid = x + ln1_post(attn(ln1(x)));  out = mid + ln2_post(mlp(ln2(mid)))
In a mixture-of-experts model (Mixtral, Qwen-MoE, OLMoE) the mlp of the blocks cfg.is_moe names
is a router and its experts (moe.py); any other block keeps the dense MLP."""

from __future__ import annotations

import torch
from torch import nn

from model.engine.capture import hook
from model.engine.components.attention import Attention
from model.engine.components.mlp import MLP
from model.engine.components.moe import MoE
from model.engine.components.norm import Norm
from model.engine.config import ModelConfig
from model.engine.kv_cache import KVCache


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int):
        super().__init__()
        self.cfg = cfg
        self.prefix = p = f"blocks.{index}."
        self.ln1 = Norm(cfg, p + "ln1.")
        self.attn = Attention(cfg, p + "attn.", index)
        if cfg.post_norms:
            self.ln1_post = Norm(cfg, p + "ln1_post.")
        if cfg.attn_only:
            return
        self.ln2 = Norm(cfg, p + "ln2.")
        self.mlp = MoE(cfg, p + "mlp.") if cfg.is_moe(index) else MLP(cfg, p + "mlp.")
        if cfg.post_norms:
            self.ln2_post = Norm(cfg, p + "ln2_post.")

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        p, cfg = self.prefix, self.cfg
        resid_pre = hook(p + "hook_resid_pre", x)
        attn_out = self.attn(self.ln1(resid_pre), cache)
        if cfg.post_norms:
            attn_out = self.ln1_post(hook(p + "attn.hook_out", attn_out))
        attn_out = hook(p + "hook_attn_out", attn_out)
        if cfg.attn_only:
            return hook(p + "hook_resid_post", resid_pre + attn_out)
        if cfg.parallel_block:
            mlp_out = hook(p + "hook_mlp_out", self.mlp(self.ln2(resid_pre)))
            return hook(p + "hook_resid_post", resid_pre + hook(p + "hook_attn_mlp_sum", attn_out + mlp_out))
        resid_mid = hook(p + "hook_resid_mid", resid_pre + attn_out)
        mlp_out = self.mlp(self.ln2(resid_mid))
        if cfg.post_norms:
            mlp_out = self.ln2_post(hook(p + "mlp.hook_out", mlp_out))
        mlp_out = hook(p + "hook_mlp_out", mlp_out)
        return hook(p + "hook_resid_post", resid_mid + mlp_out)
