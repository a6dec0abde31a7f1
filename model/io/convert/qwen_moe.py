"""Qwen2-MoE and Qwen3-MoE (``Qwen2MoeForCausalLM``: Qwen1.5-MoE-A2.7B; ``Qwen3MoeForCausalLM``:
Qwen3-30B-A3B) into the engine's parameters.

Qwen2's and Qwen3's attention (llama.py) with a mixture of experts in place of the MLP: a router
(``gate``) scores ``num_experts`` SwiGLU experts of width ``moe_intermediate_size``; each position
goes to the ``num_experts_per_tok`` most probable, weighted by their probabilities, renormalised
over the chosen ones only where ``norm_topk_prob`` says so (Qwen2-MoE: not). The differences:
- Qwen2-MoE: a shared expert every position goes through (``shared_expert``, width
  ``shared_expert_intermediate_size``), its output scaled by sigmoid(x · ``shared_expert_gate``);
  q/k/v biases (``qkv_bias``), none on the output;
- Qwen3-MoE: no shared expert; QK-norm over each head; biases on all four projections or none
  (``attention_bias``);
- both: the blocks in ``mlp_only_layers``, and those whose number is not a multiple of
  ``decoder_sparse_step``, keep a dense MLP of width ``intermediate_size`` (``moe_layers``); a
  sliding window where ``use_sliding_window`` (Qwen2-MoE: on the layers ``layer_types`` marks).
The experts are read fused (transformers 5) or one nn.Linear each (the hub): common.experts.
"""

from __future__ import annotations

import torch

from glassbox.model.engine import ModelConfig
from glassbox.model.io.convert import llama
from glassbox.model.io.convert.common import Weights, build, experts, local_layers, n_experts, with_window

FAMILY = "Qwen-MoE"


def config(hf: dict) -> ModelConfig:
    kind = hf.get("model_type", "qwen2_moe")
    qwen2 = kind == "qwen2_moe"

    def make() -> ModelConfig:
        n_layers, step = hf["num_hidden_layers"], hf.get("decoder_sparse_step", 1)
        dense = hf.get("mlp_only_layers") or []
        sparse = tuple(i for i in range(n_layers) if i not in dense and (i + 1) % step == 0)
        cfg = ModelConfig(
            **llama.settings(hf),
            attn_bias=hf.get("qkv_bias", True) if qwen2 else hf.get("attention_bias", False),
            attn_out_bias=not qwen2 and hf.get("attention_bias", False),
            mlp_bias=False,
            tie_embeddings=hf.get("tie_word_embeddings", False),
            qk_norm=not qwen2,
            n_experts=n_experts(hf),
            experts_top_k=hf["num_experts_per_tok"],
            norm_top_k=hf.get("norm_topk_prob", False),
            d_ff_expert=hf["moe_intermediate_size"],
            d_ff_shared=hf["shared_expert_intermediate_size"] if qwen2 else None,
            shared_expert_gate=qwen2,
            moe_layers=None if len(sparse) == n_layers else sparse,
        )
        window = hf.get("sliding_window") if hf.get("use_sliding_window", False) else None
        return with_window(cfg, window, _local_layers(hf, qwen2))

    return build(kind, make)


def _local_layers(hf: dict, qwen2: bool) -> tuple[int, ...] | None:
    if "layer_types" in hf:
        return local_layers(hf["layer_types"])
    if qwen2:  # transformers' default layer_types for Qwen2-MoE: every other layer below max_window_layers
        return tuple(i for i in range(hf["num_hidden_layers"]) if (i + 1) % 2 and i < hf.get("max_window_layers", 28))
    return None  # Qwen3-MoE: every layer


def state_dict(cfg: ModelConfig, hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    s = Weights(hf, FAMILY, ("model.",))

    def feed_forward(state: dict, i: int, src: str, dst: str) -> None:
        src, dst = src + "mlp.", dst + "mlp."
        if not cfg.is_moe(i):
            llama.mlp(s, state, cfg, src, dst, cfg.d_ff)
            return
        experts(s, state, cfg, src, dst)
        if cfg.d_ff_shared is not None:
            llama.mlp(s, state, cfg, src + "shared_expert.", dst + "shared.", cfg.d_ff_shared)
        if cfg.shared_expert_gate:
            state[dst + "W_shared_gate"] = s.take(src + "shared_expert_gate.weight", 1, cfg.d_model)[0]

    return llama.convert(s, cfg, feed_forward)
