"""GPT-NeoX (``GPTNeoXForCausalLM``: Pythia and its training checkpoints) into the engine's
parameters.

What differs from GPT-2: a parallel block (attention and MLP both read the block's input, and
both outputs join the residual stream together), RoPE on the first 25% of each head's features
(``rotary_pct``), an untied output head ``embed_out``, exact GELU, and one fused
``query_key_value`` matrix whose output features are laid out head by head, [q | k | v] within
each head (not all queries, then all keys, as GPT-2's ``c_attn``). Pythia's embedding has more
rows (50,304) than its tokenizer has pieces (50,277); the extra ids are labelled ``<id N>``.
"""

from __future__ import annotations

import torch

from glassbox.model.engine import ModelConfig
from glassbox.model.io.convert.common import Weights, build, heads_out, linear_mlp, rope_parameters, rotary_dim

FAMILY = "GPT-NeoX"


def config(hf: dict) -> ModelConfig:
    def make() -> ModelConfig:
        D, H = hf["hidden_size"], hf["num_attention_heads"]
        params = rope_parameters(hf)
        return ModelConfig(
            vocab_size=hf["vocab_size"],
            n_ctx=hf["max_position_embeddings"],
            d_model=D,
            n_layers=hf["num_hidden_layers"],
            n_heads=H,
            d_ff=hf["intermediate_size"],
            norm_eps=hf.get("layer_norm_eps", 1e-5),
            activation={"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh", "relu": "relu"}[
                hf.get("hidden_act", "gelu")
            ],
            positional="rope",
            rope_base=float(params.get("rope_theta", hf.get("rotary_emb_base", 10000.0))),
            rotary_dim=rotary_dim(hf, D // H, 0.25),
            parallel_block=hf.get("use_parallel_residual", True),
            attn_bias=hf.get("attention_bias", True),
            tie_embeddings=hf.get("tie_word_embeddings", False),
        )

    return build(FAMILY, make)


def state_dict(cfg: ModelConfig, hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    s = Weights(hf, FAMILY, ("gpt_neox.",))
    H, D, dh = cfg.n_heads, cfg.d_model, cfg.d_head
    state = {
        "embed.W_E": s.take("embed_in.weight", cfg.vocab_size, D),
        "ln_final.w": s.take("final_layer_norm.weight", D),
        "ln_final.b": s.take("final_layer_norm.bias", D),
    }
    if not cfg.tie_embeddings:
        state["unembed.W_U"] = s.take("embed_out.weight|lm_head.weight", cfg.vocab_size, D).T  # on disk | in transformers 5
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"blocks.{i}."
        for ln_src, ln_dst in (("input_layernorm", "ln1"), ("post_attention_layernorm", "ln2")):
            state[f"{dst}{ln_dst}.w"] = s.take(f"{src}{ln_src}.weight", D)
            state[f"{dst}{ln_dst}.b"] = s.take(f"{src}{ln_src}.bias", D)
        # (3·D, D) → (heads, [q k v], d_head, D): each head's q, k and v rows are adjacent
        qkv = s.take(src + "attention.query_key_value.weight", 3 * D, D).reshape(H, 3, dh, D)
        for j, name in enumerate("QKV"):
            state[f"{dst}attn.W_{name}"] = qkv[:, j].permute(0, 2, 1)
        state[dst + "attn.W_O"] = heads_out(s.take(src + "attention.dense.weight", D, D), H, dh)
        if cfg.attn_bias:
            b_qkv = s.take(src + "attention.query_key_value.bias", 3 * D).reshape(H, 3, dh)
            for j, name in enumerate("QKV"):
                state[f"{dst}attn.b_{name}"] = b_qkv[:, j]
            state[dst + "attn.b_O"] = s.take(src + "attention.dense.bias", D)
        linear_mlp(s, state, src + "mlp.dense_h_to_4h", src + "mlp.dense_4h_to_h", dst + "mlp.", cfg)
    return state
