"""Ablation: switch one head or one MLP neuron off and see what the next-token distribution
does. Zero ablation sets its output to 0 (a head's weighted values ``hook_z``, a neuron's
``hook_post``); mean ablation to its mean over the prompt's positions, which keeps what the
unit writes on average and removes only what varies with the position; or to its mean over a
reference prompt's positions (what it writes on other text). In a mixture-of-experts block the
neuron is one expert's (``experts.hook_post[e]``) or the shared expert's, and a routed expert's
mean is over the positions routed to it: elsewhere its output is weighted 0 anyway. Done by a
per-call edit (model/engine/edits.py): the shared model is not touched."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.analysis.architecture import require
from glassbox.model.analysis.experts import Unit, unit
from glassbox.model.engine import GlassboxError, Transformer, check_prompt, editing
from glassbox.model.engine.capture import capture

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


def ablate(
    model: Transformer,
    tokens: list[int],
    layer: int,
    head: int | None = None,
    neuron: int | None = None,
    mode: str = "zero",
    reference: list[int] | None = None,
    expert: int | str | None = None,
) -> Ablation:
    """Ablate ``head`` or ``neuron`` (exactly one) of block ``layer``; in an MoE block the neuron
    is ``expert``'s (an index, or experts.SHARED). With ``reference`` (a prompt), mean ablation
    uses the unit's mean over that prompt's positions instead."""
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
    mlp = None  # the neuron's MLP; None for a head
    if neuron is not None:
        mlp = unit(cfg, layer, expert)
        if not 0 <= neuron < mlp.width:
            raise GlassboxError(f"Neuron {neuron} does not exist (0..{mlp.width - 1})")
    # hook_z is batch × head × position × d_head; hook_post batch × position × neuron (a routed
    # expert's: batch × expert × position × neuron)
    index: tuple
    if mlp is None:
        name, index = f"blocks.{layer}.attn.hook_z", (slice(None), head)
    else:
        name = mlp.prefix + "hook_post"
        index = (slice(None), mlp.index, slice(None), neuron) if mlp.routed else (..., neuron)
    positions = -2 if mlp is None else -1  # the position axis of what the index selects
    ids = torch.tensor([tokens], device=model.device)
    reference_mean = None
    if mode == "mean" and reference is not None:
        check_prompt(cfg, reference, "The reference prompt")
        reference_mean = _unit_mean(model, reference, name, index, positions, mlp)
    with torch.no_grad(), capture(_routing_names(mlp)) as recorder:
        before = model(ids, last_only=True).logits[0, -1].double().softmax(-1)
    ran = _ran(recorder.tensors, mlp)

    def edit(tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.clone()
        if mode == "zero":
            out[index] = 0.0
        else:
            out[index] = _mean(out[index], positions, ran) if reference_mean is None else reference_mean
        return out

    with torch.no_grad(), editing({name: edit}):
        after = model(ids, last_only=True).logits[0, -1].double().softmax(-1)
    shown = f"{name}[{head}]" if mlp is None else f"{name}[{mlp.expert}, :, {neuron}]" if mlp.routed else f"{name}[:, {neuron}]"
    return Ablation(
        shown, mode if reference is None or mode == "zero" else "reference mean", before.cpu().numpy(), after.cpu().numpy()
    )


def _routing_names(mlp: Unit | None) -> list[str]:
    """What a run must record to know where a routed expert ran: its block's expert weights."""
    return [f"blocks.{mlp.layer}.mlp.hook_expert_weights"] if mlp is not None and mlp.routed else []


def _ran(recorded: dict[str, torch.Tensor], mlp: Unit | None) -> torch.Tensor | None:
    """(position,) booleans: where a routed expert ran (weight > 0); None for any other unit."""
    if mlp is None or not mlp.routed:
        return None
    return recorded[_routing_names(mlp)[0]][0, :, mlp.index] > 0


def _mean(values: torch.Tensor, positions: int, ran: torch.Tensor | None) -> torch.Tensor:
    """The mean over the position axis, or over the positions a routed expert ran on (where there
    are any: an expert that ran nowhere is weighted 0 everywhere, and any value does)."""
    if ran is None or not ran.any():
        return values.mean(dim=positions, keepdim=True)
    return values[..., ran].mean(dim=positions, keepdim=True)


def _unit_mean(
    model: Transformer, reference: list[int], name: str, index: tuple, positions: int, mlp: Unit | None
) -> torch.Tensor:
    """The unit's mean over a reference prompt (a routed expert's: over the positions routed to it there)."""
    with torch.no_grad(), capture([name, *_routing_names(mlp)]) as recorder:
        model(torch.tensor([reference], device=model.device))
    return _mean(recorder.tensors[name][index], positions, _ran(recorder.tensors, mlp))
