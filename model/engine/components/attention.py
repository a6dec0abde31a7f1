"""Causal multi-head attention (grouped-query and multi-query when there are fewer key/value
heads), with RoPE (whole or partial), QK-norm, a local window, and score soft-capping where
the model uses them. Every head's weights are stored split per head: W_Q[h] is head h's
(d_model, d_head) matrix.

QK-norm is an RMSNorm over each head's q and k (Qwen 3, Gemma 3), or, in OLMoE, over all heads'
features at a position together (``qk_norm_width`` "full": the norms ``q_norm_full`` and
``k_norm_full``); OLMoE may then clamp q, k and v to ±clip_qkv.

Two more uses, for encoders and encoder-decoders:
- a ``bias`` (heads, queries, keys) added to the scores before the mask: T5's relative position
  bias (relative.py), scores = q·kᵀ × scale + bias;
- cross-attention (``cross=True``, an encoder-decoder's decoder): the queries come from the
  decoder's stream x, the keys and values from the encoder's output ``source``; every query sees
  every source position (no mask, no positions). With a cache, the source's keys and values are
  computed at the first step and read back at every later one."""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from glassbox.model.engine.capture import hook, wants
from glassbox.model.engine.components.norm import Norm
from glassbox.model.engine.config import ModelConfig
from glassbox.model.engine.device import widened
from glassbox.model.engine.kv_cache import KVCache
from glassbox.model.engine.rope import apply_rope, inverse_frequencies, rope_angles


