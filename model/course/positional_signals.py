"""Lesson 3, positions: (a) the sinusoidal table; (b) PE(pos + k) = M_k · PE(pos), M_k made of 2 × 2
rotations; (c) without positions and without the mask, attention is permutation-equivariant
(checked on the bundled model with its position rows edited to zero and the mask switched off);
(d) the bundled model's learned table; (e) RoPE, whose scores depend on the offset alone. The
pages draw the turning: each (sin, cos) pair as a point on a dial (``pair_angles``), and a RoPE
query and key turned by their positions (``rope_rotated``)."""

from __future__ import annotations

import math

import numpy as np
import torch

from glassbox.model.engine import check_prompt, editing, variant
from glassbox.model.engine.rope import apply_rope, rope_angles

PROMPT = "the cat sat on the mat"
POSITIONS = 32  # rows of the tables drawn
BASE = 10000.0


def sinusoidal_table(positions: int, d: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos·ω_i), PE(pos, 2i + 1) = cos(pos·ω_i), ω_i = 1/10000^(2i/d); float64."""
    pos = torch.arange(positions, dtype=torch.float64)[:, None]
    omega = BASE ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    table = torch.empty(positions, d, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * omega), torch.cos(pos * omega)
    return table


def shift_matrix(k: int, d: int) -> torch.Tensor:
    """M_k: block-diagonal, one 2 × 2 rotation by ω_i·k per (sin, cos) pair, so that the pair
    (sin a, cos a) becomes (sin(a + ω_i k), cos(a + ω_i k))."""
    m = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        angle = k * BASE ** (-2 * i / d)
        c, s = math.cos(angle), math.sin(angle)
        m[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
    return m


def largest_shift_error(k: int, d: int, positions: int = POSITIONS) -> float:
    """max over pos and dimensions of |PE(pos + k) − M_k · PE(pos)|, pos = 0 … positions − 1."""
    table = sinusoidal_table(positions + k, d)
    return float((table[k:] - table[:positions] @ shift_matrix(k, d).T).abs().max())


def permutation_error(model, tokens: list[int], order: list[int], positions: bool, causal: bool) -> float:
    """max |A(shuffled) − P·A·Pᵀ| over every layer's and head's pattern: 0 (up to rounding) when
    attention cannot tell the order, which needs both the position rows and the mask gone."""
    check_prompt(model.cfg, tokens)
    run_on = model if causal else variant(model, causal=False)
    edits = {} if positions or model.cfg.positional != "table" else {"hook_pos_embed": torch.zeros_like}

    def patterns(ids: list[int]) -> np.ndarray:
        with torch.no_grad(), editing(edits, keep=["blocks.*.attn.hook_pattern"]) as seen:
            run_on(torch.tensor([ids], device=model.device))
        return np.stack([seen.tensors[f"blocks.{b}.attn.hook_pattern"][0].double().cpu().numpy()
                         for b in range(model.cfg.n_layers)])

    plain, shuffled = patterns(tokens), patterns([tokens[i] for i in order])
    permuted = plain[..., order, :][..., :, order]  # P·A·Pᵀ
    return float(np.abs(shuffled - permuted).max())


def colour_limit(values: np.ndarray, percentile: float = 99.0) -> float:
    """The colour scale's end for a table with a few outlying entries: the ``percentile`` of |values|,
    so that the bulk of the table is not drawn white beside one large entry."""
    return float(np.percentile(np.abs(values), percentile))


def pair_angles(positions: int, d: int, pair: int) -> np.ndarray:
    """The angle pos·ω_i (radians) of the (sin, cos) pair ``pair`` at positions 0 … positions − 1:
    PE(pos, 2i) = sin, PE(pos, 2i + 1) = cos, a point turning at ω_i per position."""
    table = sinusoidal_table(positions, d)
    return torch.atan2(table[:, 2 * pair], table[:, 2 * pair + 1]).numpy()


def rope_rotated(v: tuple[float, float], theta: float, position: int) -> tuple[float, float]:
    """The 2-D pair ``v`` at ``position`` after the engine's RoPE (angle θ per position)."""
    cos, sin = rope_angles(torch.tensor([theta], dtype=torch.float64), 0, position + 1, torch.float64)
    turned = apply_rope(torch.tensor([v], dtype=torch.float64).expand(position + 1, 2), cos, sin)[position]
    return float(turned[0]), float(turned[1])


def learned_table(model, positions: int = POSITIONS) -> tuple[np.ndarray, np.ndarray]:
    """The model's first rows of W_pos and their cosine similarities."""
    rows = model.pos_embed.W_pos[:positions].detach().double()
    unit = rows / rows.norm(dim=1, keepdim=True)
    return rows.numpy(), (unit @ unit.T).numpy()


def rope_scores(q: tuple[float, float], k: tuple[float, float], theta: float, pairs: list[tuple[int, int]]
                ) -> list[float]:
    """q at position m and k at position n, each rotated by the engine's RoPE (one pair, angle θ per
    position): their dot products, one per (m, n)."""
    length = max(max(m, n) for m, n in pairs) + 1
    cos, sin = rope_angles(torch.tensor([theta], dtype=torch.float64), 0, length, torch.float64)
    qs = apply_rope(torch.tensor([q], dtype=torch.float64).expand(length, 2), cos, sin)
    ks = apply_rope(torch.tensor([k], dtype=torch.float64).expand(length, 2), cos, sin)
    return [float(qs[m] @ ks[n]) for m, n in pairs]


def shuffled_order(n: int, seed: int) -> list[int]:
    """A random order of n positions from ``seed``; never the identity when n ≥ 2 (it is drawn again:
    a shuffle that moves nothing checks nothing)."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(n, generator=generator).tolist()
    while n >= 2 and order == list(range(n)):
        order = torch.randperm(n, generator=generator).tolist()
    return order


def figures(loaded) -> dict:
    tokens = loaded.encode(PROMPT)
    order = shuffled_order(len(tokens), 0)
    _, similarity = learned_table(loaded.model)
    offsets = [(m, m + 3) for m in (0, 5, 20)] + [(m + 3, m) for m in (0, 5, 20)]
    return {
        "largest_shift_error": {str(k): largest_shift_error(k, 64) for k in range(1, 17)},
        "permutation": {"prompt": PROMPT, "order": order,
                        "no_positions_no_mask": permutation_error(loaded.model, tokens, order, False, False),
                        "no_positions_with_mask": permutation_error(loaded.model, tokens, order, False, True),
                        "positions_no_mask": permutation_error(loaded.model, tokens, order, True, False)},
        "learned_colour_limit_p95": colour_limit(learned_table(loaded.model)[0], 95.0),
        "learned_neighbour_cosine": float(np.mean(np.diag(similarity, 1))),
        "learned_far_cosine": float(np.mean(np.diag(similarity, 16))),
        "rope": [{"m": m, "n": n, "score": s} for (m, n), s in
                 zip(offsets, rope_scores((1.0, 0.5), (0.8, -0.3), 0.3, offsets))],
    }
