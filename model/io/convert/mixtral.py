"""Mixtral (``MixtralForCausalLM``: Mixtral-8x7B and its small relatives) into the engine's
parameters.

Mistral's attention (RMSNorm, RoPE, grouped-query attention, a sliding window on every layer
where ``sliding_window`` is set) with a mixture of experts in every block in place of the MLP:
a router (``gate``) scores ``num_local_experts`` SwiGLU experts, each position goes to the
``num_experts_per_tok`` most probable, and their probabilities are renormalised to sum to 1
(``norm_top_k``). The hub's checkpoints keep the original module name ``block_sparse_moe`` and
one nn.Linear per expert (``w1`` the gate, ``w3`` the up projection, ``w2`` the down one);
transformers 5 holds the same weights as ``mlp.experts.gate_up_proj`` and ``down_proj``: both
are read (common.experts).
"""

from __future__ import annotations

import torch

from glassbox.model.engine import ModelConfig
from glassbox.model.io.convert import llama
from glassbox.model.io.convert.common import Weights, build, experts, n_experts, with_window

FAMILY = "Mixtral"


def config(hf: dict) -> ModelConfig:
    def make() -> ModelConfig:
        cfg = ModelConfig(
            **llama.settings(hf),
            attn_bias=False,
            mlp_bias=False,
            tie_embeddings=hf.get("tie_word_embeddings", False),
            n_experts=n_experts(hf),
            experts_top_k=hf["num_experts_per_tok"],
            norm_top_k=True,
        )
        return with_window(cfg, hf.get("sliding_window"), None)

    return build("mixtral", make)


def state_dict(cfg: ModelConfig, hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    s = Weights(hf, FAMILY, ("model.",))

    def feed_forward(state: dict, i: int, src: str, dst: str) -> None:
        module = "block_sparse_moe." if src + "block_sparse_moe.gate.weight" in s else "mlp."
        experts(s, state, cfg, src + module, dst + "mlp.", per_expert=("w1", "w3", "w2"))

    return llama.convert(s, cfg, feed_forward)