class Attention(nn.Module):
    inv_freq: torch.Tensor  # RoPE's buffer (register_buffer): typed for mypy

    def __init__(self, cfg: ModelConfig, prefix: str, layer: int = 0, cross: bool = False):
        super().__init__()
        self.cfg, self.prefix, self.layer, self.cross = cfg, prefix, layer, cross
        H, K, D, dh = cfg.n_heads, cfg.n_kv_heads, cfg.d_model, cfg.d_head
        self.W_Q = nn.Parameter(torch.zeros(H, D, dh))
        self.W_K = nn.Parameter(torch.zeros(K, D, dh))
        self.W_V = nn.Parameter(torch.zeros(K, D, dh))
        self.W_O = nn.Parameter(torch.zeros(H, dh, D))
        if cfg.attn_bias:
            self.b_Q = nn.Parameter(torch.zeros(H, dh))
            self.b_K = nn.Parameter(torch.zeros(K, dh))
            self.b_V = nn.Parameter(torch.zeros(K, dh))
        if cfg.attn_out_bias:
            self.b_O = nn.Parameter(torch.zeros(D))
        if cfg.qk_norm and cfg.qk_norm_width == "full":  # one norm over every head's features at once
            self.q_norm_full = Norm(cfg, prefix + "q_norm_full.", H * dh)
            self.k_norm_full = Norm(cfg, prefix + "k_norm_full.", K * dh)
        elif cfg.qk_norm:  # one RMSNorm over d_head, shared by every head
            self.q_norm = Norm(cfg, prefix + "q_norm.", dh)
            self.k_norm = Norm(cfg, prefix + "k_norm.", dh)
        if cfg.positional == "rope" and not cross:
            self.register_buffer("inv_freq", inverse_frequencies(cfg, layer), persistent=False)
        self.window = cfg.window if cfg.is_local(layer) else None
        self.scale = cfg.attn_scale if cfg.attn_scale is not None else 1 / math.sqrt(dh)

    def _project(self, x: torch.Tensor, W: torch.Tensor, bias_name: str) -> torch.Tensor:
        # (b, 1, t, d) @ (h, d, e): a batched product over heads that reads W in place (einsum
        # copied every weight into another layout on every call: most of a generation step). For a
        # batch, matmul's broadcasting copies W once per sequence (28 MB a projection for 12 of GPT-2
        # small's): on a CPU without gradients each sequence is multiplied alone, the same products
        # bit for bit. With them the broadcast stays (its backward sums ∂L/∂W in its own order,
        # which the shipped training runs reproduce exactly), and on a GPU (a launch per sequence
        # would cost more than the copy).
        if len(x) > 1 and not torch.is_grad_enabled() and x.device.type == "cpu":
            out = torch.stack([torch.matmul(row, W) for row in x[:, None]])
        else:
            out = torch.matmul(x[:, None], W)
        if self.cfg.attn_bias:
            out = out + getattr(self, bias_name)[:, None, :]
        return out

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None, bias: torch.Tensor | None = None, source: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x: (batch, positions, d_model). ``bias``: added to the scores (T5's relative positions).
        ``source``: the encoder's output, which a cross-attention's keys and values are computed
        from (its ``cache`` holds them once computed)."""
        p, cfg = self.prefix, self.cfg
        T = x.shape[1]
        start = cache.length if cache is not None and not self.cross else 0  # absolute position of x's first row
        q = hook(p + "hook_q", self._project(x, self.W_Q, "b_Q"))
        if self.cross:
            k, v = self._source_keys_values(source, cache)
        else:
            q, k, v = self._self_keys_values(x, q, start, cache)
        if cfg.n_kv_heads != cfg.n_heads:  # each group of query heads shares one key/value head
            group = cfg.n_heads // cfg.n_kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)

        # the scores are computed explicitly when they are captured or capped; otherwise the fused
        # kernel computes the same attention without materialising the pattern
        explicit = cfg.attn_softcap is not None or any(
            wants(p + n) for n in ("hook_scores_uncapped", "hook_scores", "hook_scores_masked", "hook_pattern")
        )
        # a generation step's one query sees every cached key: no mask (and the fastest kernel)
        hidden = (
            self._hidden(start, T, x.device)
            if not self.cross and (explicit or (start and T > 1) or self.window or not cfg.causal or bias is not None)
            else None
        )  # a cross-attention sees the whole source
        if explicit:
            scores = q @ k.transpose(-1, -2) * self.scale
            if cfg.attn_softcap is not None:
                scores = hook(p + "hook_scores_uncapped", scores)
                scores = torch.tanh(scores / cfg.attn_softcap) * cfg.attn_softcap
            if bias is not None:
                scores = scores + bias
            scores = hook(p + "hook_scores", scores)
            masked = scores if hidden is None else hook(p + "hook_scores_masked", scores.masked_fill(hidden, float("-inf")))
            pattern = hook(p + "hook_pattern", widened(masked).softmax(dim=-1).to(masked.dtype))  # float32 for a half model
            z = pattern @ v
        elif bias is not None:  # a float mask is added to the scores: the bias, −∞ where hidden
            mask = bias if hidden is None else bias.masked_fill(hidden, float("-inf"))
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        elif hidden is not None:
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=~hidden, scale=self.scale)
        else:  # the fused kernel never materialises the pattern (nor the causal mask)
            z = F.scaled_dot_product_attention(q, k, v, is_causal=start == 0 and not self.cross, scale=self.scale)
        z = hook(p + "hook_z", z)

        if wants(p + "hook_result"):
            result = hook(p + "hook_result", torch.matmul(z, self.W_O))  # (b, h, t, e) @ (h, e, d), per head
            out = result.sum(dim=1)
        else:  # heads side by side, one product with W_O viewed as (h·e, d): no copy of the weight
            b, h, t, e = z.shape
            out = z.transpose(1, 2).reshape(b, t, h * e) @ self.W_O.reshape(h * e, -1)
        if cfg.attn_out_bias:
            out = out + self.b_O
        return out

    def _self_keys_values(
        self, x: torch.Tensor, q: torch.Tensor, start: int, cache: KVCache | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Self-attention's keys and values from x, with QK-norm, clipping and RoPE where the model
        has them (q too), appended to the cache."""
        p, cfg = self.prefix, self.cfg
        k = hook(p + "hook_k", self._project(x, self.W_K, "b_K"))
        v = hook(p + "hook_v", self._project(x, self.W_V, "b_V"))
        if cfg.qk_norm and cfg.qk_norm_width == "full":
            q, k = _across_heads(self.q_norm_full, q), _across_heads(self.k_norm_full, k)
        elif cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if cfg.clip_qkv is not None:
            c = cfg.clip_qkv
            q = hook(p + "hook_q_clipped", q.clamp(-c, c))
            k = hook(p + "hook_k_clipped", k.clamp(-c, c))
            v = hook(p + "hook_v_clipped", v.clamp(-c, c))
        if cfg.positional == "rope":
            cos, sin = rope_angles(self.inv_freq, start, x.shape[1], x.dtype)
            q = hook(p + "hook_rot_q", apply_rope(q, cos, sin))
            k = hook(p + "hook_rot_k", apply_rope(k, cos, sin))
        if cache is not None:
            k, v = cache.extend(self.layer, k, v)
        return q, k, v

    def _source_keys_values(self, source: torch.Tensor | None, cache: KVCache | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention's keys and values, from the encoder's output: computed once per source
        (a generation's later steps read them back from the cache)."""
        cached = cache.cached(self.layer) if cache is not None else None
        if cached is not None:
            return cached
        if source is None:
            raise ValueError("a cross-attention's first step needs the encoder's output (source)")
        p = self.prefix
        k = hook(p + "hook_k", self._project(source, self.W_K, "b_K"))
        v = hook(p + "hook_v", self._project(source, self.W_V, "b_V"))
        return cache.extend(self.layer, k, v) if cache is not None else (k, v)

    def _hidden(self, start: int, T: int, device: torch.device) -> torch.Tensor:
        """(T, start + T) mask, True where the query at position start + i may not see a key: the
        future (unless the config says the model is not causal), and with a window the keys
        `window` or more positions back."""
        return hidden_keys(start, T, self.cfg.causal, self.window, device)


MASKS_KEPT = 1 << 20  # the largest mask kept for reuse, in entries (1 MB of bools: a 1,024-token pass)


def hidden_keys(start: int, T: int, causal: bool, window: int | None, device: torch.device) -> torch.Tensor:
    """The mask of ``Attention._hidden``, made once per shape and device and shared by every block
    and call that needs it (on a GPU, three kernel launches a block fewer in a captured pass); a
    mask over MASKS_KEPT entries is made each time. Nothing writes into it."""
    if T * (start + T) <= MASKS_KEPT:
        return _kept_mask(start, T, causal, window, torch.device(device))
    return _make_mask(start, T, causal, window, device)


def _make_mask(start: int, T: int, causal: bool, window: int | None, device: torch.device) -> torch.Tensor:
    query = torch.arange(start, start + T, device=device)[:, None]
    key = torch.arange(start + T, device=device)[None, :]
    hidden = key > query if causal else torch.zeros_like(key > query)
    if window is not None:
        hidden |= query - key >= window
    return hidden


_kept_mask = functools.lru_cache(maxsize=16)(_make_mask)  # at most 16 MB


def _across_heads(norm: Norm, x: torch.Tensor) -> torch.Tensor:
    """``norm`` over all heads' features at each position: (b, h, t, e) is viewed as (b, t, h·e),
    head by head, as the model's projection lays them out before it is split into heads."""
    b, h, t, e = x.shape
    return norm(x.transpose(1, 2).reshape(b, t, h * e)).reshape(b, t, h, e).transpose(1, 2)
