"""A mixture of experts in place of the MLP (Mixtral, Qwen-MoE, OLMoE), read like its math. At
each position x:
    router logits   r = x W_router                    one score per expert
    probabilities   p = softmax(r)                    (float32 in a half model, as transformers has it)
    weights         w_e = p_e for the experts_top_k largest p_e, renormalised to sum to 1 where
                    the model does so (norm_top_k); w_e = 0 for every other expert, and for an
                    expert over its capacity at that position (expert_capacity, GShard's C)
    out             = Σ_e w_e · expert_e(x)  [+ σ(x · W_shared_gate) · shared(x)]
Each expert is a (gated) MLP of its own weights W_gate[e], W_in[e], W_out[e], without biases; a
shared expert (Qwen2-MoE) is an MLP every position goes through, its output scaled by its gate.

Two ways to compute the sum, with the same numbers: when a capture (or an edit) wants the
experts' own tensors or their weights, every expert runs on every position, so that the tensors
have fixed shapes (expert, position, …), an expert that was not chosen simply gets weight 0, and
that weight has its gradient, expert_e(x) · ∂L/∂out, as the sum says; otherwise (the plain
forward, generation) each expert runs only on the positions routed to it, as transformers
computes it.

``load_balancing_loss`` is the auxiliary loss that trains a router to spread the positions over
its experts (Switch Transformer, eqs. 4-6; transformers' ``load_balancing_loss_func``)."""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from glassbox.model.engine.capture import hook, wants
from glassbox.model.engine.components.mlp import MLP, neurons
from glassbox.model.engine.config import ModelConfig
from glassbox.model.engine.device import widened

# the names (under "blocks.{i}.mlp.") that, captured or edited, need every expert on every position
EVERYWHERE = (
    "hook_expert_weights",
    "experts.hook_pre",
    "experts.hook_gate",
    "experts.hook_linear",
    "experts.hook_post",
    "experts.hook_out",
)


