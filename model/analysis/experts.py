"""A mixture of experts read off a trace: which experts each position was routed to and with
what weight, how the prompt's token-slots spread over the experts (the load), and the MLPs of a
block as units a neuron-level tool can act on: a dense block's MLP, one routed expert, or the
shared expert (moe.py's math).

An expert's tensors in a trace (``experts.hook_pre`` …) hold every expert at every position, so
that they have fixed shapes; an expert that was not chosen at a position did not run there as far
as the output is concerned (its weight is 0), and ``Unit.ran`` says where it did."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.engine import GlassboxError, ModelConfig, Trace, Transformer

SHARED = "shared"  # the shared expert's unit, beside the routed experts' indices


def expert_label(expert: int | str) -> str:
    """ "expert 4 ([3])" for the engine's expert 3 (expert_weights[:, 3]): counted from 1 as people
    count, with the index beside it, as blocks and heads are (names.head_label); "shared expert"."""
    return "shared expert" if expert == SHARED else f"expert {int(expert) + 1} ([{expert}])"


@dataclass(frozen=True)
class Routing:
    """One MoE block's routing of the prompt's positions."""

    probs: np.ndarray  # (position, expert): the router's softmax
    weights: np.ndarray  # (position, expert): what each expert's output is multiplied by, 0 unless chosen
    chosen: np.ndarray  # (position, top_k): the chosen experts, largest weight first

    @property
    def n_experts(self) -> int:
        return self.probs.shape[1]

    @property
    def routed(self) -> np.ndarray:
        """(position, expert) booleans: the expert ran at that position."""
        mask = np.zeros(self.probs.shape, dtype=bool)
        np.put_along_axis(mask, self.chosen, True, axis=1)
        return mask

    @property
    def load(self) -> np.ndarray:
        """Per expert, how many of the prompt's token-slots (positions × top_k) it got."""
        return self.routed.sum(0)

    @property
    def share(self) -> np.ndarray:
        """Per expert, its fraction of the token-slots (f_i of the load-balancing loss; sums to 1)."""
        return self.load / self.chosen.size

    @property
    def mean_prob(self) -> np.ndarray:
        """Per expert, the router's mean probability over the positions (P_i; sums to 1)."""
        return self.probs.mean(0)


def require_moe(cfg: ModelConfig, layer: int) -> None:
    if not 0 <= layer < cfg.n_layers:
        raise GlassboxError(f"Block {layer} does not exist (0..{cfg.n_layers - 1})")
    if not cfg.is_moe(layer):
        raise GlassboxError(f"Block {layer + 1} (blocks.{layer}) has a dense MLP, not experts")


def routing(trace: Trace, cfg: ModelConfig, layer: int) -> Routing:
    """The routing of MoE block ``layer``: the chosen experts are the router's top_k, ordered as
    the engine orders them (torch.topk on the same probabilities)."""
    require_moe(cfg, layer)
    p = f"blocks.{layer}.mlp."
    probs, weights = trace[p + "hook_router_probs"], trace[p + "hook_expert_weights"]
    chosen = probs.topk(cfg.experts_top_k, dim=-1).indices
    return Routing(probs.double().cpu().numpy(), weights.double().cpu().numpy(), chosen.cpu().numpy())


