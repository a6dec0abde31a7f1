"""One attention score written out: the query and key vectors, their products, the scale."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.engine import ModelConfig, Trace


@dataclass(frozen=True)
class Pair:
    q: np.ndarray  # the query vector the score multiplies (after QK-norm, clipping and RoPE where the model has them)
    k: np.ndarray
    products: np.ndarray  # q_i * k_i
    scale: float  # what the dot product is multiplied by: 1/sqrt(d_head) unless the model says otherwise
    uncapped: float  # sum(products) * scale
    score: float  # the same, soft-capped where the model caps scores: cap * tanh(uncapped / cap); recomputed
    recorded: float  # the trace's hook_scores entry


def scored(cfg: ModelConfig, layer: int) -> tuple[str, str]:
    """The names of the queries and keys a block's scores multiply: after QK-norm, clipping and
    RoPE, whichever of them the model has (the engine applies them in that order)."""
    p = f"blocks.{layer}.attn."
    if cfg.positional == "rope":
        return p + "hook_rot_q", p + "hook_rot_k"
    if cfg.clip_qkv is not None:
        return p + "hook_q_clipped", p + "hook_k_clipped"
    if cfg.qk_norm:
        width = "_full" if cfg.qk_norm_width == "full" else ""
        return p + f"q_norm{width}.hook_out", p + f"k_norm{width}.hook_out"
    return p + "hook_q", p + "hook_k"


def per_head(tensor: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(heads, positions, d_head): a full-width QK-norm's output, (positions, heads · d_head), split
    into its heads as the model's projection lays them out."""
    if tensor.dim() == 2:
        return tensor.view(tensor.shape[0], n_heads, -1).transpose(0, 1)
    return tensor


def attention_pair(trace: Trace, cfg: ModelConfig, layer: int, head: int, query: int, key: int) -> Pair:
    """The score of query position ``query`` for key position ``key``, written out."""
    p = f"blocks.{layer}.attn."
    q_name, k_name = scored(cfg, layer)
    q = per_head(trace[q_name], cfg.n_heads)[head, query].to(torch.float64).cpu().numpy()
    k = per_head(trace[k_name], cfg.n_kv_heads)[cfg.kv_head(head), key].to(torch.float64).cpu().numpy()
    products = q * k
    scale = cfg.attn_scale if cfg.attn_scale is not None else 1 / math.sqrt(cfg.d_head)
    uncapped = float(products.sum() * scale)
    score = uncapped if cfg.attn_softcap is None else cfg.attn_softcap * math.tanh(uncapped / cfg.attn_softcap)
    return Pair(q, k, products, scale, uncapped, score, float(trace[p + "hook_scores"][head, query, key]))
