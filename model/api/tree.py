"""``model.generate(prompt, tree=True)``: the generation tree of glassbox.model.engine.generation_tree,
with what a person asks of each node: the sampler's alternatives there, the logit lens there (how early
the model committed to its token), and the trace of a whole path, so that every tensor of a generated
token can be opened."""

from __future__ import annotations

from typing import Any

import numpy as np

from glassbox.model.analysis.residual import logit_lens, residual_points
from glassbox.model.engine.generation_tree import GenerationTree, Path
from glassbox.model.engine.sampling import GeneratedToken, Sampling

# glassbox.core's Model and Trace: not imported, as core imports this module (for generate(tree=True))
Model = Trace = Any


class Tree(GenerationTree):
    """Every sample and branch of one prompt (``paths``; ``paths[0]`` the first sample).
    ``branch(position, token, path=0)`` forces a token (text or id) at a sequence position and
    continues with the same settings and seed, reusing the KV cache up to there; ``sample(seed)``
    adds a sample with another seed; ``parting(a, b)`` is where two paths part."""

    model: Model

    def __init__(self, model: Model, prompt: str | list[int], max_new_tokens: int, sampling: Sampling = Sampling()):
        super().__init__(model, model.tokens(prompt), max_new_tokens, sampling)
        self.model = model

    def branch(self, position: int, token: int | str, path: int = 0) -> Path:  # type: ignore[override]
        return super().branch(position, self.model.token_id(token), path)

    def step(self, position: int, path: int = 0) -> GeneratedToken:
        """The new token of path ``path`` at sequence ``position``."""
        return self.paths[path].steps[position - len(self.prompt)]

    def text(self, path: int = 0) -> str:
        """A path's new tokens as text."""
        return self.model.tokenizer.decode(self.paths[path].token_ids)

    def trace(self, path: int = 0, backward: bool = False) -> Trace:
        """The trace of the prompt and the path's new tokens: every tensor at every generated position
        (the last new token's too, though nothing was generated from it)."""
        return self.model.trace(self.tokens(path), backward=backward)

    def alternatives(self, position: int, path: int = 0, k: int = 10) -> list[dict]:
        """The ``k`` most likely tokens at ``position`` under the sampler (after temperature, top-k,
        top-p; most likely first, ties in id order, nonzero ones only), each with its probability
        ``p`` there and ``p_model`` before the settings."""
        at = self.step(position, path)
        values, ids = at.after.sort(descending=True, stable=True)
        return [
            {"token": self.model.pieces[int(i)], "token_id": int(i), "p": float(v), "p_model": float(at.before[int(i)])}
            for v, i in zip(values[:k], ids[:k])
            if v > 0
        ]

    def lens(self, path: int = 0, trace: Trace | None = None) -> dict:
        """The logit lens at each new token of a path: after each block (and before the first), the
        probability the final norm and the head give the token the path holds there, and the most
        likely token then. ``p[i][j]``: new token ``i``, point ``j`` (``labels[j]``); ``committed[i]``:
        the first point from which that token stays the most likely (None if it never is)."""
        cfg, n_prompt = self.model.cfg, len(self.prompt)
        names = [name for _, name in residual_points(cfg)]
        traced = trace if trace is not None else self.model.trace(self.tokens(path), names=names)
        steps = self.paths[path].steps
        positions = [n_prompt - 1 + i for i in range(len(steps))]  # where each new token was predicted
        seen = logit_lens(self.model.model, traced, [s.token_id for s in steps], k=1, positions=positions)
        p = seen.chosen.T  # (new tokens, points)
        top = seen.top_ids[:, :, 0].T
        committed = []
        for i, s in enumerate(steps):
            ahead = top[i] == s.token_id
            stays = [j for j in range(len(ahead)) if ahead[j:].all()]
            committed.append(stays[0] if stays else None)
        return {
            "labels": seen.labels,
            "p": np.asarray(p, dtype=np.float64).tolist(),
            "top": [[self.model.pieces[int(t)] for t in row] for row in top],
            "committed": committed,
        }
