"""BERT (``BertForMaskedLM``) into the engine's parameters: an encoder.

What sets it apart from GPT-2: attention both ways (``causal`` false), post-norm blocks
(x = LN(x + attn(x)); x = LN(x + mlp(x))), token-type rows added to the embeddings (type 0 for a
single sentence) and a LayerNorm on their sum, erf-GELU, and the MLM head: a transform
LN(gelu(x W_dense + b_dense)), then the decoder tied to the word embeddings with a bias of its own.
No final norm: the last block's ln2 is one. nn.Linear stores (out, in); the engine stores (in, out),
split per head.
"""

from __future__ import annotations

import torch

from glassbox.model.engine import GlassboxError, ModelConfig
from glassbox.model.io.convert.common import Weights, build, heads_in, heads_out, linear_mlp

FAMILY = "BERT"
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}


def config(hf: dict) -> ModelConfig:
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise GlassboxError(
            f"Unsupported BERT position_embedding_type {hf['position_embedding_type']!r} (Glassbox computes absolute positions)"
        )
    if hf.get("is_decoder"):
        raise GlassboxError("This BERT is configured as a decoder (is_decoder): Glassbox opens BERT as an encoder")
    if hf.get("hidden_act", "gelu") not in ACTIVATIONS:
        raise GlassboxError(f"Unsupported BERT activation {hf['hidden_act']!r}")

    def make() -> ModelConfig:
        return ModelConfig(
            vocab_size=hf["vocab_size"],
            n_ctx=hf["max_position_embeddings"],
            d_model=hf["hidden_size"],
            n_layers=hf["num_hidden_layers"],
            n_heads=hf["num_attention_heads"],
            d_ff=hf["intermediate_size"],
            norm_eps=hf.get("layer_norm_eps", 1e-12),
            activation=ACTIVATIONS[hf.get("hidden_act", "gelu")],
            final_norm=False,
            tie_embeddings=hf.get("tie_word_embeddings", True),
            causal=False,
            norm_position="post",
            n_token_types=hf.get("type_vocab_size", 2),
            embed_norm=True,
            mlm_head=True,
            unembed_bias=True,
        )

    return build("bert", make)


def state_dict(cfg: ModelConfig, hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    s = Weights(hf, FAMILY, ("bert.",))
    H, D, dh, V = cfg.n_heads, cfg.d_model, cfg.d_head, cfg.vocab_size
    assert cfg.n_token_types is not None, "config() sets it"
    state = {
        "embed.W_E": s.take("embeddings.word_embeddings.weight", V, D),
        "pos_embed.W_pos": s.take("embeddings.position_embeddings.weight", cfg.n_ctx, D),
        "token_type_embed.W_type": s.take("embeddings.token_type_embeddings.weight", cfg.n_token_types, D),
        "ln_embed.w": s.take("embeddings.LayerNorm.weight", D),
        "ln_embed.b": s.take("embeddings.LayerNorm.bias", D),
    }
    for i in range(cfg.n_layers):
        src, dst = f"encoder.layer.{i}.", f"blocks.{i}."
        for name, proj in (("Q", "query"), ("K", "key"), ("V", "value")):
            state[f"{dst}attn.W_{name}"] = heads_in(s.take(f"{src}attention.self.{proj}.weight", D, D), H, dh)
            state[f"{dst}attn.b_{name}"] = s.take(f"{src}attention.self.{proj}.bias", D).reshape(H, dh)
        state[dst + "attn.W_O"] = heads_out(s.take(src + "attention.output.dense.weight", D, D), H, dh)
        state[dst + "attn.b_O"] = s.take(src + "attention.output.dense.bias", D)
        for norm, module in (("ln1", "attention.output.LayerNorm"), ("ln2", "output.LayerNorm")):
            state[f"{dst}{norm}.w"] = s.take(f"{src}{module}.weight", D)
            state[f"{dst}{norm}.b"] = s.take(f"{src}{module}.bias", D)
        linear_mlp(s, state, src + "intermediate.dense", src + "output.dense", dst + "mlp.", cfg)
    head = "cls.predictions."
    state["mlm.W_dense"] = s.take(head + "transform.dense.weight", D, D).T
    state["mlm.b_dense"] = s.take(head + "transform.dense.bias", D)
    state["mlm.ln.w"] = s.take(head + "transform.LayerNorm.weight", D)
    state["mlm.ln.b"] = s.take(head + "transform.LayerNorm.bias", D)
    if not cfg.tie_embeddings:
        state["unembed.W_U"] = s.take(head + "decoder.weight", V, D).T
    state["unembed.b_U"] = s.take(head + "bias|" + head + "decoder.bias", V)  # the decoder's bias is this one, tied
    return state
