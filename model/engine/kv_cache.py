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
        cached = self.cached(layer)
        if cached is not None:
            k, v = torch.cat([cached[0], k], dim=2), torch.cat([cached[1], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def cached(self, layer: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """A layer's keys and values so far, or None before its first step."""
        k, v = self.keys[layer], self.values[layer]
        return None if k is None or v is None else (k, v)

    def truncated(self, length: int) -> KVCache:
        """A new cache of the first ``length`` positions (views of these tensors: ``extend``
        concatenates into new ones, so neither cache changes the other)."""
        cut = KVCache(len(self.keys))
        cut.keys = [None if k is None else k[:, :, :length] for k in self.keys]
        cut.values = [None if v is None else v[:, :, :length] for v in self.values]
        cut.length = min(self.length, length)
        return cut

    def expanded(self, n: int) -> KVCache:
        """This cache for a batch of ``n`` sequences that share its positions (views of these
        one-sequence tensors: nothing is copied until a step extends it)."""
        wide = KVCache(len(self.keys))
        wide.keys = [None if k is None else k.expand(n, -1, -1, -1) for k in self.keys]
        wide.values = [None if v is None else v.expand(n, -1, -1, -1) for v in self.values]
        wide.length = self.length
        return wide

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values if t is not None)
