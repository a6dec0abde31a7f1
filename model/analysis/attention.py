"""One attention score written out: the query and key vectors, their products, the scale."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from model.engine import ModelConfig, Trace


@dataclass(frozen=True)
class Pair:
    q: np.ndarray  # the query vector (after RoPE if the model uses it)
    k: np.ndarray
    products: np.ndarray  # q_i * k_i
    scale: float  # what the dot product is multiplied by: 1/sqrt(d_head) unless the model says otherwise
    uncapped: float  # sum(products) * scale
    score: float  # the same, soft-capped where the model caps scores: cap * tanh(uncapped / cap); recomputed
    recorded: float  # the trace's hook_scores entry


def attention_pair(trace: Trace, cfg: ModelConfig, layer: int, head: int, query: int, key: int) -> Pair:
    """The score of query position ``query`` for key position ``key``, written out."""
    p = f"blocks.{layer}.attn."
    q_name, k_name = (p + "hook_rot_q", p + "hook_rot_k") if cfg.positional == "rope" else (p + "hook_q", p + "hook_k")
    q = trace[q_name][head, query].to(torch.float64).cpu().numpy()
    k = trace[k_name][cfg.kv_head(head), key].to(torch.float64).cpu().numpy()
    products = q * k
    scale = cfg.attn_scale if cfg.attn_scale is not None else 1 / math.sqrt(cfg.d_head)
    uncapped = float(products.sum() * scale)
    score = uncapped if cfg.attn_softcap is None else cfg.attn_softcap * math.tanh(uncapped / cfg.attn_softcap)
    return Pair(q, k, products, scale, uncapped, score, float(trace[p + "hook_scores"][head, query, key]))
