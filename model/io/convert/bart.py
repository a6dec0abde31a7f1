"""BART (``BartForConditionalGeneration``: facebook/bart-base, bart-large, bart-large-cnn) into the
engine's parameters: an encoder-decoder (model/engine/seq2seq.py), like T5 but for the blocks.

BART's blocks are post-norm (``norm_position`` "post": x = LN(x + f(x)) after self-attention,
after cross-attention and after the MLP), with LayerNorms, attention and MLP biases, scores
scaled by 1/√d_head and a GELU MLP (fc1, fc2). Each stack has its own learned positions, stored
with two rows more than it reads (BART's offset: position p is row p + 2, so the converter
drops the first two rows), and a LayerNorm on the summed embeddings (``layernorm_embedding``);
neither stack has a final norm. The token embedding is shared and (``scale_embedding``)
multiplied by √d_model. The head is tied to it and adds ``final_logits_bias``. nn.Linear stores
(out, in); the engine stores (in, out), split per head. A BartModel checkpoint (the hub's
bart-base) names its weights without "model."; both are read.
"""

from __future__ import annotations

import torch

from glassbox.model.engine import GlassboxError, ModelConfig
from glassbox.model.io.convert.common import (
    Weights,
    build,
    heads_in,
    heads_out,
    linear_mlp,
)

FAMILY = "BART"
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
POSITION_OFFSET = 2  # BartLearnedPositionalEmbedding: position p reads row p + 2


def config(hf: dict) -> ModelConfig:
    act = hf.get("activation_function", "gelu")
    if act not in ACTIVATIONS:
        raise GlassboxError(f"Unsupported BART activation_function {act!r}")
    if hf.get("normalize_before") or hf.get("add_final_layer_norm"):  # mBART's layout, in an old bart file
        raise GlassboxError("This BART config asks for pre-norm blocks (normalize_before): Glassbox opens BART's post-norm")
    for what in ("attention_heads", "ffn_dim"):
        if hf.get(f"encoder_{what}") != hf.get(f"decoder_{what}"):
            raise GlassboxError(
                f"This BART's encoder and decoder differ in {what} "
                f"({hf.get(f'encoder_{what}')} and {hf.get(f'decoder_{what}')}): Glassbox needs one"
            )

    def make() -> ModelConfig:
        D = hf["d_model"]
        return ModelConfig(
            vocab_size=hf["vocab_size"],
            n_ctx=hf["max_position_embeddings"],
            d_model=D,
            n_layers=hf["encoder_layers"],
            n_decoder_layers=hf["decoder_layers"],
            n_heads=hf["encoder_attention_heads"],
            d_ff=hf["encoder_ffn_dim"],
            norm="layernorm",
            norm_eps=1e-5,
            activation=ACTIVATIONS[act],
            positional="table",
            norm_position="post",
            embed_norm=True,
            final_norm=False,
            embed_scale=D**0.5 if hf.get("scale_embedding", False) else None,
            tie_embeddings=hf.get("tie_word_embeddings", True) is not False,
            unembed_bias=True,
            encoder_decoder=True,
            decoder_start_token_id=hf.get("decoder_start_token_id", 2),
        )

    return build("bart", make)


def state_dict(cfg: ModelConfig, hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    s = Weights(hf, FAMILY, prefixes=("model.",))
    D, V = cfg.d_model, cfg.vocab_size
    state = {"embed.W_E": s.take("shared.weight|encoder.embed_tokens.weight", V, D)}
    assert cfg.n_decoder_layers is not None, "ModelConfig sets it for an encoder-decoder"
    for stack, cross, n_layers in (("encoder", False, cfg.n_layers), ("decoder", True, cfg.n_decoder_layers)):
        positions = s.take(stack + ".embed_positions.weight", cfg.n_ctx + POSITION_OFFSET, D)
        state[stack + ".pos_embed.W_pos"] = positions[POSITION_OFFSET:]
        layer_norm(s, state, stack + ".layernorm_embedding", stack + ".ln_embed.", D)
        for i in range(n_layers):
            src, dst = f"{stack}.layers.{i}.", f"{stack}.blocks.{i}."
            layer_norm(s, state, src + "self_attn_layer_norm", dst + "ln1.", D)
            attention(s, state, cfg, src + "self_attn.", dst + "attn.")
            if cross:
                layer_norm(s, state, src + "encoder_attn_layer_norm", dst + "ln_cross.", D)
                attention(s, state, cfg, src + "encoder_attn.", dst + "cross_attn.")
            layer_norm(s, state, src + "final_layer_norm", dst + "ln2.", D)
            linear_mlp(s, state, src + "fc1", src + "fc2", dst + "mlp.", cfg)
    if not cfg.tie_embeddings:
        state["unembed.W_U"] = s.take("lm_head.weight", V, D).T
    # a BartModel checkpoint (no head of its own) has no bias: transformers loads it as zeros
    bias = s.take("final_logits_bias", 1, V)[0] if "final_logits_bias" in s else None
    state["unembed.b_U"] = bias if bias is not None else torch.zeros(V, dtype=state["embed.W_E"].dtype)
    return state


def layer_norm(s: Weights, state: dict, src: str, dst: str, width: int) -> None:
    state[dst + "w"], state[dst + "b"] = s.take(src + ".weight", width), s.take(src + ".bias", width)


def attention(s: Weights, state: dict, cfg: ModelConfig, src: str, dst: str) -> None:
    """q, k, v, out projections with their biases, split into heads."""
    H, D, dh = cfg.n_heads, cfg.d_model, cfg.d_head
    for name in "QKV":
        proj = f"{src}{name.lower()}_proj."
        state[f"{dst}W_{name}"] = heads_in(s.take(proj + "weight", H * dh, D), H, dh)
        state[f"{dst}b_{name}"] = s.take(proj + "bias", H * dh).reshape(H, dh)
    state[dst + "W_O"] = heads_out(s.take(src + "out_proj.weight", D, H * dh), H, dh)
    state[dst + "b_O"] = s.take(src + "out_proj.bias", D)
