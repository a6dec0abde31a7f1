"""The lesson on the causal mask: (a) the attention lesson's four tokens, their scores before and after the mask
and the weights after the softmax; (b) the bundled model's attention on a prompt with the mask and
without it (``variant(model, causal=False)``: the same weights, attending both ways as an encoder
does); (c) what that does to the last position's prediction, and whether earlier positions read
later tokens.

JSON has no infinity: ``figures`` writes a masked score (−∞) as null."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.course.attention_by_hand import D_K as TOY_D_K
from glassbox.model.course.attention_by_hand import QUERIES, TOKENS, similarity
from glassbox.model.course.exercises import Exercise, draw
from glassbox.model.engine import Transformer, check_prompt, run_trace, variant

PROMPT = "the cat sat on the mat"
TOP = 5  # next tokens shown with and without the mask
TRACED = ["blocks.*.attn.hook_scores", "blocks.*.attn.hook_scores_masked", "blocks.*.attn.hook_pattern", "hook_probs"]


@dataclass
class Toy:
    """The attention lesson's four tokens, each with its own query: scores q·k/√2, masked, softmaxed."""

    tokens: tuple[str, ...]
    scores: torch.Tensor  # (4, 4) query row × key column
    masked: torch.Tensor  # −∞ above the diagonal
    weights: torch.Tensor  # rows sum to 1, 0 above the diagonal


def causal_mask(n: int) -> torch.Tensor:
    """(n, n): 0 where a query may see a key (itself and earlier), −∞ on later keys."""
    return torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)


def toy() -> Toy:
    scores = similarity(QUERIES) / math.sqrt(TOY_D_K)
    masked = scores + causal_mask(len(TOKENS))
    return Toy(TOKENS, scores, masked, torch.softmax(masked, dim=-1))


@dataclass
class Pass:
    """One pass over the prompt: every block's and head's scores and pattern, and the last
    position's next-token probabilities."""

    scores: np.ndarray  # (block, head, query, key), q·k × scale
    masked: np.ndarray  # the scores the softmax receives (−∞ on hidden keys)
    pattern: np.ndarray  # (block, head, query, key)
    last_probs: np.ndarray  # (vocab,) float64

    @classmethod
    def of(cls, model: Transformer, tokens: list[int]) -> Pass:
        trace = run_trace(model, tokens, names=TRACED)
        blocks = range(model.cfg.n_layers)

        def stacked(name: str) -> np.ndarray:
            return np.stack([trace[f"blocks.{b}.attn.{name}"].float().numpy() for b in blocks])

        return cls(
            stacked("hook_scores"),
            stacked("hook_scores_masked"),
            stacked("hook_pattern"),
            trace["hook_probs"][-1].double().numpy(),
        )


@dataclass
class Comparison:
    """The prompt with the mask (the model as trained) and without it (the encoder variant)."""

    tokens: list[int]
    masked: Pass
    open: Pass
    # the largest change of an earlier position's logits when the last token is replaced, with the
    # mask and without it; None for a one-token prompt (no earlier position)
    earlier_shift: tuple[float, float] | None
    replacement: int | None  # what the last token was replaced by


def encoder(model: Transformer) -> Transformer:
    """The model's own weights, every position attending to every other."""
    return variant(model, causal=False)


def compare(model: Transformer, tokens: list[int]) -> Comparison:
    """Four passes at most: the prompt with and without the mask, then the same with its last
    token replaced (by the model's second choice after the last but one token)."""
    check_prompt(model.cfg, tokens)
    both = (model, encoder(model))
    masked, open_ = (Pass.of(m, tokens) for m in both)
    if len(tokens) < 2:
        return Comparison(tokens, masked, open_, None, None)
    replacement = replacement_for(model, tokens)
    changed = tokens[:-1] + [replacement]
    shifts = tuple(earlier_logit_shift(m, tokens, changed) for m in both)
    return Comparison(tokens, masked, open_, shifts, replacement)


def replacement_for(model: Transformer, tokens: list[int]) -> int:
    """A plausible other last token: the masked model's likeliest one after the last but one,
    other than the actual last token."""
    logits = run_trace(model, tokens[:-1], names=["hook_logits"])["hook_logits"][-1]
    return next(int(i) for i in logits.argsort(descending=True) if int(i) != tokens[-1])


def earlier_logit_shift(model: Transformer, tokens: list[int], changed: list[int]) -> float:
    """The largest |logit change| over every position but the last when only the last token differs."""
    logits = [run_trace(model, t, names=["hook_logits"])["hook_logits"][:-1].double() for t in (tokens, changed)]
    return float((logits[0] - logits[1]).abs().max())


def top_tokens(probs: np.ndarray, k: int = TOP) -> list[tuple[int, float]]:
    """The k likeliest next tokens (ties: the lower id first) and their probabilities."""
    order = np.lexsort((np.arange(len(probs)), -probs))[:k]
    return [(int(i), float(probs[i])) for i in order]


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    """Half the summed |difference|: the share of probability that moved, 0 (same) to 1 (disjoint)."""
    return 0.5 * float(np.abs(np.asarray(p, np.float64) - np.asarray(q, np.float64)).sum())


def later_share(pattern: np.ndarray) -> float | None:
    """The mean, over every position (the last included: it has no later token, its share is 0),
    of the weight it puts on later positions (0 with the mask); None for a one-token prompt."""
    n = pattern.shape[-1]
    if n < 2:
        return None
    return float(np.triu(np.asarray(pattern, np.float64), 1).sum(-1).mean())


def jsonable(matrix: np.ndarray | torch.Tensor) -> list[list[float | None]]:
    """Rows of floats, −∞ as None (JSON has no infinity)."""
    return [[float(v) if math.isfinite(v) else None for v in row] for row in np.asarray(matrix, np.float64)]


