"""Gemma, Gemma 2 and Gemma 3 (``GemmaForCausalLM``, ``Gemma2ForCausalLM``,
``Gemma3ForCausalLM`` with a ``gemma3_text`` config: gemma-3-270m, gemma-2-2b) into the
engine's parameters.

What differs from Llama:
- the embedding rows are multiplied by √d_model;
- RMSNorm multiplies by (1 + w): the converter stores 1 + w as the engine's γ (``NORM_OFFSET``),
  computed in float64, so the engine's plain RMSNorm gives the same numbers and the same
  gradients (a constant shift does not change one);
- GeGLU: the gated MLP with tanh-GELU;
- Gemma 2 and 3: a norm on each sublayer's output as well as before it (``post_attention_layernorm``
  is the attention's post norm, ``pre_feedforward_layernorm`` the MLP's pre norm), scores scaled by
  ``query_pre_attn_scalar``^-½, sliding-window layers (``layer_types``: every other layer in
  Gemma 2, five of every six in Gemma 3); Gemma 2 soft-caps the scores and the final logits;
- Gemma 3: QK-norm, and the sliding layers' own RoPE base (``rope_local_base_freq``, unscaled).
"""

from __future__ import annotations

import torch

from glassbox.model.engine import ModelConfig
from glassbox.model.io.convert import llama
from glassbox.model.io.convert.common import Weights, build, local_layers, rope_settings, with_window

FAMILY = "Gemma"
NORM_OFFSET = 1.0  # γ = 1 + w
ACTIVATIONS = {
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu_tanh",  # Gemma's "gelu" means the tanh one
    "gelu_new": "gelu_tanh",
    "silu": "silu",
}


def config(hf: dict) -> ModelConfig:
    kind = hf.get("model_type", "gemma")
    later = kind != "gemma"  # Gemma 2 and 3

    def make() -> ModelConfig:
        D, H = hf["hidden_size"], hf["num_attention_heads"]
        n_layers = hf["num_hidden_layers"]
        act = hf.get("hidden_activation") or hf.get("hidden_act") or "gelu_pytorch_tanh"
        rope = rope_settings(hf, "full_attention")
        if kind == "gemma3_text":
            local_params = (hf.get("rope_parameters") or {}).get("sliding_attention") or {}
            rope["local_rope_base"] = float(local_params.get("rope_theta", hf.get("rope_local_base_freq", 10000.0)))
        cfg = ModelConfig(
            vocab_size=hf["vocab_size"],
            n_ctx=hf["max_position_embeddings"],
            d_model=D,
            n_layers=n_layers,
            n_heads=H,
            n_kv_heads=hf.get("num_key_value_heads") or H,
            d_head=hf.get("head_dim", 256),
            d_ff=hf["intermediate_size"],
            norm="rmsnorm",
            norm_eps=hf.get("rms_norm_eps", 1e-6),
            activation=ACTIVATIONS[act],
            gated_mlp=True,
            positional="rope",
            **rope,
            attn_bias=hf.get("attention_bias", False),
            mlp_bias=False,
            tie_embeddings=hf.get("tie_word_embeddings", True),
            embed_scale=D**0.5,
            post_norms=later,
            qk_norm=kind == "gemma3_text",
            attn_scale=hf.get("query_pre_attn_scalar", 256) ** -0.5 if later else None,
            attn_softcap=hf.get("attn_logit_softcapping", 50.0 if kind == "gemma2" else None) if later else None,
            final_softcap=hf.get("final_logit_softcapping", 30.0 if kind == "gemma2" else None) if later else None,
        )
        if not later:
            return cfg
        # the period of local layers: hub files spell it with or without a leading underscore
        every = 2 if kind == "gemma2" else hf.get("sliding_window_pattern", hf.get("_sliding_window_pattern", 6))
        types = hf.get("layer_types") or ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(n_layers)]
        return with_window(cfg, hf.get("sliding_window", 4096), local_layers(types))

    return build(kind, make)


def state_dict(cfg: ModelConfig, hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    s = Weights(hf, FAMILY, ("model.",))
    D = cfg.d_model

    def norm(key: str, size: int = D) -> torch.Tensor:
        return s.take(key, size).double() + NORM_OFFSET

    state = {"embed.W_E": s.take("embed_tokens.weight", cfg.vocab_size, D), "ln_final.w": norm("norm.weight")}
    if not cfg.tie_embeddings:
        state["unembed.W_U"] = s.take("lm_head.weight", cfg.vocab_size, D).T
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"blocks.{i}."
        state[dst + "ln1.w"] = norm(src + "input_layernorm.weight")
        if cfg.post_norms:
            state[dst + "ln1_post.w"] = norm(src + "post_attention_layernorm.weight")
            state[dst + "ln2.w"] = norm(src + "pre_feedforward_layernorm.weight")
            state[dst + "ln2_post.w"] = norm(src + "post_feedforward_layernorm.weight")
        else:
            state[dst + "ln2.w"] = norm(src + "post_attention_layernorm.weight")
        llama.attention(s, state, cfg, src + "self_attn.", dst + "attn.")
        if cfg.qk_norm:
            for which in ("q_norm", "k_norm"):
                state[f"{dst}attn.{which}.w"] = norm(f"{src}self_attn.{which}.weight", cfg.d_head)
        llama.mlp(s, state, cfg, src + "mlp.", dst + "mlp.", cfg.d_ff)
    return state
