"""A head catalog: what each attention head does, over a set of texts.

Per block and head, from its attention pattern A (query × key) on each text, the query
positions t counted from 1 (position 0 can only attend to itself):

- previous-token: A[t, t − 1], the mean over the queries;
- self: A[t, t], the mean;
- duplicate-token: Σ A[t, s] over the earlier positions s holding t's token, the mean over
  the queries whose token came earlier;
- induction: Σ A[t, s + 1] over those same s (the token after an earlier occurrence: what an
  induction head copies), the mean over the same queries;
- entropy: −Σ A[t, k] ln A[t, k] in nats, the mean (0: one key; ln(t + 1): even).

Means pool every query of every text. On a prefix and then a sequence of distinct tokens
twice, induction and previous-token are the Circuits view's scores (circuits.head_scores),
which the tests hold them to. One text is run at a time, capturing only the patterns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.engine import GlassboxError, Transformer
from glassbox.model.engine.capture import capture

SCORES = ("previous_token", "self", "duplicate_token", "induction", "entropy")
PATTERNS = ("blocks.*.attn.hook_pattern",)


@dataclass
class HeadCatalog:
    scores: dict[str, np.ndarray]  # name → (n_layers, n_heads)
    n_texts: int
    n_queries: int  # the queries every score but duplicate-token and induction averages over
    n_repeats: int  # the queries whose token came earlier (duplicate-token, induction)

    def find(self, score: str, above: float) -> list[tuple[int, int, float]]:
        """(block, head, value) of the heads whose ``score`` is over ``above``, highest first."""
        if score not in self.scores:
            raise GlassboxError(f"score must be one of {', '.join(SCORES)}, not {score!r}")
        grid = self.scores[score]
        found = [(int(b), int(h), float(grid[b, h])) for b, h in zip(*np.nonzero(grid > above))]
        return sorted(found, key=lambda row: -row[2])


def earlier(tokens: list[int]) -> list[list[int]]:
    """For each position, the earlier positions that hold its token."""
    seen: dict[int, list[int]] = {}
    out = []
    for t, token in enumerate(tokens):
        out.append(list(seen.get(token, [])))
        seen.setdefault(token, []).append(t)
    return out


@torch.no_grad()
def head_catalog(model: Transformer, texts: list[list[int]]) -> HeadCatalog:
    """The scores above for every head of ``model`` over ``texts`` (token ids, each at least two
    tokens and within the context)."""
    cfg = model.cfg
    if cfg.n_layers == 0:
        raise GlassboxError("This model has no attention heads to catalog")
    if not texts or any(len(t) < 2 for t in texts):
        raise GlassboxError("Each text needs at least 2 tokens")
    if any(len(t) > cfg.n_ctx for t in texts):
        raise GlassboxError(f"A text is longer than the model's context of {cfg.n_ctx} tokens")
    sums = {name: np.zeros((cfg.n_layers, cfg.n_heads)) for name in SCORES}
    n_queries = n_repeats = 0
    for tokens in texts:
        with capture(PATTERNS) as recorder:
            model(torch.tensor([tokens], device=model.device))
        T = len(tokens)
        queries = torch.arange(1, T)
        repeats = [(t, s) for t, before in enumerate(earlier(tokens)) for s in before]
        rows = torch.tensor([t for t, _ in repeats], dtype=torch.long)
        keys = torch.tensor([s for _, s in repeats], dtype=torch.long)
        for i in range(cfg.n_layers):
            p = recorder.tensors[f"blocks.{i}.attn.hook_pattern"][0].double().cpu()  # head × query × key
            sums["previous_token"][i] += p[:, queries, queries - 1].sum(-1).numpy()
            sums["self"][i] += p[:, queries, queries].sum(-1).numpy()
            sums["entropy"][i] += torch.special.entr(p[:, queries]).sum((-1, -2)).numpy()
            if repeats:
                sums["duplicate_token"][i] += p[:, rows, keys].sum(-1).numpy()
                sums["induction"][i] += p[:, rows, keys + 1].sum(-1).numpy()
        n_queries += T - 1
        n_repeats += len({t for t, _ in repeats})
    scores = {name: sums[name] / (n_repeats if name in ("duplicate_token", "induction") else n_queries) for name in SCORES}
    if n_repeats == 0:
        scores["duplicate_token"][:] = scores["induction"][:] = np.nan  # no query's token came earlier
    return HeadCatalog(scores, len(texts), n_queries, n_repeats)
