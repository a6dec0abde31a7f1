"""The tied embedding's gradient in its two parts: W_E is looked up at the input and reused
as the output head, and its gradient is the sum of what each use gives it."""

from __future__ import annotations

import torch

from glassbox.model.engine import Trace
from glassbox.model.worked_example.names import slot


def embedding_gradient_parts(trace: Trace, tokens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(input part, output part) of dL/dW_E: each token's row collects dL/dE from every
    position holding it; the output part is (dL/dlogits)ᵀ · X_final over all positions."""
    d_embed = trace[slot("dL/dE").engine]
    ids = torch.tensor(tokens, device=d_embed.device)
    input_part = torch.zeros_like(trace[slot("dL/dW_E").engine]).index_add_(0, ids, d_embed)
    output_part = trace[slot("dL/dlogits").engine].T @ trace[slot("X_final").engine]
    return input_part, output_part
