"""The lesson on attention by hand: four tokens with 2-D queries, keys and values, one query moved by
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

from glassbox.model.course.exercises import Exercise, draw

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


# --- exercises ------------------------------------------------------------------------------


def vector_text(v) -> str:
    return "(" + ", ".join(f"{float(x):g}" for x in v) + ")"


def factor(x: float) -> str:
    """A number as the right-hand factor of a product: in brackets when negative."""
    return f"({x:g})" if x < 0 else f"{x:g}"


def listed(names, vectors) -> str:
    return ", ".join(f"{n} {vector_text(v)}" for n, v in zip(names, vectors))


def attend_to(position: int, q: tuple[float, float]) -> Attention:
    """``attend`` for a query given by its coordinates (the page's sliders give angle and length)."""
    return attend(position, math.degrees(math.atan2(q[1], q[0])), math.hypot(*q))


def drawn_query(rng) -> tuple[float, float]:
    """A 2-D query with one-decimal coordinates, not the zero vector (it would weigh every key alike)."""
    while True:
        q = tuple(round(float(x), 1) + 0.0 for x in rng.uniform(-1.5, 1.5, 2))  # + 0.0: never −0
        if any(q):
            return q


def exercises(seed: int, loaded=None) -> list[Exercise]:
    """One softmax weight from three scores, one coordinate of a token's output, and which key a
    query weighs most, on the lesson's keys and values (loaded is not used)."""
    rng = draw("attention", seed)

    scores = [round(float(s), 1) for s in rng.uniform(-1.0, 3.0, 3)]
    pick = int(rng.integers(3))
    weights = torch.softmax(torch.tensor(scores, dtype=torch.float64), dim=0).tolist()
    exps = [math.exp(s) for s in scores]
    softmax_ex = Exercise(
        "softmax_weight",
        f"The softmax receives the scores {', '.join(f'{s:g}' for s in scores)} for the keys "
        f"{', '.join(TOKENS[:3])}. What weight does “{TOKENS[pick]}” get? Answer to 3 decimals.",
        weights[pick],
        tolerance=1e-3,
        hint="softmax(s)_j = e^(s_j) / Σ e^(s_i): exponentiate every score, then divide by their sum.",
        solution=" ".join(f"e^{s:g} = {e:.3f}," for s, e in zip(scores, exps))
        + f" their sum {sum(exps):.3f}; {exps[pick]:.3f} / {sum(exps):.3f} = {weights[pick]:.3f}.",
        data={"scores": scores, "key": pick},
    )

    position = int(rng.integers(1, len(TOKENS)))
    q = drawn_query(rng)
    axis = int(rng.integers(2))
    seen = attend_to(position, q)
    visible = list(TOKENS[: position + 1])
    scaled, shown = seen.scaled[: position + 1].tolist(), seen.weights[: position + 1].tolist()
    output_ex = Exercise(
        "output_coordinate",
        f"“{TOKENS[position]}” has the query q = {vector_text(q)} and sees "
        f"{', '.join(visible)} (itself and the tokens before it). The keys are {listed(visible, KEYS)}; the values "
        f"are {listed(visible, VALUES)}. With scores q·k/√2, their softmax as weights and the output "
        f"Σ weight·v, what is the output's {'xy'[axis]} coordinate? Answer to 3 decimals.",
        float(seen.output[axis]),
        tolerance=1e-3,
        hint="Score every visible key (q·k, then ÷√2), softmax the scores, then add the values' "
        f"{'xy'[axis]} coordinates weighted by those weights.",
        solution="Scores q·k/√2: "
        + ", ".join(f"{t} {s:.3f}" for t, s in zip(visible, scaled))
        + "; weights: "
        + ", ".join(f"{t} {w:.3f}" for t, w in zip(visible, shown))
        + f"; {'xy'[axis]} = "
        + " + ".join(f"{w:.3f} × {factor(v[axis])}" for w, v in zip(shown, VALUES))
        + f" = {float(seen.output[axis]):.3f}.",
        data={
            "query": list(q),
            "keys": [list(k) for k in KEYS[: position + 1]],
            "values": [list(v) for v in VALUES[: position + 1]],
            "axis": axis,
            "d_k": D_K,
        },
    )

    last = len(TOKENS) - 1
    while True:  # a query whose largest weight is clearly ahead of the next (0.05), so the answer is clear
        q = drawn_query(rng)
        top = attend_to(last, q).weights.sort(descending=True).values
        if top[0] - top[1] >= 0.05:
            break
    seen = attend_to(last, q)
    best = TOKENS[int(seen.weights.argmax())]
    most_ex = Exercise(
        "most_weight",
        f"“{TOKENS[last]}” sees all four tokens. Its query is q = {vector_text(q)}; the keys are "
        f"{listed(TOKENS, KEYS)}. Which token gets the largest attention weight?",
        best,
        choices=TOKENS,
        hint="The softmax keeps the order of the scores: the largest q·k gets the largest weight.",
        solution="q·k: "
        + ", ".join(f"{t} {s:.3f}" for t, s in zip(TOKENS, seen.scores.tolist()))
        + "; weights: "
        + ", ".join(f"{t} {w:.3f}" for t, w in zip(TOKENS, seen.weights.tolist()))
        + f". The largest: {best}.",
        data={"query": list(q), "keys": [list(k) for k in KEYS], "tokens": list(TOKENS)},
    )
    return [softmax_ex, output_ex, most_ex]
