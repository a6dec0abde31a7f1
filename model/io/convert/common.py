"""What the converters share: reading a foreign config.json with clear errors, its RoPE and
layer-type settings in both the hub's older spelling and transformers 5's, and a foreign
state dict read weight by weight, each checked for shape before it is split into heads (or,
for a mixture of experts, stacked by expert)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from glassbox.model.engine import GlassboxError, ModelConfig

LOCAL = ("sliding_attention", "local")  # names of a windowed layer in layer_types / attention_types


def build(family: str, make: Callable[[], ModelConfig]) -> ModelConfig:
    """``make()``'s config, with a missing key or a value of the wrong type as one clear message
    (ModelConfig itself checks the sizes: positive integers, heads dividing the width)."""
    try:
        return make()
    except KeyError as exc:
        raise GlassboxError(f"{family} config.json lacks {exc}") from None
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise GlassboxError(f"{family} config.json has a value of the wrong type ({exc})") from None


def rope_settings(hf: dict, layer_type: str | None = None) -> dict:
    """ModelConfig's RoPE fields from ``rope_parameters`` (transformers 5, possibly one dict per
    layer type) or ``rope_theta`` + ``rope_scaling`` (the hub's older config files)."""
    params = hf.get("rope_parameters")
    if isinstance(params, dict) and layer_type in params and isinstance(params[layer_type], dict):
        params = params[layer_type]
    if not isinstance(params, dict):
        params = dict(hf.get("rope_scaling") or {}, rope_theta=hf.get("rope_theta", 10000.0))
    kind = params.get("rope_type", params.get("type", "default"))
    settings = {"rope_base": float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))}
    if kind == "default":
        return settings
    if kind == "linear":
        return settings | {"rope_scaling": "linear", "rope_factor": float(params["factor"])}
    if kind == "llama3":
        return settings | {
            "rope_scaling": "llama3",
            "rope_factor": float(params["factor"]),
            "rope_low_freq_factor": float(params["low_freq_factor"]),
            "rope_high_freq_factor": float(params["high_freq_factor"]),
            "rope_original_ctx": int(params["original_max_position_embeddings"]),
        }
    raise GlassboxError(f"RoPE scaling {kind!r} is not supported (Glassbox computes default, linear and llama3)")


def local_layers(layer_types: list | None) -> tuple[int, ...] | None:
    """The windowed layers' indices from a per-layer list of types (None when there is no list)."""
    if layer_types is None:
        return None
    return tuple(i for i, kind in enumerate(layer_types) if kind in LOCAL)


def with_window(cfg: ModelConfig, window, layers: tuple[int, ...] | None) -> ModelConfig:
    """``cfg`` with local attention of ``window`` positions on ``layers`` (none: no window)."""
    if not window or layers == ():
        return cfg
    return dataclasses.replace(cfg, window=window, local_layers=layers)


class Weights:
    """A foreign state dict read by name, each weight checked for shape before use."""

    def __init__(self, state: dict[str, torch.Tensor], family: str, prefixes: tuple[str, ...] = ()):
        self.family = family
        self.state = {}
        for key, value in state.items():
            for prefix in prefixes:
                key = key.removeprefix(prefix)
            self.state[key] = value

    def __contains__(self, key: str) -> bool:
        return key in self.state

    def take(self, key: str, *shape: int) -> torch.Tensor:
        """The weight stored under ``key`` (or under any of the names "a|b" lists), of ``shape``."""
        key = next((k for k in key.split("|") if k in self.state), key)
        if key not in self.state:
            raise GlassboxError(f"The {self.family} checkpoint lacks the weight {key!r}")
        if shape and tuple(self.state[key].shape) != shape:  # checked before it is split or reshaped
            raise GlassboxError(f"{key} has shape {list(self.state[key].shape)}, expected {list(shape)}")
        return self.state[key]


