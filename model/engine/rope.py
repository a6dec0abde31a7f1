"""Rotary position embeddings (RoPE), in the rotate-half layout of Llama and GPT-NeoX."""

from __future__ import annotations

import torch

from model.engine.config import ModelConfig


def rope_tables(cfg: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles, (n_ctx, d_head), in the rotate-half layout."""
    inv_freq = 1.0 / cfg.rope_base ** (torch.arange(0, cfg.d_head, 2, dtype=torch.float64) / cfg.d_head)
    angles = torch.outer(torch.arange(cfg.n_ctx, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (i, i + d_head/2) of each head's vector by the position's angles."""
    half = x.shape[-1] // 2
    rotated_half = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated_half * sin
