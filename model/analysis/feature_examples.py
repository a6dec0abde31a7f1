"""Where each feature of a set of SAEs or transcoders fires most in a corpus: its top activations
over every position of every sequence, for the feature pages of the attribution graph (the
"top-activating examples" of Neuronpedia and SAE dashboards), computed in one pass per sequence."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from glassbox.model.engine import Transformer, run_trace
from glassbox.model.engine.sae import SparseAutoencoder


@dataclass
class TopActivations:
    """Per SAE (one per block for transcoders): its features' ``k`` largest activations over the
    corpus, largest first (k × d_sae each), with the sequence and the position of each, and the
    corpus's sequences (token ids)."""

    values: list[torch.Tensor]
    sequence: list[torch.Tensor]
    position: list[torch.Tensor]
    sequences: list[list[int]]

    def of(self, index: int, feature: int) -> list[tuple[float, int, int]]:
        """SAE ``index``'s feature ``feature``: (activation, sequence, position), only where it fired."""
        rows = zip(self.values[index][:, feature].tolist(), self.sequence[index][:, feature].tolist(),
                   self.position[index][:, feature].tolist())  # fmt: skip
        return [(v, int(s), int(p)) for v, s, p in rows if v > 0]


def top_activations(model: Transformer, saes: list[SparseAutoencoder], sequences: list[list[int]], k: int = 8) -> TopActivations:
    """Every feature's ``k`` top activations over ``sequences`` (each within the model's context)."""
    names = sorted({s.reads for s in saes})
    dtype = model.embed.W_E.dtype
    values = [torch.full((k, s.d_sae), -torch.inf, dtype=dtype) for s in saes]
    where = [torch.zeros(k, s.d_sae, 2, dtype=torch.long) for s in saes]
    with torch.no_grad():
        for number, tokens in enumerate(sequences):
            trace = run_trace(model, tokens, names=names)
            for i, sae in enumerate(saes):
                acts = sae.encode(sae.rows(trace[sae.reads])).to(dtype).cpu()  # position × d_sae
                positions = torch.arange(len(acts))[:, None].expand_as(acts)
                here = torch.stack([torch.full_like(positions, number), positions], -1)
                joined = torch.cat([values[i], acts])
                values[i], best = joined.topk(min(k, len(joined)), dim=0)
                where[i] = torch.cat([where[i], here]).gather(0, best[..., None].expand(*best.shape, 2))
    return TopActivations(values, [w[..., 0] for w in where], [w[..., 1] for w in where], sequences)
