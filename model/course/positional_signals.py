"""The lesson on positions: (a) the sinusoidal table; (b) PE(pos + k) = M_k · PE(pos), M_k made of 2 × 2
rotations; (c) without positions and without the mask, attention is permutation-equivariant
(checked on the bundled model with its position rows edited to zero and the mask switched off);
(d) the bundled model's learned table; (e) RoPE, whose scores depend on the offset alone. The
pages draw the turning: each (sin, cos) pair as a point on a dial (``pair_angles``), and a RoPE
query and key turned by their positions (``rope_rotated``)."""

from __future__ import annotations

import math

import numpy as np
import torch

from glassbox.model.course.exercises import Exercise, draw
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
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
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
        return np.stack(
            [seen.tensors[f"blocks.{b}.attn.hook_pattern"][0].double().cpu().numpy() for b in range(model.cfg.n_layers)]
        )

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


def rope_scores(q: tuple[float, float], k: tuple[float, float], theta: float, pairs: list[tuple[int, int]]) -> list[float]:
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
        "permutation": {
            "prompt": PROMPT,
            "order": order,
            "no_positions_no_mask": permutation_error(loaded.model, tokens, order, False, False),
            "no_positions_with_mask": permutation_error(loaded.model, tokens, order, False, True),
            "positions_no_mask": permutation_error(loaded.model, tokens, order, True, False),
        },
        "learned_colour_limit_p95": colour_limit(learned_table(loaded.model)[0], 95.0),
        "learned_neighbour_cosine": float(np.mean(np.diag(similarity, 1))),
        "learned_far_cosine": float(np.mean(np.diag(similarity, 16))),
        "rope": [{"m": m, "n": n, "score": s} for (m, n), s in zip(offsets, rope_scores((1.0, 0.5), (0.8, -0.3), 0.3, offsets))],
    }


# --- exercises ------------------------------------------------------------------------------


def frequency(d: int, pair: int) -> float:
    """ω_i of the (sin, cos) pair ``pair``: the angle it turns by per position (its angle at position 1)."""
    return float(pair_angles(2, d, pair)[1])


def drawn_pair(rng) -> tuple[float, float]:
    """A 2-D vector with one-decimal coordinates, not the zero vector."""
    while True:
        v = tuple(round(float(x), 1) + 0.0 for x in rng.uniform(-1.0, 1.0, 2))  # + 0.0: never −0
        if any(v):
            return v


def exercises(seed: int, loaded=None) -> list[Exercise]:
    """One entry of the sinusoidal table, the wavelength of one of its pairs, and one RoPE score
    (loaded is not used)."""
    rng = draw("positions", seed)
    formula = "PE(pos, 2i) = sin(pos·ω_i) and PE(pos, 2i + 1) = cos(pos·ω_i), ω_i = 1/10000^(2i/d_model)"

    d = int(rng.choice([16, 32, 64, 128]))
    dim, pos = int(rng.integers(0, 8)), int(rng.integers(1, 41))
    pair, wave = dim // 2, "cos" if dim % 2 else "sin"
    value = float(sinusoidal_table(pos + 1, d)[pos, dim])
    omega = frequency(d, pair)
    value_ex = Exercise(
        "pe_value",
        f"The sinusoidal table has {formula}. With d_model = {d}, what is PE({pos}, {dim})? "
        "Answer to 3 decimals (angles in radians).",
        value,
        tolerance=1e-3,
        hint=f"Dimension {dim} is {'odd' if dim % 2 else 'even'}: it is the {wave} of pair i = {pair}.",
        solution=f"Dimension {dim} = 2·{pair}{' + 1' if dim % 2 else ''}: i = {pair}, ω = 1/10000^({2 * pair}/{d}) "
        f"= {omega:.5g}; pos·ω = {pos} × {omega:.5g} = {pos * omega:.4f} rad; "
        f"{wave}({pos * omega:.4f}) = {value:.4f}.",
        data={"d_model": d, "pos": pos, "dim": dim},
    )

    d = int(rng.choice([64, 128, 256, 512]))
    pair = int(rng.integers(1, d // 2))
    omega = frequency(d, pair)
    wavelength = 2 * math.pi / omega
    wavelength_ex = Exercise(
        "wavelength",
        f"The sinusoidal table has {formula}. With d_model = {d}, what is the wavelength of pair "
        f"i = {pair} (dimensions {2 * pair} and {2 * pair + 1}): the number of positions it takes to turn a full "
        "circle and repeat its values? Answer to 3 significant figures.",
        wavelength,
        tolerance=0.01,
        relative=True,
        unit="positions",
        hint="The pair turns by ω_i per position; a full turn is 2π.",
        solution=f"ω = 1/10000^({2 * pair}/{d}) = {omega:.5g} per position; 2π/ω = {wavelength:,.2f} positions.",
        data={"d_model": d, "pair": pair},
    )

    q, k = drawn_pair(rng), drawn_pair(rng)
    theta = float(rng.choice([0.1, 0.25, 0.5, 1.0]))
    m, n = (int(x) for x in rng.choice(9, size=2, replace=False))
    score = rope_scores(q, k, theta, [(m, n)])[0]
    turned_q, turned_k = rope_rotated(q, theta, m), rope_rotated(k, theta, n)

    def shown(v) -> str:
        return "(" + ", ".join(f"{x:.4f}" for x in v) + ")"

    rope_ex = Exercise(
        "rope_score",
        f"RoPE turns a 2-D query q = ({q[0]:g}, {q[1]:g}) at position m = {m} counter-clockwise by "
        f"m·θ radians, and a key k = ({k[0]:g}, {k[1]:g}) at position n = {n} by n·θ, with θ = {theta:g}. What is "
        "their score, the dot product of the turned vectors? Answer to 3 decimals.",
        score,
        tolerance=1e-3,
        hint="Turning (x, y) by an angle a gives (x·cos a − y·sin a, x·sin a + y·cos a). Only n − m matters: the "
        "score is q·(k turned by (n − m)·θ).",
        solution=f"q turned by {m * theta:g} rad: {shown(turned_q)}; k turned by {n * theta:g} rad: "
        f"{shown(turned_k)}; their dot product {score:.4f}, the same as q·(k turned by "
        f"{(n - m) * theta:g} rad).",
        data={"q": list(q), "k": list(k), "theta": theta, "m": m, "n": n},
    )
    return [value_ex, wavelength_ex, rope_ex]
