"""GPT-Neo (``GPTNeoForCausalLM``: the TinyStories models) into the engine's parameters.

What differs from GPT-2: the attention scores are not divided by √d_head, alternate layers
attend only to the latest ``window_size`` positions (``attention_types``, e.g.
[[["global", "local"], 2]] for global, local, global, local), and q, k, v are separate
matrices without biases (the output projection has one). Learned positions, tied head.
"""

from __future__ import annotations

import torch

from glassbox.model.engine import GlassboxError, ModelConfig
from glassbox.model.io.convert.common import Weights, build, heads_in, heads_out, linear_mlp, local_layers

FAMILY = "GPT-Neo"
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def _layer_types(hf: dict) -> list[str]:
    """``attention_types`` expanded as transformers does: [[pattern, repeats], …] → one per layer."""
    types = []
    for pattern, repeats in hf.get("attention_types", [[["global", "local"], 12]]):
        types += list(pattern) * repeats
    if len(types) != hf["num_layers"]:
        raise GlassboxError(f"GPT-Neo config.json: attention_types gives {len(types)} layers, num_layers {hf['num_layers']}")
    return types


def config(hf: dict) -> ModelConfig:
    def make() -> ModelConfig:
        D = hf["hidden_size"]
        return ModelConfig(
            vocab_size=hf["vocab_size"],
            n_ctx=hf["max_position_embeddings"],
            d_model=D,
            n_layers=hf["num_layers"],
            n_heads=hf["num_heads"],
            d_ff=hf.get("intermediate_size") or 4 * D,
            norm_eps=hf.get("layer_norm_epsilon", 1e-5),
            activation=ACTIVATIONS[hf.get("activation_function", "gelu_new")],
            attn_bias=False,
            attn_out_bias=True,
            attn_scale=1.0,
            tie_embeddings=hf.get("tie_word_embeddings", True),
            window=hf.get("window_size", 256),
            local_layers=local_layers(_layer_types(hf)),
        )

    return build(FAMILY, make)


def state_dict(cfg: ModelConfig, hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    s = Weights(hf, FAMILY, ("transformer.",))
    H, D, dh = cfg.n_heads, cfg.d_model, cfg.d_head
    state = {
        "embed.W_E": s.take("wte.weight", cfg.vocab_size, D),
        "pos_embed.W_pos": s.take("wpe.weight", cfg.n_ctx, D),
        "ln_final.w": s.take("ln_f.weight", D),
        "ln_final.b": s.take("ln_f.bias", D),
    }
    if not cfg.tie_embeddings:
        state["unembed.W_U"] = s.take("lm_head.weight", cfg.vocab_size, D).T
    for i in range(cfg.n_layers):
        src, dst = f"h.{i}.", f"blocks.{i}."
        for ln_src, ln_dst in (("ln_1", "ln1"), ("ln_2", "ln2")):
            state[f"{dst}{ln_dst}.w"] = s.take(f"{src}{ln_src}.weight", D)
            state[f"{dst}{ln_dst}.b"] = s.take(f"{src}{ln_src}.bias", D)
        for name in "QKV":
            state[f"{dst}attn.W_{name}"] = heads_in(s.take(f"{src}attn.attention.{name.lower()}_proj.weight", D, D), H, dh)
        state[dst + "attn.W_O"] = heads_out(s.take(src + "attn.attention.out_proj.weight", D, D), H, dh)
        state[dst + "attn.b_O"] = s.take(src + "attn.attention.out_proj.bias", D)
        linear_mlp(s, state, src + "mlp.c_fc", src + "mlp.c_proj", dst + "mlp.", cfg)
    return state