class Experts(nn.Module):
    """n_experts MLPs, their weights stacked with the expert axis first: W_in[e] is expert e's
    (d_model, width) matrix."""

    def __init__(self, cfg: ModelConfig, prefix: str):
        super().__init__()
        self.cfg, self.prefix = cfg, prefix
        E, D, Fe = cfg.n_experts, cfg.d_model, cfg.d_ff_expert
        assert E is not None and Fe is not None, "built for a mixture of experts (the config sets d_ff_expert then)"
        self.W_in = nn.Parameter(torch.zeros(E, D, Fe))
        self.W_out = nn.Parameter(torch.zeros(E, Fe, D))
        if cfg.gated_mlp:
            self.W_gate = nn.Parameter(torch.zeros(E, D, Fe))

    def _product(self, x: torch.Tensor, name: str, expert: int | None = None) -> torch.Tensor:
        """x times one expert's W_name, or, with no expert given, x (b, 1, t, d) times every
        expert's at once, (b, 1, t, d) @ (e, d, f) → (b, e, t, f)."""
        W = getattr(self, "W_" + name)
        return x @ (W if expert is None else W[expert])

    def everywhere(self, x: torch.Tensor) -> torch.Tensor:
        """Every expert's output at every position, (batch, expert, position, d_model), hooked."""
        p = self.prefix
        return hook(p + "hook_out", self._product(neurons(self.cfg, p, x[:, None], self._product), "out"))

    def routed(self, x: torch.Tensor, weights: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """Σ_e weights[e] · expert_e(x), each expert computed on the positions routed to it alone
        (its hooks are not wanted: nothing is recorded). x: (batch, position, d_model); weights:
        (batch, position, expert); chosen: (batch, position, top_k) expert indices."""
        rows_x, rows_w = x.reshape(-1, x.shape[-1]), weights.reshape(-1, weights.shape[-1])
        chosen = chosen.reshape(-1, chosen.shape[-1])
        total = torch.zeros_like(rows_x)
        for e in chosen.unique().tolist():
            rows = (chosen == e).any(dim=-1).nonzero()[:, 0]
            expert = partial(self._product, expert=e)
            out = expert(neurons(self.cfg, self.prefix, rows_x[rows], expert), "out")
            total = total.index_add(0, rows, out * rows_w[rows, e, None])
        return total.reshape(x.shape)


class MoE(nn.Module):
    def __init__(self, cfg: ModelConfig, prefix: str):
        super().__init__()
        self.cfg, self.prefix = cfg, prefix
        assert cfg.n_experts is not None, "built for a mixture of experts (Block asks cfg.is_moe)"
        self.W_router = nn.Parameter(torch.zeros(cfg.d_model, cfg.n_experts))
        if cfg.shared_expert_gate:
            self.W_shared_gate = nn.Parameter(torch.zeros(cfg.d_model))
        self.experts = Experts(cfg, prefix + "experts.")
        if cfg.d_ff_shared is not None:
            self.shared = MLP(cfg, prefix + "shared.", cfg.d_ff_shared)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p, cfg = self.prefix, self.cfg
        logits = hook(p + "hook_router_logits", x @ self.W_router)
        probs = hook(p + "hook_router_probs", widened(logits).softmax(dim=-1))
        top, chosen = probs.topk(cfg.experts_top_k, dim=-1)
        if cfg.norm_top_k:
            top = top / top.sum(dim=-1, keepdim=True)
        weights = torch.zeros_like(probs).scatter(-1, chosen, top)
        if cfg.expert_capacity is not None:
            weights = weights * within_capacity(weights > 0, cfg.expert_capacity, cfg.experts_top_k)
        weights = hook(p + "hook_expert_weights", weights)
        weights = weights.to(x.dtype)  # the experts' outputs are weighted in the model's precision, as in transformers
        if any(wants(p + name) for name in EVERYWHERE):
            out = torch.einsum("bte,betd->btd", weights, self.experts.everywhere(x))
        else:
            out = self.experts.routed(x, weights, chosen)
        if cfg.d_ff_shared is None:
            return out
        shared = hook(p + "shared.hook_out", self.shared(x))
        if cfg.shared_expert_gate:
            shared = hook(p + "hook_shared_gate", torch.sigmoid(x @ self.W_shared_gate))[..., None] * shared
        return out + shared


def within_capacity(routed: torch.Tensor, factor: float, top_k: int) -> torch.Tensor:
    """Which routings an expert with GShard's capacity takes: ``routed`` (batch, position, expert)
    says which experts each position chose; each expert takes, in position order, at most
    ceil(factor · positions · top_k / n_experts) of a sequence's positions, and the rest are
    dropped (the position keeps its other expert, or only the residual stream). The weights are
    not renormalised after a drop, as in GShard and Switch."""
    positions, n_experts = routed.shape[-2], routed.shape[-1]
    capacity = math.ceil(factor * positions * top_k / n_experts)
    return routed & (routed.cumsum(dim=-2) <= capacity)


def load_balancing_loss(router_probs: torch.Tensor, top_k: int) -> torch.Tensor:
    """The auxiliary loss that pushes a router to spread the positions evenly over its experts:
        N · Σ_i f_i · P_i
    with N experts, f_i the number of positions that chose expert i among their top_k divided by
    the number of positions (so Σ_i f_i = top_k), and P_i the mean probability the router gives
    expert i. Balanced routing gives its least value, top_k. ``router_probs``: (..., expert), the
    ``hook_router_probs`` of one block or several stacked: every leading axis is pooled, as
    transformers' ``load_balancing_loss_func`` pools all blocks' positions. The choice is
    recomputed from the probabilities, as there; f_i is a count, so only P_i has a gradient."""
    probs = router_probs.reshape(-1, router_probs.shape[-1])
    n_experts = probs.shape[-1]
    chosen = probs.topk(top_k, dim=-1).indices
    fraction = F.one_hot(chosen, n_experts).sum(dim=(0, 1)).to(probs.dtype) / probs.shape[0]  # f_i
    return n_experts * (fraction * probs.mean(dim=0)).sum()