@dataclass(frozen=True)
class Unit:
    """The hidden layer of one MLP of block ``layer``: the dense MLP's (``expert`` None), routed
    expert ``expert``'s, or the shared expert's (``SHARED``)."""

    layer: int
    expert: int | str | None
    width: int

    @property
    def prefix(self) -> str:
        """Its hooks' and weights' prefix."""
        p = f"blocks.{self.layer}.mlp."
        return p if self.expert is None else p + ("shared." if self.expert == SHARED else "experts.")

    @property
    def routed(self) -> bool:
        return isinstance(self.expert, int)

    @property
    def index(self) -> int:
        """A routed expert's index on the experts' axis (``expert``, typed as the int it is then)."""
        if not isinstance(self.expert, int):
            raise ValueError(f"{self.expert!r} is no routed expert: it has no index on the experts' axis")
        return self.expert

    def select(self, tensor: torch.Tensor) -> torch.Tensor:
        """Its own slice of a tensor of its prefix (a routed expert's out of every expert's)."""
        return tensor[self.index] if self.routed else tensor

    def read(self, trace: Trace, hook: str) -> torch.Tensor:
        """(position, neuron): hook ("hook_pre", "hook_post", "grad:…") of this unit."""
        grad = hook.startswith("grad:")
        return self.select(trace[("grad:" if grad else "") + self.prefix + hook.removeprefix("grad:")])

    def parameter(self, model: Transformer, name: str) -> torch.Tensor:
        """Its weight ``name`` ("W_in", "W_out", "W_gate"), this unit's slice."""
        return self.select(model.get_parameter(self.prefix + name).detach())

    def scale(self, trace: Trace) -> torch.Tensor:
        """(position,): what its output is multiplied by before it joins the block's output: 1 for a
        dense MLP (and an ungated shared expert), the expert's weight (0 where it was not chosen),
        the shared expert's gate."""
        p = f"blocks.{self.layer}.mlp."
        if self.routed:
            return trace[p + "hook_expert_weights"][:, self.index]
        if self.expert == SHARED and p + "hook_shared_gate" in trace.activations:
            return trace[p + "hook_shared_gate"]
        return torch.ones(len(trace.tokens), dtype=trace[self.prefix + "hook_post"].dtype)

    def ran(self, trace: Trace, cfg: ModelConfig) -> torch.Tensor:
        """(position,) booleans: the positions it ran on (a routed expert: those routed to it)."""
        if not self.routed:
            return torch.ones(len(trace.tokens), dtype=torch.bool)
        return torch.from_numpy(routing(trace, cfg, self.layer).routed[:, self.index])


def unit(cfg: ModelConfig, layer: int, expert: int | str | None = None) -> Unit:
    """Block ``layer``'s MLP unit, checked: an MoE block needs an expert (or SHARED), a dense one none."""
    if not 0 <= layer < cfg.n_layers:
        raise GlassboxError(f"Block {layer} does not exist (0..{cfg.n_layers - 1})")
    if not cfg.is_moe(layer):
        if expert is not None:
            raise GlassboxError(f"Block {layer + 1} (blocks.{layer}) has a dense MLP: it has no experts")
        return Unit(layer, None, cfg.d_ff)
    n_experts, d_ff_expert = _expert_sizes(cfg)
    if expert == SHARED:
        if cfg.d_ff_shared is None:
            raise GlassboxError("This model's experts have no shared expert")
        return Unit(layer, SHARED, cfg.d_ff_shared)
    if expert is None:
        raise GlassboxError(
            f"Block {layer + 1} (blocks.{layer}) is a mixture of experts: choose an expert "
            f"(0..{n_experts - 1}" + (" or the shared one)" if cfg.d_ff_shared else ")")
        )
    if not 0 <= int(expert) < n_experts:
        raise GlassboxError(f"Expert {expert} does not exist (0..{n_experts - 1})")
    return Unit(layer, int(expert), d_ff_expert)


def units(cfg: ModelConfig, layer: int) -> list[int | str | None]:
    """The units of block ``layer`` a neuron-level tool can choose from: None for a dense block;
    the routed experts, then the shared one."""
    if not cfg.is_moe(layer):
        return [None]
    return list(range(_expert_sizes(cfg)[0])) + ([SHARED] if cfg.d_ff_shared is not None else [])


def active_parameters(cfg: ModelConfig, total: int) -> int:
    """The parameters one token uses out of ``total``: each MoE block's routed experts count
    top_k times, not n_experts times (the router and a shared expert are always used)."""
    if cfg.n_experts is None:
        return total
    n_experts, d_ff_expert = _expert_sizes(cfg)
    per_expert = (3 if cfg.gated_mlp else 2) * cfg.d_model * d_ff_expert
    moe_blocks = sum(cfg.is_moe(i) for i in range(cfg.n_layers))
    return total - moe_blocks * (n_experts - cfg.experts_top_k) * per_expert


def _expert_sizes(cfg: ModelConfig) -> tuple[int, int]:
    """(n_experts, d_ff_expert) of a model with experts, where ModelConfig sets both (the types
    allow None: a dense model has neither)."""
    assert cfg.n_experts is not None and cfg.d_ff_expert is not None, "a dense model has no experts"
    return cfg.n_experts, cfg.d_ff_expert
