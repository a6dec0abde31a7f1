"""The keys and values of the positions seen so far, so that generation feeds one new token."""

from __future__ import annotations

import torch


class KVCache:
    """Each layer's keys and values for the positions seen so far (after RoPE, before the
    key/value heads are shared out), so that generation feeds the model only the new token.
    Belongs to one generation: never stored on the shared model."""

    def __init__(self, n_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers
        self.length = 0  # positions already cached

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this step's keys and values (batch, heads, new positions, d_head); return all."""
        if self.keys[layer] is not None:
            k, v = torch.cat([self.keys[layer], k], dim=2), torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values if t is not None)
