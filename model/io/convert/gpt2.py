"""GPT-2 (``GPT2LMHeadModel``, hub layout) into the engine's parameters.

GPT-2's Conv1D matrices are already (in, out); ``c_attn`` packs Q, K, V side by side and is
split into them, and every attention matrix into heads. The head is tied to ``wte``.
"""

from __future__ import annotations

import torch

from glassbox.model.engine import GlassboxError, ModelConfig

FAMILY = "GPT-2"
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def config(hf: dict) -> ModelConfig:
    try:
        activation = ACTIVATIONS[hf.get("activation_function", "gelu_new")]
    except KeyError:
        raise GlassboxError(f"Unsupported GPT-2 activation {hf['activation_function']!r}") from None
    if hf.get("scale_attn_by_inverse_layer_idx") or not hf.get("scale_attn_weights", True):
        raise GlassboxError("Unsupported GPT-2 attention scaling (scale_attn_by_inverse_layer_idx / scale_attn_weights)")
    try:  # ModelConfig checks the sizes: positive integers, heads dividing the width
        d_model = hf["n_embd"]
        return ModelConfig(
            vocab_size=hf["vocab_size"],
            n_ctx=hf["n_positions"],
            d_model=d_model,
            n_layers=hf["n_layer"],
            n_heads=hf["n_head"],
            d_ff=hf.get("n_inner") or 4 * d_model,
            norm_eps=hf.get("layer_norm_epsilon", 1e-5),
            activation=activation,
        )
    except KeyError as exc:
        raise GlassboxError(f"GPT-2 config.json lacks {exc}") from None
    except (TypeError, ValueError) as exc:
        raise GlassboxError(f"GPT-2 config.json has a value of the wrong type ({exc})") from None


def state_dict(cfg: ModelConfig, hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename and reshape a GPT2LMHeadModel / GPT2Model state dict into the engine's."""
    hf = {k.removeprefix("transformer."): v for k, v in hf.items()}
    H, D, dh = cfg.n_heads, cfg.d_model, cfg.d_head

    def take(key: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        if key not in hf:
            raise GlassboxError(f"The GPT-2 checkpoint lacks the weight {key!r}")
        if shape is not None and tuple(hf[key].shape) != shape:  # checked before it is split or reshaped
            raise GlassboxError(f"{key} has shape {list(hf[key].shape)}, expected {list(shape)}")
        return hf[key]

    def heads_in(w: torch.Tensor) -> torch.Tensor:  # (D, H*dh) -> (H, D, dh)
        return w.reshape(D, H, dh).permute(1, 0, 2)

    state = {"embed.W_E": take("wte.weight"), "pos_embed.W_pos": take("wpe.weight")}
    for i in range(cfg.n_layers):
        src, dst = f"h.{i}.", f"blocks.{i}."
        w_qkv = take(src + "attn.c_attn.weight", (D, 3 * D))
        b_qkv = take(src + "attn.c_attn.bias", (3 * D,))
        for j, name in enumerate("QKV"):
            state[f"{dst}attn.W_{name}"] = heads_in(w_qkv[:, j * D : (j + 1) * D])
            state[f"{dst}attn.b_{name}"] = b_qkv[j * D : (j + 1) * D].reshape(H, dh)
        state[dst + "attn.W_O"] = take(src + "attn.c_proj.weight", (D, D)).reshape(H, dh, D)
        state[dst + "attn.b_O"] = take(src + "attn.c_proj.bias")
        for ln_src, ln_dst in (("ln_1", "ln1"), ("ln_2", "ln2")):
            state[f"{dst}{ln_dst}.w"] = take(f"{src}{ln_src}.weight")
            state[f"{dst}{ln_dst}.b"] = take(f"{src}{ln_src}.bias")
        state[dst + "mlp.W_in"] = take(src + "mlp.c_fc.weight")
        state[dst + "mlp.b_in"] = take(src + "mlp.c_fc.bias")
        state[dst + "mlp.W_out"] = take(src + "mlp.c_proj.weight")
        state[dst + "mlp.b_out"] = take(src + "mlp.c_proj.bias")
    state["ln_final.w"] = take("ln_f.weight")
    state["ln_final.b"] = take("ln_f.bias")
    return state
