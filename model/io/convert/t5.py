"""T5 (``T5ForConditionalGeneration``: t5-small and the v1.1 / flan-t5 checkpoints) into the
engine's parameters: an encoder-decoder (model/engine/seq2seq.py).

T5's blocks are pre-norm with an RMSNorm that has no mean (T5LayerNorm), attention without biases
and without the 1/√d scale, a relative position bias held by each stack's first block and shared
by all its blocks, and an MLP without biases: ReLU (``feed_forward_proj`` "relu") or gated
("gated-gelu": GELU(x wi_0) × (x wi_1), the tanh GELU). The head: the original T5 ties it to the
shared embedding and scales the decoder's output by d_model^-0.5 first; v1.1 and flan-t5 write
``tie_word_embeddings: false`` and store ``lm_head.weight`` apart, unscaled (transformers 5 writes
``scale_decoder_outputs`` and keeps the head tied unless the file holds its own). nn.Linear stores
(out, in); the engine stores (in, out), split per head.
"""

from __future__ import annotations

import torch

from glassbox.model.engine import GlassboxError, ModelConfig
from glassbox.model.io.convert.common import Weights, build, heads_in, heads_out

FAMILY = "T5"
ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu_tanh",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "silu": "silu",
}  # "gated-gelu" is transformers' tanh GELU (gelu_new)


def config(hf: dict) -> ModelConfig:
    projection = hf.get("feed_forward_proj", "relu")
    gated, _, act = projection.rpartition("-")
    if gated not in ("", "gated") or act not in ACTIVATIONS or (act == "gelu" and not gated):
        raise GlassboxError(f"Unsupported T5 feed_forward_proj {projection!r}")
    untied = hf.get("tie_word_embeddings", True) is False  # the hub's v1.1 / flan-t5 files
    scaled = hf.get("scale_decoder_outputs", not untied)

    def make() -> ModelConfig:
        D = hf["d_model"]
        return ModelConfig(
            vocab_size=hf["vocab_size"],
            n_ctx=hf.get("n_positions") or 512,
            d_model=D,
            n_layers=hf["num_layers"],
            n_heads=hf["num_heads"],
            d_head=hf["d_kv"],
            d_ff=hf["d_ff"],
            norm="rmsnorm",
            norm_eps=hf.get("layer_norm_epsilon", 1e-6),
            activation=ACTIVATIONS[act],
            gated_mlp=bool(gated),
            positional="relative",
            attn_bias=False,
            mlp_bias=False,
            attn_scale=1.0,
            tie_embeddings=not untied,
            head_scale=D**-0.5 if scaled else None,
            encoder_decoder=True,
            n_decoder_layers=hf.get("num_decoder_layers") or hf["num_layers"],
            relative_buckets=hf.get("relative_attention_num_buckets", 32),
            relative_max_distance=hf.get("relative_attention_max_distance", 128),
            decoder_start_token_id=hf.get("decoder_start_token_id", hf.get("pad_token_id", 0)),
        )

    return build("t5", make)


def state_dict(cfg: ModelConfig, hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    s = Weights(hf, FAMILY)
    D, H = cfg.d_model, cfg.n_heads
    state = {"embed.W_E": s.take("shared.weight|encoder.embed_tokens.weight", cfg.vocab_size, D)}
    assert cfg.n_decoder_layers is not None, "ModelConfig sets it for an encoder-decoder"
    for stack, cross, n_layers in (("encoder", False, cfg.n_layers), ("decoder", True, cfg.n_decoder_layers)):
        state[stack + ".W_pos_bias"] = s.take(
            f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight", cfg.relative_buckets, H
        )
        for i in range(n_layers):
            src, dst = f"{stack}.block.{i}.layer.", f"{stack}.blocks.{i}."
            state[dst + "ln1.w"] = s.take(src + "0.layer_norm.weight", D)
            attention(s, state, cfg, src + "0.SelfAttention.", dst + "attn.")
            if cross:
                state[dst + "ln_cross.w"] = s.take(src + "1.layer_norm.weight", D)
                attention(s, state, cfg, src + "1.EncDecAttention.", dst + "cross_attn.")
            mlp = f"{src}{2 if cross else 1}."
            state[dst + "ln2.w"] = s.take(mlp + "layer_norm.weight", D)
            feed_forward(s, state, cfg, mlp + "DenseReluDense.", dst + "mlp.")
        state[stack + ".ln_final.w"] = s.take(stack + ".final_layer_norm.weight", D)
    if not cfg.tie_embeddings:
        state["unembed.W_U"] = s.take("lm_head.weight", cfg.vocab_size, D).T
    return state


def attention(s: Weights, state: dict, cfg: ModelConfig, src: str, dst: str) -> None:
    """q, k, v, o without biases, split into heads (each head d_kv wide)."""
    H, D, dh = cfg.n_heads, cfg.d_model, cfg.d_head
    for name in "QKV":
        state[f"{dst}W_{name}"] = heads_in(s.take(f"{src}{name.lower()}.weight", H * dh, D), H, dh)
    state[dst + "W_O"] = heads_out(s.take(src + "o.weight", D, H * dh), H, dh)


def feed_forward(s: Weights, state: dict, cfg: ModelConfig, src: str, dst: str) -> None:
    """wi (or, gated, wi_0 the activated gate and wi_1 the linear branch) and wo, without biases."""
    D, F = cfg.d_model, cfg.d_ff
    if cfg.gated_mlp:
        state[dst + "W_gate"] = s.take(src + "wi_0.weight", F, D).T
        state[dst + "W_in"] = s.take(src + "wi_1.weight", F, D).T
    else:
        state[dst + "W_in"] = s.take(src + "wi.weight", F, D).T
    state[dst + "W_out"] = s.take(src + "wo.weight", D, F).T
