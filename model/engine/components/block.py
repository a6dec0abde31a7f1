"""A transformer block, read like its math. Pre-norm (GPT-2, Llama):
    mid = x + attn(ln1(x));  out = mid + mlp(ln2(mid))
attention-only (the micro-models whose circuits the course reads), no MLP at all,
    out = x + attn(ln1(x))
parallel (GPT-NeoX): both sublayers read the block's input,
    out = x + attn(ln1(x)) + mlp(ln2(x))
with post norms (Gemma 2 and 3), each sublayer's output is normed again before it is added:
    mid = x + ln1_post(attn(ln1(x)));  out = mid + ln2_post(mlp(ln2(mid)))
In a mixture-of-experts model (Mixtral, Qwen-MoE, OLMoE) the mlp of the blocks cfg.is_moe names
is a router and its experts (moe.py); any other block keeps the dense MLP.
Without norms (norm "none", the grokking paper's model) there is no ln1 or ln2: each sublayer
reads the stream itself, mid = x + attn(x); out = mid + mlp(mid).

Post-norm (BERT, BART, the original transformer): the norm comes after each sum, not before the sublayer,
    mid = ln1(x + attn(x));  out = ln2(mid + mlp(mid))
An encoder-decoder's decoder block (T5) attends to the encoder's output between the two:
    mid = x + attn(ln1(x));  cross = mid + cross_attn(ln_cross(mid), source);  out = cross + mlp(ln2(cross))
post-norm (BART): cross = ln_cross(mid + cross_attn(mid, source)), between the same two."""

from __future__ import annotations

import torch
from torch import nn

from glassbox.model.engine.capture import hook
from glassbox.model.engine.components.attention import Attention
from glassbox.model.engine.components.mlp import MLP
from glassbox.model.engine.components.moe import MoE
from glassbox.model.engine.components.norm import Norm
from glassbox.model.engine.config import ModelConfig
from glassbox.model.engine.kv_cache import KVCache


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int, stack: str = ""):
        """``stack``: the prefix of an encoder-decoder's stack ("encoder.", "decoder.")."""
        super().__init__()
        self.cfg = cfg
        self.prefix = p = f"{stack}blocks.{index}."
        if cfg.norm != "none":
            self.ln1 = Norm(cfg, p + "ln1.")
        self.attn = Attention(cfg, p + "attn.", index)
        if cfg.post_norms:
            self.ln1_post = Norm(cfg, p + "ln1_post.")
        if cfg.cross_attention:
            self.ln_cross = Norm(cfg, p + "ln_cross.")
            self.cross_attn = Attention(cfg, p + "cross_attn.", index, cross=True)
        if cfg.attn_only:
            return
        if cfg.norm != "none":
            self.ln2 = Norm(cfg, p + "ln2.")
        self.mlp = MoE(cfg, p + "mlp.") if cfg.is_moe(index) else MLP(cfg, p + "mlp.")
        if cfg.post_norms:
            self.ln2_post = Norm(cfg, p + "ln2_post.")

    def forward(
        self,
        x: torch.Tensor,
        cache: KVCache | None = None,
        bias: torch.Tensor | None = None,
        source: torch.Tensor | None = None,
        source_cache: KVCache | None = None,
    ) -> torch.Tensor:
        """``bias``: on every attention score (relative positions); ``source`` (the encoder's
        output) and ``source_cache`` (its keys and values): the cross-attention's."""
        p, cfg = self.prefix, self.cfg
        resid_pre = hook(p + "hook_resid_pre", x)
        if cfg.norm_position == "post":
            return self._post_norm(resid_pre, cache, bias, source, source_cache)
        attn_out = self.attn(self._normed("ln1", resid_pre), cache, bias)
        if cfg.post_norms:
            attn_out = self.ln1_post(hook(p + "attn.hook_out", attn_out))
        attn_out = hook(p + "hook_attn_out", attn_out)
        if cfg.attn_only:
            return hook(p + "hook_resid_post", resid_pre + attn_out)
        if cfg.parallel_block:
            mlp_out = hook(p + "hook_mlp_out", self.mlp(self._normed("ln2", resid_pre)))
            return hook(p + "hook_resid_post", resid_pre + hook(p + "hook_attn_mlp_sum", attn_out + mlp_out))
        resid_mid = hook(p + "hook_resid_mid", resid_pre + attn_out)
        if cfg.cross_attention:
            cross_out = self.cross_attn(self.ln_cross(resid_mid), source_cache, source=source)
            resid_mid = hook(p + "hook_resid_cross", resid_mid + hook(p + "hook_cross_attn_out", cross_out))
        mlp_out = self.mlp(self._normed("ln2", resid_mid))
        if cfg.post_norms:
            mlp_out = self.ln2_post(hook(p + "mlp.hook_out", mlp_out))
        mlp_out = hook(p + "hook_mlp_out", mlp_out)
        return hook(p + "hook_resid_post", resid_mid + mlp_out)

    def _normed(self, norm: str, x: torch.Tensor) -> torch.Tensor:
        """ln1 or ln2 of x; x itself in a model without norms."""
        return x if self.cfg.norm == "none" else getattr(self, norm)(x)

    def _post_norm(
        self,
        resid_pre: torch.Tensor,
        cache: KVCache | None,
        bias: torch.Tensor | None,
        source: torch.Tensor | None,
        source_cache: KVCache | None,
    ) -> torch.Tensor:
        """mid = ln1(x + attn(x)); out = ln2(mid + mlp(mid)): each norm reads the sum, and its
        output is the stream (BERT); a decoder's cross-attention between them is normed alike (BART)."""
        p = self.prefix
        attn_out = hook(p + "hook_attn_out", self.attn(resid_pre, cache, bias))
        resid_mid = hook(p + "hook_resid_mid", self.ln1(hook(p + "hook_attn_sum", resid_pre + attn_out)))
        if self.cfg.cross_attention:
            cross_out = hook(p + "hook_cross_attn_out", self.cross_attn(resid_mid, source_cache, source=source))
            cross_sum = hook(p + "hook_cross_attn_sum", resid_mid + cross_out)
            resid_mid = hook(p + "hook_resid_cross", self.ln_cross(cross_sum))
        mlp_out = hook(p + "hook_mlp_out", self.mlp(resid_mid))
        return hook(p + "hook_resid_post", self.ln2(hook(p + "hook_mlp_sum", resid_mid + mlp_out)))