def heads_in(w: torch.Tensor, heads: int, d_head: int) -> torch.Tensor:
    """An nn.Linear weight into heads, (heads·d_head, d_model) → (heads, d_model, d_head)."""
    return w.reshape(heads, d_head, w.shape[-1]).permute(0, 2, 1)


def heads_out(w: torch.Tensor, heads: int, d_head: int) -> torch.Tensor:
    """An output projection's nn.Linear weight, (d_model, heads·d_head) → (heads, d_head, d_model)."""
    return w.T.reshape(heads, d_head, w.shape[0])


def rope_parameters(hf: dict) -> dict:
    """The config's ``rope_parameters`` (transformers 5); {} where it has none (or not a dict)."""
    params = hf.get("rope_parameters")
    return params if isinstance(params, dict) else {}


def rotary_dim(hf: dict, d_head: int, default_factor: float = 1.0) -> int:
    """How many features of each head RoPE rotates: d_head × partial_rotary_factor (or the
    older ``rotary_pct``), rounded down as transformers does."""
    params = rope_parameters(hf)
    factor = params.get("partial_rotary_factor", hf.get("partial_rotary_factor", hf.get("rotary_pct", default_factor)))
    return int(d_head * factor)


def linear_mlp(s: Weights, state: dict, src_in: str, src_out: str, dst: str, cfg: ModelConfig) -> None:
    """A plain MLP stored as two nn.Linear layers with biases (``src_in``, ``src_out``: their
    names without ".weight"), into the engine's (in, out) W_in, b_in, W_out, b_out under ``dst``."""
    D, F = cfg.d_model, cfg.d_ff
    state[dst + "W_in"] = s.take(src_in + ".weight", F, D).T
    state[dst + "b_in"] = s.take(src_in + ".bias", F)
    state[dst + "W_out"] = s.take(src_out + ".weight", D, F).T
    state[dst + "b_out"] = s.take(src_out + ".bias", D)


def n_experts(hf: dict) -> int:
    """How many routed experts: ``num_experts`` or ``num_local_experts`` (a family's config class
    maps one name onto the other, and transformers 5 writes the one it keeps, not always the
    spelling of the hub's files)."""
    return hf["num_experts"] if "num_experts" in hf else hf["num_local_experts"]


def experts(
    s: Weights,
    state: dict,
    cfg: ModelConfig,
    src: str,
    dst: str,
    per_expert: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj"),
) -> None:
    """A mixture of experts' router (``src`` + "gate.weight": (experts, d_model)) and gated experts,
    into the engine's W_router and experts.W_gate, W_in, W_out under ``dst`` (the expert axis
    first, each matrix (in, out)). The experts are read in either layout: fused, as transformers 5
    holds them (``experts.gate_up_proj``: (experts, 2·width, d_model), the gate's rows first;
    ``experts.down_proj``), or one nn.Linear per expert, as the hub's checkpoints and
    ``save_pretrained`` store them (``experts.{e}.<name>.weight``, ``per_expert`` naming the gate,
    up and down projections)."""
    E, D, Fe = cfg.n_experts, cfg.d_model, cfg.d_ff_expert
    assert E is not None and Fe is not None, "ModelConfig sets both for a mixture of experts"
    state[dst + "W_router"] = s.take(src + "gate.weight", E, D).T
    if src + "experts.gate_up_proj" in s:
        gate_up = s.take(src + "experts.gate_up_proj", E, 2 * Fe, D)
        gate, up = gate_up[:, :Fe], gate_up[:, Fe:]
        down = s.take(src + "experts.down_proj", E, D, Fe)
    else:
        gate, up, down = (
            torch.stack([s.take(f"{src}experts.{e}.{name}.weight", *shape) for e in range(E)])
            for name, shape in zip(per_expert, ((Fe, D), (Fe, D), (D, Fe)))
        )
    state[dst + "experts.W_gate"] = gate.transpose(1, 2)
    state[dst + "experts.W_in"] = up.transpose(1, 2)
    state[dst + "experts.W_out"] = down.transpose(1, 2)
