"""Lesson 1, attention by hand: four tokens with 2-D queries, keys and values, one query moved by
the learner. Every number is computed here, in float64 torch: the scores q·k, the scaled scores
q·k/√d_k, the causal softmax and the weighted sum of the values.

The walk-through preset reproduces the course's one worked token ("sat" looking at "the", "cat",
"sat" with scores 0.7, 2.1, 1.3). Those are the scores the softmax receives, so the preset's keys
and query are chosen to give q·k/√2 = 0.7, 2.1, 1.3: the query (√2, √2) (angle 45°, length 2)
makes q·k/√2 = k_x + k_y, and each key's coordinates add up to its score. The values are ours:
the course does not give its value vectors."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

TOKENS = ("the", "cat", "sat", "on")
D_K = 2
# k_x + k_y = 0.7, 2.1, 1.3 for the walk-through's three tokens (see above); "on" is free
KEYS = ((1.0, -0.3), (0.9, 1.2), (-0.4, 1.7), (0.6, -1.1))
VALUES = ((1.0, 0.2), (-0.5, 1.0), (0.3, -0.8), (-0.9, -0.4))  # ours: the course gives none
# each token's own query before the learner moves it: (angle in degrees, length)
QUERIES = {"the": (20.0, 1.5), "cat": (-60.0, 1.2), "sat": (45.0, 2.0), "on": (150.0, 1.0)}

WALKTHROUGH_TOKEN = "sat"
WALKTHROUGH_QUERY = QUERIES[WALKTHROUGH_TOKEN]
WALKTHROUGH_SCORES = (0.7, 2.1, 1.3)  # the course's scores, as its softmax receives them
COURSE_WEIGHTS = (0.15, 0.59, 0.27)  # as the course prints them (the last is 0.2649, rounded wrongly)


def query_vector(angle: float, length: float) -> torch.Tensor:
    """A 2-D query from its angle (degrees, counter-clockwise from the x axis) and length."""
    radians = math.radians(angle)
    return torch.tensor([length * math.cos(radians), length * math.sin(radians)], dtype=torch.float64)


def keys() -> torch.Tensor:
    return torch.tensor(KEYS, dtype=torch.float64)


def values() -> torch.Tensor:
    return torch.tensor(VALUES, dtype=torch.float64)


@dataclass
class Attention:
    """One token's attention over the four tokens; the later tokens are masked (−∞, weight 0)."""
    position: int
    query: torch.Tensor  # (2,)
    scores: torch.Tensor  # (4,) q·k for every key, the later ones included (before the mask)
    scaled: torch.Tensor  # (4,) q·k/√d_k, −∞ on the later tokens
    weights: torch.Tensor  # (4,) softmax of ``scaled``: 0 on the later tokens, the rest sum to 1
    output: torch.Tensor  # (2,) Σ_j weights_j · v_j

    def visible(self, j: int) -> bool:
        return j <= self.position


def attend(position: int, angle: float, length: float) -> Attention:
    """Token ``position`` attending with the query given by ``angle`` and ``length``: it sees
    itself and the tokens before it."""
    q = query_vector(angle, length)
    scores = keys() @ q
    future = torch.arange(len(TOKENS)) > position
    scaled = (scores / math.sqrt(D_K)).masked_fill(future, float("-inf"))
    weights = torch.softmax(scaled, dim=0)
    return Attention(position, q, scores, scaled, weights, weights @ values())


def similarity(queries: dict[str, tuple[float, float]]) -> torch.Tensor:
    """(4, 4) q_i·k_j: row i is token i's query against every token's key, before any scale or
    mask (what "how similar" means here)."""
    q = torch.stack([query_vector(*queries[t]) for t in TOKENS])
    return q @ keys().T


def walkthrough() -> Attention:
    return attend(TOKENS.index(WALKTHROUGH_TOKEN), *WALKTHROUGH_QUERY)


def rounded_wrongly(exact: list[float], printed: tuple[float, ...]) -> list[int]:
    """Which printed figures are not the exact ones rounded to the printed digits (two)."""
    return [i for i, (x, p) in enumerate(zip(exact, printed)) if abs(round(x, 2) - p) > 1e-9]


def figures(loaded=None) -> dict:
    """The walk-through preset: its vectors and every number from the scores to the output, and
    the similarity q_i·k_j of every token's own query with every key (loaded is not used)."""
    shown = walkthrough()
    seen = shown.position + 1
    weights = shown.weights[:seen].tolist()
    return {
        "tokens": list(TOKENS),
        "d_k": D_K,
        "selected": WALKTHROUGH_TOKEN,
        "query": shown.query.tolist(),
        "query_angle_degrees": WALKTHROUGH_QUERY[0],
        "query_length": WALKTHROUGH_QUERY[1],
        "keys": [list(k) for k in KEYS],
        "values": [list(v) for v in VALUES],
        "values_are_ours": True,
        "attended_tokens": list(TOKENS[:seen]),
        "scores": shown.scores[:seen].tolist(),
        "scaled_scores": (shown.scaled[:seen]).tolist(),
        "weights": weights,
        "output": shown.output.tolist(),
        "course_scores": list(WALKTHROUGH_SCORES),
        "course_weights": list(COURSE_WEIGHTS),
        "course_weights_rounded_wrongly": [TOKENS[i] for i in rounded_wrongly(weights, COURSE_WEIGHTS)],
        "similarity_is": "q_i·k_j: row i is token i's own query, column j token j's key, before scale and mask",
        "similarity": similarity(QUERIES).tolist(),
    }
