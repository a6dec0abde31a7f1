"""Llama-style models (``LlamaForCausalLM``, and ``MistralForCausalLM``, ``Qwen2ForCausalLM``,
``Qwen3ForCausalLM``, which store their weights the same way) into the engine's parameters.

RMSNorm, a SwiGLU MLP (gate, up, down), RoPE (with llama3 or linear scaling), grouped-query
attention with head_dim possibly ≠ d_model/heads. The differences between the four:
- Qwen2: biases on q, k and v, none on the output projection;
- Qwen3: an RMSNorm per head on q and k before RoPE (``q_norm``, ``k_norm``);
- Mistral: a sliding window on every layer; Qwen2/3: on the layers ``layer_types`` marks
  (``use_sliding_window``, from ``max_window_layers`` on), off in every released checkpoint.
nn.Linear stores (out, in); the engine stores (in, out), split per head.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from glassbox.model.engine import ModelConfig
from glassbox.model.io.convert.common import Weights, build, heads_in, heads_out, local_layers, rope_settings, with_window

FAMILY = "Llama"
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}


def config(hf: dict) -> ModelConfig:
    kind = hf.get("model_type", "llama")

    def make() -> ModelConfig:
        cfg = ModelConfig(
            **settings(hf),
            attn_bias=kind == "qwen2" or hf.get("attention_bias", False),
            attn_out_bias=kind != "qwen2" and hf.get("attention_bias", False),
            mlp_bias=hf.get("mlp_bias", False),
            tie_embeddings=hf.get("tie_word_embeddings", kind == "qwen3"),
            qk_norm=kind == "qwen3",
        )
        return with_window(cfg, _window(hf, kind), _local_layers(hf, kind))

    return build(kind, make)


def settings(hf: dict) -> dict:
    """The ModelConfig fields every Llama-style family reads alike (the mixtures of experts too):
    sizes, RMSNorm, a gated MLP, RoPE."""
    D, H = hf["hidden_size"], hf["num_attention_heads"]
    return dict(
        vocab_size=hf["vocab_size"],
        n_ctx=hf["max_position_embeddings"],
        d_model=D,
        n_layers=hf["num_hidden_layers"],
        n_heads=H,
        n_kv_heads=hf.get("num_key_value_heads") or H,
        d_head=hf.get("head_dim") or D // H,
        d_ff=hf["intermediate_size"],
        norm="rmsnorm",
        norm_eps=hf.get("rms_norm_eps", 1e-6),
        activation=ACTIVATIONS[hf.get("hidden_act", "silu")],
        gated_mlp=True,
        positional="rope",
        **rope_settings(hf),
    )


def _window(hf: dict, kind: str) -> int | None:
    if kind in ("qwen2", "qwen3") and not hf.get("use_sliding_window", False):
        return None
    return hf.get("sliding_window")


def _local_layers(hf: dict, kind: str) -> tuple[int, ...] | None:
    if "layer_types" in hf:
        return local_layers(hf["layer_types"])
    if kind in ("qwen2", "qwen3"):  # transformers' default layer_types: windows from max_window_layers on
        return tuple(range(hf.get("max_window_layers", 28), hf["num_hidden_layers"]))
    return None  # Mistral: every layer


def state_dict(cfg: ModelConfig, hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    s = Weights(hf, FAMILY, ("model.",))
    return convert(s, cfg, lambda state, i, src, dst: mlp(s, state, cfg, src + "mlp.", dst + "mlp.", cfg.d_ff))


def convert(s: Weights, cfg: ModelConfig, feed_forward: Callable[[dict, int, str, str], None]) -> dict[str, torch.Tensor]:
    """A Llama-style state dict into the engine's: the embeddings, the norms, the attention, and
    ``feed_forward(state, i, src, dst)`` for block i's MLP (or experts: the mixtures of experts
    differ from Llama there only), from ``src`` ("layers.{i}.") into ``dst`` ("blocks.{i}.")."""
    D = cfg.d_model
    state = {"embed.W_E": s.take("embed_tokens.weight", cfg.vocab_size, D), "ln_final.w": s.take("norm.weight", D)}
    if not cfg.tie_embeddings:
        state["unembed.W_U"] = s.take("lm_head.weight", cfg.vocab_size, D).T
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"blocks.{i}."
        state[dst + "ln1.w"] = s.take(src + "input_layernorm.weight", D)
        state[dst + "ln2.w"] = s.take(src + "post_attention_layernorm.weight", D)
        attention(s, state, cfg, src + "self_attn.", dst + "attn.")
        feed_forward(state, i, src, dst)
    return state


def attention(s: Weights, state: dict, cfg: ModelConfig, src: str, dst: str) -> None:
    """q/k/v/o projections (and their biases, and QK-norm, per head or full-width) of a Llama-style
    attention layer."""
    H, K, D, dh = cfg.n_heads, cfg.n_kv_heads, cfg.d_model, cfg.d_head
    for name, proj, heads in (("Q", "q_proj", H), ("K", "k_proj", K), ("V", "v_proj", K)):
        state[f"{dst}W_{name}"] = heads_in(s.take(f"{src}{proj}.weight", heads * dh, D), heads, dh)
        if cfg.attn_bias:
            state[f"{dst}b_{name}"] = s.take(f"{src}{proj}.bias", heads * dh).reshape(heads, dh)
    state[dst + "W_O"] = heads_out(s.take(src + "o_proj.weight", D, H * dh), H, dh)
    if cfg.attn_out_bias:
        state[dst + "b_O"] = s.take(src + "o_proj.bias", D)
    if cfg.qk_norm and cfg.qk_norm_width == "full":  # OLMoE: one norm over all heads' features
        state[dst + "q_norm_full.w"] = s.take(src + "q_norm.weight", H * dh)
        state[dst + "k_norm_full.w"] = s.take(src + "k_norm.weight", K * dh)
    elif cfg.qk_norm:
        state[dst + "q_norm.w"] = s.take(src + "q_norm.weight", dh)
        state[dst + "k_norm.w"] = s.take(src + "k_norm.weight", dh)


def mlp(s: Weights, state: dict, cfg: ModelConfig, src: str, dst: str, F: int) -> None:
    """gate, up and down projections: act(x W_gate) × (x W_in), then W_out."""
    D = cfg.d_model
    state[dst + "W_gate"] = s.take(src + "gate_proj.weight", F, D).T
    state[dst + "W_in"] = s.take(src + "up_proj.weight", F, D).T
    state[dst + "W_out"] = s.take(src + "down_proj.weight", D, F).T
    if cfg.mlp_bias:
        state[dst + "b_gate"] = s.take(src + "gate_proj.bias", F)
        state[dst + "b_in"] = s.take(src + "up_proj.bias", F)
        state[dst + "b_out"] = s.take(src + "down_proj.bias", D)
