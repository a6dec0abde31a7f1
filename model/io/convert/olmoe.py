"""OLMoE (``OlmoeForCausalLM``: allenai/OLMoE-1B-7B) into the engine's parameters.

Llama's blocks with a mixture of experts in every block in place of the MLP (``num_experts``
SwiGLU experts, ``num_experts_per_tok`` per position, their probabilities renormalised only where
``norm_topk_prob`` says so), and two changes to the attention:
- QK-norm over the whole projected q (and k), all heads' features at once, before the split into
  heads (``qk_norm_width`` "full": the engine's ``attn.q_norm_full``, ``attn.k_norm_full``), where
  Qwen 3 norms each head on its own;
- where ``clip_qkv`` is set, q, k and v clamped to ±clip_qkv after the norm, before RoPE.
Biases on all four projections or none (``attention_bias``). The experts are read fused
(transformers 5) or one nn.Linear each (the hub): common.experts.
"""

from __future__ import annotations

import torch

from glassbox.model.engine import ModelConfig
from glassbox.model.io.convert import llama
from glassbox.model.io.convert.common import Weights, build, experts, n_experts

FAMILY = "OLMoE"


def config(hf: dict) -> ModelConfig:
    def make() -> ModelConfig:
        bias = hf.get("attention_bias", False)
        return ModelConfig(
            **llama.settings(hf),
            attn_bias=bias,
            attn_out_bias=bias,
            mlp_bias=False,
            tie_embeddings=hf.get("tie_word_embeddings", False),
            qk_norm=True,
            qk_norm_width="full",
            clip_qkv=hf.get("clip_qkv"),
            n_experts=n_experts(hf),
            experts_top_k=hf["num_experts_per_tok"],
            norm_top_k=hf.get("norm_topk_prob", False),
        )

    return build("olmoe", make)


def state_dict(cfg: ModelConfig, hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    s = Weights(hf, FAMILY, ("model.",))
    return llama.convert(s, cfg, lambda state, i, src, dst: experts(s, state, cfg, src + "mlp.", dst + "mlp."))
