"""Rotary position embeddings (RoPE), in the rotate-half layout of Llama and GPT-NeoX, on the
first ``rotary_dim`` features of each head (all of them unless the model says otherwise).

The frequencies and angles are computed as transformers computes them (float32 frequencies,
float32 angles for a float32 model), so that positions in the thousands give the same angles
to the last bit rather than ones that drift apart in the low digits."""

from __future__ import annotations

import math

import torch

from glassbox.model.engine.config import ModelConfig


def inverse_frequencies(cfg: ModelConfig, layer: int) -> torch.Tensor:
    """Each rotated pair's angle per position, (rotary_dim / 2,), float32. Local layers of a
    model with its own local base (Gemma 3) use that base, unscaled."""
    local_base = cfg.local_rope_base if cfg.is_local(layer) else None
    local = local_base is not None
    base = cfg.rope_base if local_base is None else local_base
    dim = cfg.rotary_dim
    assert dim is not None, "RoPE's config (ModelConfig sets rotary_dim for positional rope)"
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if local or cfg.rope_scaling == "none":
        return inv_freq
    if cfg.rope_scaling == "linear":  # positions squeezed by the factor
        return inv_freq / cfg.rope_factor
    # llama3: long wavelengths slowed by the factor, short ones kept, the band between blended
    low_wavelen = cfg.rope_original_ctx / cfg.rope_low_freq_factor
    high_wavelen = cfg.rope_original_ctx / cfg.rope_high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / cfg.rope_factor, inv_freq)
    smooth = (cfg.rope_original_ctx / wavelen - cfg.rope_low_freq_factor) / (cfg.rope_high_freq_factor - cfg.rope_low_freq_factor)
    smoothed = (1 - smooth) * scaled / cfg.rope_factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rope_angles(inv_freq: torch.Tensor, start: int, length: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of positions start .. start+length-1, (length, rotary_dim), rotate-half layout."""
    positions = torch.arange(start, start + length, device=inv_freq.device).to(inv_freq.dtype)
    angles = torch.outer(positions, inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (i, i + rotary_dim/2) of the first rotary_dim features of each head by the
    position's angles; the features past rotary_dim pass unchanged (partial rotary, GPT-NeoX)."""
    dim = cos.shape[-1]
    rot, rest = x[..., :dim], x[..., dim:]
    half = dim // 2
    rotated_half = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
    rotated = rot * cos + rotated_half * sin
    return torch.cat([rotated, rest], dim=-1) if rest.shape[-1] else rotated
