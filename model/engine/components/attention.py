"""Causal multi-head attention (grouped-query and multi-query when there are fewer key/value
heads), with RoPE when the model uses it. Every head's weights are stored split per head:
W_Q[h] is head h's (d_model, d_head) matrix."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from model.engine.capture import hook, wants
from model.engine.config import ModelConfig
from model.engine.kv_cache import KVCache
from model.engine.rope import apply_rope, rope_tables


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, prefix: str, layer: int = 0):
        super().__init__()
        self.cfg, self.prefix, self.layer = cfg, prefix, layer
        H, K, D, dh = cfg.n_heads, cfg.n_kv_heads, cfg.d_model, cfg.d_head
        self.W_Q = nn.Parameter(torch.zeros(H, D, dh))
        self.W_K = nn.Parameter(torch.zeros(K, D, dh))
        self.W_V = nn.Parameter(torch.zeros(K, D, dh))
        self.W_O = nn.Parameter(torch.zeros(H, dh, D))
        if cfg.attn_bias:
            self.b_Q = nn.Parameter(torch.zeros(H, dh))
            self.b_K = nn.Parameter(torch.zeros(K, dh))
            self.b_V = nn.Parameter(torch.zeros(K, dh))
            self.b_O = nn.Parameter(torch.zeros(D))
        if cfg.positional == "rope":
            cos, sin = rope_tables(cfg)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    def _project(self, x: torch.Tensor, W: torch.Tensor, bias_name: str) -> torch.Tensor:
        out = torch.einsum("btd,hde->bhte", x, W)
        if self.cfg.attn_bias:
            out = out + getattr(self, bias_name)[:, None, :]
        return out

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        p, cfg = self.prefix, self.cfg
        T = x.shape[1]
        start = cache.length if cache is not None else 0  # absolute position of x's first row
        q = hook(p + "hook_q", self._project(x, self.W_Q, "b_Q"))
        k = hook(p + "hook_k", self._project(x, self.W_K, "b_K"))
        v = hook(p + "hook_v", self._project(x, self.W_V, "b_V"))
        if cfg.positional == "rope":
            cos, sin = self.rope_cos[start:start + T].to(x.dtype), self.rope_sin[start:start + T].to(x.dtype)
            q = hook(p + "hook_rot_q", apply_rope(q, cos, sin))
            k = hook(p + "hook_rot_k", apply_rope(k, cos, sin))
        if cache is not None:
            k, v = cache.extend(self.layer, k, v)
        if cfg.n_kv_heads != cfg.n_heads:  # each group of query heads shares one key/value head
            group = cfg.n_heads // cfg.n_kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)

        explicit = wants(p + "hook_scores") or wants(p + "hook_scores_masked") or wants(p + "hook_pattern")
        if explicit or start > 0:  # query at position start + i sees keys 0 .. start + i
            future = torch.ones(T, start + T, dtype=torch.bool, device=x.device).triu(start + 1)
        if explicit:
            scores = hook(p + "hook_scores", q @ k.transpose(-1, -2) / math.sqrt(cfg.d_head))
            masked = hook(p + "hook_scores_masked", scores.masked_fill(future, float("-inf")))
            pattern = hook(p + "hook_pattern", masked.softmax(dim=-1))
            z = pattern @ v
        elif start == 0:  # the fused kernel never materialises the pattern (nor the mask)
            z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=~future)
        z = hook(p + "hook_z", z)

        if wants(p + "hook_result"):
            result = hook(p + "hook_result", torch.einsum("bhte,hed->bhtd", z, self.W_O))
            out = result.sum(dim=1)
        else:
            out = torch.einsum("bhte,hed->btd", z, self.W_O)
        if cfg.attn_bias:
            out = out + self.b_O
        return out
