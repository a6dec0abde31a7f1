"""Ablation: switch one head or one MLP neuron off and see what the next-token distribution
does. Zero ablation sets its output to 0 (a head's weighted values ``hook_z``, a neuron's
``hook_post``); mean ablation to its mean over the prompt's positions, which keeps what the
unit writes on average and removes only what varies with the position; or to its mean over a
reference prompt's positions (what it writes on other text). Done by a per-call
edit (model/engine/edits.py): the shared model is not touched."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from model.analysis.architecture import require
from model.engine import GlassboxError, Transformer, check_prompt, editing
from model.engine.capture import capture

MODES = ("zero", "mean")


@dataclass
class Ablation:
    name: str  # the edited tensor and index, e.g. blocks.1.attn.hook_z[3]
    mode: str
    before: np.ndarray  # next-token probabilities at the last position
    after: np.ndarray

    @property
    def kl(self) -> float:
        """KL(before ‖ after) in nats: how far the ablation moved the distribution."""
        p, q = self.before, self.after
        keep = p > 0
        return float(np.sum(p[keep] * (np.log(p[keep]) - np.log(np.maximum(q[keep], 1e-300)))))


def ablate(model: Transformer, tokens: list[int], layer: int, head: int | None = None, neuron: int | None = None,
           mode: str = "zero", reference: list[int] | None = None) -> Ablation:
    """Ablate ``head`` or ``neuron`` (exactly one) of block ``layer``. With ``reference`` (a
    prompt), mean ablation uses the unit's mean over that prompt's positions instead."""
    cfg = model.cfg
    check_prompt(cfg, tokens)
    if mode not in MODES:
        raise GlassboxError(f"Unknown ablation {mode!r}: zero or mean")
    if (head is None) == (neuron is None):
        raise GlassboxError("Ablate one head or one neuron")
    require(cfg, mlp=neuron is not None)
    if not 0 <= layer < cfg.n_layers:
        raise GlassboxError(f"Block {layer} does not exist (0..{cfg.n_layers - 1})")
    if head is not None and not 0 <= head < cfg.n_heads:
        raise GlassboxError(f"Head {head} does not exist (0..{cfg.n_heads - 1})")
    if neuron is not None and not 0 <= neuron < cfg.d_ff:
        raise GlassboxError(f"Neuron {neuron} does not exist (0..{cfg.d_ff - 1})")
    # hook_z is batch × head × position × d_head; hook_post batch × position × neuron
    name, index = ((f"blocks.{layer}.attn.hook_z", (slice(None), head)) if head is not None
                   else (f"blocks.{layer}.mlp.hook_post", (..., neuron)))
    positions = -2 if head is not None else -1  # the position axis of what the index selects
    reference_mean = None
    if mode == "mean" and reference is not None:
        check_prompt(cfg, reference, "The reference prompt")
        with torch.no_grad(), capture([name]) as recorder:
            model(torch.tensor([reference], device=model.device))
        reference_mean = recorder.tensors[name][index].mean(dim=positions, keepdim=True)

    def edit(tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.clone()
        if mode == "zero":
            out[index] = 0.0
        else:
            out[index] = out[index].mean(dim=positions, keepdim=True) if reference_mean is None else reference_mean
        return out

    ids = torch.tensor([tokens], device=model.device)
    with torch.no_grad():
        before = model(ids, last_only=True).logits[0, -1].double().softmax(-1)
        with editing({name: edit}):
            after = model(ids, last_only=True).logits[0, -1].double().softmax(-1)
    shown = f"{name}[{head}]" if head is not None else f"{name}[:, {neuron}]"
    return Ablation(shown, mode if reference is None or mode == "zero" else "reference mean", before.cpu().numpy(),
                    after.cpu().numpy())