def named(loaded, ranked: list[tuple[int, float]]) -> list[dict]:
    return [{"token": loaded.pieces[i], "id": i, "p": p} for i, p in ranked]


def figures(loaded) -> dict:
    """The four tokens by hand, then the bundled model on "the cat sat on the mat": block 0 head
    0's scores before and after the mask (−∞ as null), its weights with and without the mask, the
    top next tokens both ways and the total variation distance between the two distributions."""
    small = toy()
    tokens = loaded.encode(PROMPT)
    seen = compare(loaded.model, tokens)
    with_mask, without = seen.masked.last_probs, seen.open.last_probs
    return {
        "toy": {
            "tokens": list(small.tokens),
            "scores": jsonable(small.scores),
            "masked_scores": jsonable(small.masked),
            "weights": jsonable(small.weights),
        },
        "masked_is": "null: a score of −∞ (JSON has no infinity)",
        "prompt": PROMPT,
        "tokens": [loaded.pieces[t] for t in tokens],
        "block": 0,
        "head": 0,
        "scores": jsonable(seen.masked.scores[0, 0]),
        "masked_scores": jsonable(seen.masked.masked[0, 0]),
        "weights_with_mask": jsonable(seen.masked.pattern[0, 0]),
        "weights_without_mask": jsonable(seen.open.pattern[0, 0]),
        "later_share_without_mask": later_share(seen.open.pattern[0, 0]),
        "top_with_mask": named(loaded, top_tokens(with_mask)),
        "top_without_mask": named(loaded, top_tokens(without)),
        "total_variation": total_variation(with_mask, without),
        "last_token_replaced_by": loaded.pieces[seen.replacement],
        "earlier_logit_shift_with_mask": seen.earlier_shift[0],
        "earlier_logit_shift_without_mask": seen.earlier_shift[1],
    }


# --- exercises ------------------------------------------------------------------------------

SENTENCES = (
    "the cat sat on the mat",
    "Lily gave the dog a big bone",
    "Max found a red ball in the park",
    "the sun rose over the quiet town",
)  # the visible-keys exercise's words, one token each


def span(words: list[str], first: int, last: int) -> str:
    """Positions first … last (0-based, inclusive) as the learner counts them (from 1), with their words."""
    where = f"position {first + 1}" if first == last else f"positions {first + 1} to {last + 1}"
    return f"{where}: {' '.join(words[first : last + 1])}"


def exercises(seed: int, loaded=None) -> list[Exercise]:
    """How many scores the mask keeps, which keys a query sees, and one weight after the mask
    (loaded is not used)."""
    rng = draw("mask", seed)

    n = int(rng.integers(3, 257))
    kept = int(torch.isfinite(causal_mask(n)).sum())
    kept_ex = Exercise(
        "kept",
        f"A sequence of {n} tokens gives {n} × {n} = {n * n:,} scores in one head. How many of them does the "
        "causal mask keep (not set to −∞)?",
        kept,
        unit="scores",
        hint="Position 1 sees 1 key, position 2 sees 2, …: add them up.",
        solution=f"1 + 2 + … + {n} = {n}·{n + 1}/2 = {kept:,} kept; the other {n * n - kept:,} = {n}·{n - 1}/2 are "
        "later keys, set to −∞.",
        data={"length": n},
    )

    words = str(rng.choice(SENTENCES)).split()
    query = int(rng.integers(1, len(words) - 1))  # neither end, so the four options differ
    row = causal_mask(len(words))[query]
    seen = [j for j in range(len(words)) if row[j] == 0]
    right = span(words, seen[0], seen[-1])
    options = [right, span(words, query, len(words) - 1), span(words, 0, len(words) - 1), span(words, 0, query - 1)]
    visible_ex = Exercise(
        "visible",
        f"In “{' '.join(words)}” (one token a word), which keys may the query at position {query + 1} "
        f"(“{words[query]}”) attend to under the causal mask?",
        right,
        choices=tuple(options[i] for i in rng.permutation(len(options))),
        hint="A decoder's query sees itself and every token before it, never a later one.",
        solution=f"Its row of the mask is 0 at positions 1 to {query + 1} and −∞ after: {right}.",
        data={"words": words, "query": query},
    )

    n = int(rng.integers(4, 7))
    query = int(rng.integers(1, n - 1))  # at least one key before it and one after
    key = int(rng.integers(0, query + 1))
    scores = [round(float(x), 1) + 0.0 for x in rng.uniform(-2.0, 3.0, n)]  # + 0.0: never −0
    weights = torch.softmax(torch.tensor(scores, dtype=torch.float64) + causal_mask(n)[query], dim=0).tolist()
    exps = [math.exp(s) for s in scores[: query + 1]]
    weight_ex = Exercise(
        "masked_weight",
        f"The query at position {query + 1} of {n} has the scores "
        f"{', '.join(f'{s:g}' for s in scores)} for the keys at positions 1 to {n}. After the causal mask and the "
        f"softmax, what weight does it give the key at position {key + 1}? Answer to 3 decimals.",
        weights[key],
        tolerance=1e-3,
        hint=f"The mask sets the scores after position {query + 1} to −∞ (weight 0); the softmax runs over the rest.",
        solution=f"Kept: {', '.join(f'{s:g}' for s in scores[: query + 1])}; their exponentials "
        f"{', '.join(f'{e:.3f}' for e in exps)} add up to {sum(exps):.3f}; e^{scores[key]:g} / {sum(exps):.3f} "
        f"= {weights[key]:.4f}.",
        data={"scores": scores, "query": query, "key": key},
    )
    return [kept_ex, visible_ex, weight_ex]
