"""The registry's table: one entry per tensor name pattern, with its axes, what it holds and
which architectures produce it (``names`` looks names up in it, and everything reads them there).
The table is its own file because it grows with every architecture; the lookups do not."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from glassbox.model.engine.config import ModelConfig

# axis name -> (symbol in docs/engine.md's shapes, how long it is for a config and a prompt of T tokens;
# None where the config has no such axis, as a dense model has no experts)
AXES: dict[str, tuple[str, Callable[[ModelConfig, int], int | None]]] = {
    "position": ("T", lambda cfg, T: T),
    "query": ("T", lambda cfg, T: T),
    "key": ("T", lambda cfg, T: T),
    "head": ("H", lambda cfg, T: cfg.n_heads),
    "kv_head": ("K", lambda cfg, T: cfg.n_kv_heads),
    "d_head": ("d", lambda cfg, T: cfg.d_head),
    "d_model": ("D", lambda cfg, T: cfg.d_model),
    "neuron": ("F", lambda cfg, T: cfg.d_ff),
    "q_width": ("H·d", lambda cfg, T: cfg.n_heads * cfg.d_head),  # every head's query features side by side
    "kv_width": ("K·d", lambda cfg, T: cfg.n_kv_heads * cfg.d_head),
    "expert": ("E", lambda cfg, T: cfg.n_experts),
    "expert_neuron": ("F_e", lambda cfg, T: cfg.d_ff_expert),
    "shared_neuron": ("F_s", lambda cfg, T: cfg.d_ff_shared),
    "vocab": ("V", lambda cfg, T: cfg.vocab_size),
    "token_type": ("n_types", lambda cfg, T: cfg.n_token_types),
    "bucket": ("n_buckets", lambda cfg, T: cfg.relative_buckets),
    "context": ("n_ctx", lambda cfg, T: cfg.n_ctx),  # every position the model accepts (W_pos's rows)
    # an encoder-decoder's encoder positions (the source; "position" is then the decoder's):
    # its length is given apart, see ``shape``
    "source": ("S", lambda cfg, T: None),
}


# which models produce a name: (config, block index) -> bool. The block matters where blocks of one
# model differ (a mixture-of-experts model may keep a dense MLP in some); for a name outside the
# blocks it is None.
def _dense(cfg: ModelConfig, i: int | None) -> bool:
    return not cfg.attn_only and not (i is not None and cfg.is_moe(i))


def _moe(cfg: ModelConfig, i: int | None) -> bool:
    return i is not None and cfg.is_moe(i)


ARCHITECTURES: dict[str, Callable[[ModelConfig, int | None], bool]] = {
    "all": lambda cfg, i: True,
    "LayerNorm": lambda cfg, i: cfg.norm == "layernorm",
    "block norms": lambda cfg, i: cfg.norm != "none",
    "pre-norm block": lambda cfg, i: cfg.norm_position == "pre" and cfg.norm != "none",
    "pre-norm LayerNorm": lambda cfg, i: cfg.norm_position == "pre" and cfg.norm == "layernorm",
    "post-norm block": lambda cfg, i: cfg.norm_position == "post",
    "post-norm LayerNorm": lambda cfg, i: cfg.norm_position == "post" and cfg.norm == "layernorm",
    "token types": lambda cfg, i: cfg.n_token_types is not None,
    "embedding norm": lambda cfg, i: cfg.embed_norm,
    "embedding LayerNorm": lambda cfg, i: cfg.embed_norm and cfg.norm == "layernorm",
    "relative positions": lambda cfg, i: cfg.positional == "relative",
    "cross-attention": lambda cfg, i: cfg.cross_attention,
    "cross-attention LayerNorm": lambda cfg, i: cfg.cross_attention and cfg.norm == "layernorm",
    "pre-norm cross-attention": lambda cfg, i: cfg.cross_attention and cfg.norm_position == "pre",
    "pre-norm cross-attention LayerNorm": lambda cfg, i: (
        cfg.cross_attention and cfg.norm_position == "pre" and cfg.norm == "layernorm"
    ),
    "post-norm cross-attention": lambda cfg, i: cfg.cross_attention and cfg.norm_position == "post",
    "post-norm cross-attention LayerNorm": lambda cfg, i: (
        cfg.cross_attention and cfg.norm_position == "post" and cfg.norm == "layernorm"
    ),
    "cross-attention biases": lambda cfg, i: cfg.cross_attention and cfg.attn_bias,
    "cross-attention output bias": lambda cfg, i: cfg.cross_attention and cfg.attn_out_bias,
    "encoder-decoder": lambda cfg, i: cfg.encoder_decoder,
    "MLM head": lambda cfg, i: cfg.mlm_head,
    "MLM head LayerNorm": lambda cfg, i: cfg.mlm_head and cfg.norm == "layernorm",
    "output bias": lambda cfg, i: cfg.unembed_bias,
    "learned positions": lambda cfg, i: cfg.positional == "table",
    "RoPE": lambda cfg, i: cfg.positional == "rope",
    "gated MLP": lambda cfg, i: cfg.gated_mlp and _dense(cfg, i),
    "final norm": lambda cfg, i: cfg.final_norm,
    "final LayerNorm": lambda cfg, i: cfg.final_norm and cfg.norm == "layernorm",
    "attention biases": lambda cfg, i: cfg.attn_bias,
    "attention output bias": lambda cfg, i: cfg.attn_out_bias,
    "QK-norm": lambda cfg, i: cfg.qk_norm and cfg.qk_norm_width == "head",
    "QK-norm LayerNorm": lambda cfg, i: cfg.qk_norm and cfg.qk_norm_width == "head" and cfg.norm == "layernorm",
    "full-width QK-norm": lambda cfg, i: cfg.qk_norm and cfg.qk_norm_width == "full",
    "full-width QK-norm LayerNorm": lambda cfg, i: cfg.qk_norm and cfg.qk_norm_width == "full" and cfg.norm == "layernorm",
    "q/k/v clipping": lambda cfg, i: cfg.clip_qkv is not None,
    "post norms": lambda cfg, i: cfg.post_norms,
    "post LayerNorms": lambda cfg, i: cfg.post_norms and cfg.norm == "layernorm",
    "post MLP norms": lambda cfg, i: cfg.post_norms and not cfg.attn_only,
    "post MLP LayerNorms": lambda cfg, i: cfg.post_norms and cfg.norm == "layernorm" and not cfg.attn_only,
    "sequential block": lambda cfg, i: not cfg.parallel_block and not cfg.attn_only,
    "MLP": lambda cfg, i: not cfg.attn_only,
    "dense MLP": _dense,
    "MLP LayerNorm": lambda cfg, i: not cfg.attn_only and cfg.norm == "layernorm",
    "MLP norm": lambda cfg, i: not cfg.attn_only and cfg.norm != "none",
    "pre-norm MLP": lambda cfg, i: not cfg.attn_only and cfg.norm_position == "pre" and cfg.norm != "none",
    "pre-norm MLP LayerNorm": lambda cfg, i: not cfg.attn_only and cfg.norm_position == "pre" and cfg.norm == "layernorm",
    "parallel block": lambda cfg, i: cfg.parallel_block,
    "attention soft-capping": lambda cfg, i: cfg.attn_softcap is not None,
    "final soft-capping": lambda cfg, i: cfg.final_softcap is not None,
    "MLP biases": lambda cfg, i: cfg.mlp_bias and _dense(cfg, i),
    "gated MLP with biases": lambda cfg, i: cfg.gated_mlp and cfg.mlp_bias and _dense(cfg, i),
    "mixture of experts": _moe,
    "gated experts": lambda cfg, i: cfg.gated_mlp and _moe(cfg, i),
    "shared expert": lambda cfg, i: cfg.d_ff_shared is not None and _moe(cfg, i),
    "gated shared expert": lambda cfg, i: cfg.gated_mlp and cfg.d_ff_shared is not None and _moe(cfg, i),
    "shared expert gate": lambda cfg, i: cfg.shared_expert_gate and _moe(cfg, i),
    "untied head": lambda cfg, i: not cfg.tie_embeddings,
}


@dataclass(frozen=True)
class Name:
    pattern: str  # "{i}" stands for a block index, "{ln}" for ln1 or ln2
    axes: tuple[str, ...]
    what: str
    produced_by: str = "all"  # a key of ARCHITECTURES

    def produced(self, cfg: ModelConfig, block: int | None = None) -> bool:
        """Whether a model of ``cfg`` produces the name (in ``block``, for a name inside the blocks)."""
        return ARCHITECTURES[self.produced_by](cfg, block)

    def expand(self, cfg: ModelConfig) -> list[str]:
        blocks = range(cfg.n_layers) if "{i}" in self.pattern else [None]
        norms = ("ln1", "ln2") if "{ln}" in self.pattern else (None,)
        return [self.pattern.format(i=i, ln=ln) for i in blocks if self.produced(cfg, i) for ln in norms]


def _norm(
    prefix: str, norm: str = "all", layernorm: str = "LayerNorm", rows: tuple[str, ...] = ("position",), width: str = "d_model"
) -> list[Name]:
    """A norm's four tensors; ``prefix`` is "blocks.{i}.{ln}.", "ln_final." or a QK-norm's.
    ``norm`` and ``layernorm`` say which models have the norm and its LayerNorm mean."""
    return [
        Name(prefix + "hook_mean", rows, f"LayerNorm's mean over {width}", layernorm),
        Name(prefix + "hook_scale", rows, "what the norm divides by: sqrt(var + eps) (RMSNorm: sqrt(mean x² + eps))", norm),
        Name(prefix + "hook_normalized", rows + (width,), "(x − mean)/scale (RMSNorm: x/scale)", norm),
        Name(prefix + "hook_out", rows + (width,), "after the learned scale γ (and shift β)", norm),
    ]


# Every activation a trace can hold, in the order the forward pass produces it (within a block,
# ln1's tensors come before attention's, ln2's before the MLP's).
ACTIVATIONS: list[Name] = [
    Name("hook_embed", ("position", "d_model"), "the token embedding rows W_E[token] (× embed_scale: Gemma's √d_model)"),
    Name("hook_pos_embed", ("position", "d_model"), "the positional rows W_pos[position]", "learned positions"),
    Name(
        "hook_token_type_embed",
        ("position", "d_model"),
        "the token-type row W_type[0] (a single sentence is type 0)",
        "token types",
    ),
    *_norm("ln_embed.", "embedding norm", "embedding LayerNorm"),
    Name(
        "hook_pos_bias",
        ("head", "query", "key"),
        "the relative position bias W_pos_bias[bucket(key − query)], added to every block's scores",
        "relative positions",
    ),
    Name("blocks.{i}.hook_resid_pre", ("position", "d_model"), "the residual stream entering block i"),
    *_norm("blocks.{i}.ln1.", "pre-norm block", "pre-norm LayerNorm"),
    Name("blocks.{i}.attn.hook_q", ("head", "position", "d_head"), "queries, per head"),
    Name("blocks.{i}.attn.hook_k", ("kv_head", "position", "d_head"), "keys, per key/value head"),
    Name("blocks.{i}.attn.hook_v", ("kv_head", "position", "d_head"), "values, per key/value head"),
    *_norm("blocks.{i}.attn.q_norm.", "QK-norm", "QK-norm LayerNorm", ("head", "position"), "d_head"),
    *_norm("blocks.{i}.attn.k_norm.", "QK-norm", "QK-norm LayerNorm", ("kv_head", "position"), "d_head"),
    *_norm("blocks.{i}.attn.q_norm_full.", "full-width QK-norm", "full-width QK-norm LayerNorm", ("position",), "q_width"),
    *_norm("blocks.{i}.attn.k_norm_full.", "full-width QK-norm", "full-width QK-norm LayerNorm", ("position",), "kv_width"),
    Name(
        "blocks.{i}.attn.hook_q_clipped",
        ("head", "position", "d_head"),
        "queries clamped to ±clip_qkv (after QK-norm)",
        "q/k/v clipping",
    ),
    Name(
        "blocks.{i}.attn.hook_k_clipped",
        ("kv_head", "position", "d_head"),
        "keys clamped to ±clip_qkv (after QK-norm)",
        "q/k/v clipping",
    ),
    Name("blocks.{i}.attn.hook_v_clipped", ("kv_head", "position", "d_head"), "values clamped to ±clip_qkv", "q/k/v clipping"),
    Name("blocks.{i}.attn.hook_rot_q", ("head", "position", "d_head"), "queries after RoPE", "RoPE"),
    Name("blocks.{i}.attn.hook_rot_k", ("kv_head", "position", "d_head"), "keys after RoPE", "RoPE"),
    Name(
        "blocks.{i}.attn.hook_scores_uncapped",
        ("head", "query", "key"),
        "QKᵀ × scale, before soft-capping",
        "attention soft-capping",
    ),
    Name(
        "blocks.{i}.attn.hook_scores",
        ("head", "query", "key"),
        "QKᵀ × scale (1/√d_head unless the model says otherwise; soft-capped where it is; + hook_pos_bias where "
        "there is one), before the mask",
    ),
    Name(
        "blocks.{i}.attn.hook_scores_masked",
        ("head", "query", "key"),
        "the scores with −∞ on the future (and, in a window, past it)",
    ),
    Name("blocks.{i}.attn.hook_pattern", ("head", "query", "key"), "softmax over keys; rows sum to 1"),
    Name("blocks.{i}.attn.hook_z", ("head", "position", "d_head"), "each head's weighted values, pattern · v"),
    Name(
        "blocks.{i}.attn.hook_result",
        ("head", "position", "d_model"),
        "each head's contribution after W_O (they sum, plus b_O, to hook_attn_out; to attn.hook_out before a post norm)",
    ),
    Name(
        "blocks.{i}.attn.hook_out",
        ("position", "d_model"),
        "the attention's output before its post norm (Σ result + b_O)",
        "post norms",
    ),
    *_norm("blocks.{i}.ln1_post.", "post norms", "post LayerNorms"),
    Name(
        "blocks.{i}.hook_attn_out",
        ("position", "d_model"),
        "the attention output added to the residual stream (after ln1_post where there is one)",
    ),
    Name(
        "blocks.{i}.hook_attn_sum",
        ("position", "d_model"),
        "resid_pre + attn_out, what a post-norm block's ln1 normalizes",
        "post-norm block",
    ),
    *_norm("blocks.{i}.ln1.", "post-norm block", "post-norm LayerNorm"),
    Name("blocks.{i}.hook_resid_mid", ("position", "d_model"), "resid_pre + attn_out (post-norm: ln1 of it)", "sequential block"),
    *_norm("blocks.{i}.ln_cross.", "pre-norm cross-attention", "pre-norm cross-attention LayerNorm"),
    Name(
        "blocks.{i}.cross_attn.hook_q",
        ("head", "position", "d_head"),
        "cross-attention queries, from the decoder's stream",
        "cross-attention",
    ),
    Name(
        "blocks.{i}.cross_attn.hook_k",
        ("kv_head", "source", "d_head"),
        "cross-attention keys, from the encoder's output (encoder.hook_out)",
        "cross-attention",
    ),
    Name(
        "blocks.{i}.cross_attn.hook_v",
        ("kv_head", "source", "d_head"),
        "cross-attention values, from the encoder's output",
        "cross-attention",
    ),
    Name(
        "blocks.{i}.cross_attn.hook_scores",
        ("head", "query", "source"),
        "QKᵀ × scale: each target position (query) against each source position (key); no mask",
        "cross-attention",
    ),
    Name(
        "blocks.{i}.cross_attn.hook_pattern", ("head", "query", "source"), "softmax over the source positions", "cross-attention"
    ),
    Name("blocks.{i}.cross_attn.hook_z", ("head", "position", "d_head"), "each head's weighted source values", "cross-attention"),
    Name(
        "blocks.{i}.cross_attn.hook_result",
        ("head", "position", "d_model"),
        "each head's contribution after W_O",
        "cross-attention",
    ),
    Name("blocks.{i}.hook_cross_attn_out", ("position", "d_model"), "the cross-attention's output", "cross-attention"),
    Name(
        "blocks.{i}.hook_cross_attn_sum",
        ("position", "d_model"),
        "resid_mid + cross_attn_out, what a post-norm block's ln_cross normalizes",
        "post-norm cross-attention",
    ),
    *_norm("blocks.{i}.ln_cross.", "post-norm cross-attention", "post-norm cross-attention LayerNorm"),
    Name(
        "blocks.{i}.hook_resid_cross",
        ("position", "d_model"),
        "resid_mid + cross_attn_out (post-norm: ln_cross of it): what the MLP (or its norm) reads",
        "cross-attention",
    ),
    *_norm("blocks.{i}.ln2.", "pre-norm MLP", "pre-norm MLP LayerNorm"),
    Name(
        "blocks.{i}.mlp.hook_pre",
        ("position", "neuron"),
        "pre-activation x·W_in + b_in (gated MLP: x·W_gate + b_gate)",
        "dense MLP",
    ),
    Name("blocks.{i}.mlp.hook_gate", ("position", "neuron"), "the activation of hook_pre", "gated MLP"),
    Name("blocks.{i}.mlp.hook_linear", ("position", "neuron"), "the linear branch x·W_in + b_in", "gated MLP"),
    Name("blocks.{i}.mlp.hook_post", ("position", "neuron"), "after the activation (gated MLP: gate × linear)", "dense MLP"),
    Name(
        "blocks.{i}.mlp.hook_router_logits",
        ("position", "expert"),
        "the router's score of each expert, x·W_router",
        "mixture of experts",
    ),
    Name(
        "blocks.{i}.mlp.hook_router_probs",
        ("position", "expert"),
        "softmax of the router logits (float32 in a half model)",
        "mixture of experts",
    ),
    Name(
        "blocks.{i}.mlp.hook_expert_weights",
        ("position", "expert"),
        "what each expert's output is multiplied by: its probability if among the top-k (renormalised over them where "
        "the model does), else 0",
        "mixture of experts",
    ),
    Name(
        "blocks.{i}.mlp.experts.hook_pre",
        ("expert", "position", "expert_neuron"),
        "each expert's pre-activation x·W_in[e] (gated: x·W_gate[e]), at every position, chosen or not",
        "mixture of experts",
    ),
    Name(
        "blocks.{i}.mlp.experts.hook_gate",
        ("expert", "position", "expert_neuron"),
        "the activation of experts.hook_pre",
        "gated experts",
    ),
    Name(
        "blocks.{i}.mlp.experts.hook_linear",
        ("expert", "position", "expert_neuron"),
        "each expert's linear branch x·W_in[e]",
        "gated experts",
    ),
    Name(
        "blocks.{i}.mlp.experts.hook_post",
        ("expert", "position", "expert_neuron"),
        "each expert's neurons after the activation (gated: gate × linear)",
        "mixture of experts",
    ),
    Name(
        "blocks.{i}.mlp.experts.hook_out",
        ("expert", "position", "d_model"),
        "each expert's output post·W_out[e], before its weight: Σ over experts of weight × out is their sum",
        "mixture of experts",
    ),
    Name(
        "blocks.{i}.mlp.shared.hook_pre",
        ("position", "shared_neuron"),
        "the shared expert's pre-activation (gated: x·W_gate)",
        "shared expert",
    ),
    Name(
        "blocks.{i}.mlp.shared.hook_gate",
        ("position", "shared_neuron"),
        "the activation of shared.hook_pre",
        "gated shared expert",
    ),
    Name(
        "blocks.{i}.mlp.shared.hook_linear",
        ("position", "shared_neuron"),
        "the shared expert's linear branch x·W_in",
        "gated shared expert",
    ),
    Name(
        "blocks.{i}.mlp.shared.hook_post",
        ("position", "shared_neuron"),
        "the shared expert's neurons after the activation",
        "shared expert",
    ),
    Name(
        "blocks.{i}.mlp.shared.hook_out", ("position", "d_model"), "the shared expert's output, before its gate", "shared expert"
    ),
    Name(
        "blocks.{i}.mlp.hook_shared_gate",
        ("position",),
        "σ(x·W_shared_gate): what the shared expert's output is multiplied by",
        "shared expert gate",
    ),
    Name("blocks.{i}.mlp.hook_out", ("position", "d_model"), "the MLP's output before its post norm", "post MLP norms"),
    *_norm("blocks.{i}.ln2_post.", "post MLP norms", "post MLP LayerNorms"),
    Name(
        "blocks.{i}.hook_mlp_out",
        ("position", "d_model"),
        "the MLP output, post·W_out + b_out (experts: their weighted sum, plus the shared expert's; "
        "after ln2_post where there is one)",
        "MLP",
    ),
    Name(
        "blocks.{i}.hook_mlp_sum",
        ("position", "d_model"),
        "resid_mid + mlp_out, what a post-norm block's ln2 normalizes",
        "post-norm block",
    ),
    *_norm("blocks.{i}.ln2.", "post-norm block", "post-norm LayerNorm"),
    Name(
        "blocks.{i}.hook_attn_mlp_sum",
        ("position", "d_model"),
        "attn_out + mlp_out: what a parallel block adds",
        "parallel block",
    ),
    Name(
        "blocks.{i}.hook_resid_post",
        ("position", "d_model"),
        "the residual stream leaving block i: resid_mid + mlp_out (parallel: resid_pre + attn_mlp_sum; "
        "attention-only: resid_pre + attn_out; post-norm: ln2 of mlp_sum; with cross-attention: resid_cross + mlp_out)",
    ),
    *_norm("ln_final.", "final norm", "final LayerNorm"),
    Name("mlm.hook_dense", ("position", "d_model"), "the MLM transform's x·W_dense + b_dense", "MLM head"),
    Name("mlm.hook_act", ("position", "d_model"), "its activation, which mlm.ln normalizes before the head", "MLM head"),
    *_norm("mlm.ln.", "MLM head", "MLM head LayerNorm"),
    Name("hook_logits_uncapped", ("position", "vocab"), "x · W_U, before soft-capping", "final soft-capping"),
    Name(
        "hook_logits",
        ("position", "vocab"),
        "next-token scores (an encoder's: each position's token; soft-capped where the model caps them)",
    ),
    Name("hook_log_probs", ("position", "vocab"), "log-softmax of the logits (the loss is computed from these)"),
    Name(
        "hook_probs",
        ("position", "vocab"),
        "softmax of the logits (a side branch: it has no gradient; exp(hook_log_probs), computed when read)",
    ),
    Name("hook_loss", ("position",), "each position's cross-entropy; NaN where the loss has no target"),
]

# Every parameter, in the order the model registers them.
PARAMETERS: list[Name] = [
    Name("embed.W_E", ("vocab", "d_model"), "token embedding (also the head when tied)"),
    Name("pos_embed.W_pos", ("context", "d_model"), "positional table", "learned positions"),
    Name("token_type_embed.W_type", ("token_type", "d_model"), "token-type (segment) rows", "token types"),
    Name("ln_embed.w", ("d_model",), "embedding norm scale γ", "embedding norm"),
    Name("ln_embed.b", ("d_model",), "embedding norm shift β", "embedding LayerNorm"),
    Name(
        "W_pos_bias", ("bucket", "head"), "relative position bias: a score per bucket of distance and head", "relative positions"
    ),
    Name("blocks.{i}.ln1.w", ("d_model",), "norm scale γ", "block norms"),
    Name("blocks.{i}.ln1.b", ("d_model",), "norm shift β", "LayerNorm"),
    Name("blocks.{i}.attn.W_Q", ("head", "d_model", "d_head"), "query projection, per head"),
    Name("blocks.{i}.attn.W_K", ("kv_head", "d_model", "d_head"), "key projection, per key/value head"),
    Name("blocks.{i}.attn.W_V", ("kv_head", "d_model", "d_head"), "value projection, per key/value head"),
    Name("blocks.{i}.attn.W_O", ("head", "d_head", "d_model"), "output projection, per head"),
    Name("blocks.{i}.attn.b_Q", ("head", "d_head"), "query bias", "attention biases"),
    Name("blocks.{i}.attn.b_K", ("kv_head", "d_head"), "key bias", "attention biases"),
    Name("blocks.{i}.attn.b_V", ("kv_head", "d_head"), "value bias", "attention biases"),
    Name("blocks.{i}.attn.b_O", ("d_model",), "output bias", "attention output bias"),
    Name("blocks.{i}.attn.q_norm.w", ("d_head",), "QK-norm scale on queries", "QK-norm"),
    Name("blocks.{i}.attn.q_norm.b", ("d_head",), "QK-norm shift on queries", "QK-norm LayerNorm"),
    Name("blocks.{i}.attn.k_norm.w", ("d_head",), "QK-norm scale on keys", "QK-norm"),
    Name("blocks.{i}.attn.k_norm.b", ("d_head",), "QK-norm shift on keys", "QK-norm LayerNorm"),
    Name("blocks.{i}.attn.q_norm_full.w", ("q_width",), "full-width QK-norm scale on queries", "full-width QK-norm"),
    Name("blocks.{i}.attn.q_norm_full.b", ("q_width",), "full-width QK-norm shift on queries", "full-width QK-norm LayerNorm"),
    Name("blocks.{i}.attn.k_norm_full.w", ("kv_width",), "full-width QK-norm scale on keys", "full-width QK-norm"),
    Name("blocks.{i}.attn.k_norm_full.b", ("kv_width",), "full-width QK-norm shift on keys", "full-width QK-norm LayerNorm"),
    Name("blocks.{i}.ln1_post.w", ("d_model",), "post-attention norm scale", "post norms"),
    Name("blocks.{i}.ln1_post.b", ("d_model",), "post-attention norm shift", "post LayerNorms"),
    Name("blocks.{i}.ln_cross.w", ("d_model",), "cross-attention norm scale γ", "cross-attention"),
    Name("blocks.{i}.ln_cross.b", ("d_model",), "cross-attention norm shift β", "cross-attention LayerNorm"),
    Name("blocks.{i}.cross_attn.W_Q", ("head", "d_model", "d_head"), "cross-attention query projection", "cross-attention"),
    Name(
        "blocks.{i}.cross_attn.W_K",
        ("kv_head", "d_model", "d_head"),
        "cross-attention key projection (of the source)",
        "cross-attention",
    ),
    Name(
        "blocks.{i}.cross_attn.W_V",
        ("kv_head", "d_model", "d_head"),
        "cross-attention value projection (of the source)",
        "cross-attention",
    ),
    Name("blocks.{i}.cross_attn.W_O", ("head", "d_head", "d_model"), "cross-attention output projection", "cross-attention"),
    Name("blocks.{i}.cross_attn.b_Q", ("head", "d_head"), "cross-attention query bias", "cross-attention biases"),
    Name("blocks.{i}.cross_attn.b_K", ("kv_head", "d_head"), "cross-attention key bias", "cross-attention biases"),
    Name("blocks.{i}.cross_attn.b_V", ("kv_head", "d_head"), "cross-attention value bias", "cross-attention biases"),
    Name("blocks.{i}.cross_attn.b_O", ("d_model",), "cross-attention output bias", "cross-attention output bias"),
    Name("blocks.{i}.ln2.w", ("d_model",), "norm scale γ", "MLP norm"),
    Name("blocks.{i}.ln2.b", ("d_model",), "norm shift β", "MLP LayerNorm"),
    Name("blocks.{i}.mlp.W_in", ("d_model", "neuron"), "MLP input (gated MLP: the linear branch)", "dense MLP"),
    Name("blocks.{i}.mlp.W_out", ("neuron", "d_model"), "MLP output", "dense MLP"),
    Name("blocks.{i}.mlp.W_gate", ("d_model", "neuron"), "the gate's projection", "gated MLP"),
    Name("blocks.{i}.mlp.b_in", ("neuron",), "MLP input bias", "MLP biases"),
    Name("blocks.{i}.mlp.b_out", ("d_model",), "MLP output bias", "MLP biases"),
    Name("blocks.{i}.mlp.b_gate", ("neuron",), "the gate's bias", "gated MLP with biases"),
    Name("blocks.{i}.mlp.W_router", ("d_model", "expert"), "the router: a column of scores per expert", "mixture of experts"),
    Name("blocks.{i}.mlp.W_shared_gate", ("d_model",), "the shared expert's gate", "shared expert gate"),
    Name(
        "blocks.{i}.mlp.experts.W_in",
        ("expert", "d_model", "expert_neuron"),
        "each expert's input (gated: its linear branch)",
        "mixture of experts",
    ),
    Name("blocks.{i}.mlp.experts.W_out", ("expert", "expert_neuron", "d_model"), "each expert's output", "mixture of experts"),
    Name(
        "blocks.{i}.mlp.experts.W_gate", ("expert", "d_model", "expert_neuron"), "each expert's gate projection", "gated experts"
    ),
    Name(
        "blocks.{i}.mlp.shared.W_in",
        ("d_model", "shared_neuron"),
        "the shared expert's input (gated: its linear branch)",
        "shared expert",
    ),
    Name("blocks.{i}.mlp.shared.W_out", ("shared_neuron", "d_model"), "the shared expert's output", "shared expert"),
    Name(
        "blocks.{i}.mlp.shared.W_gate", ("d_model", "shared_neuron"), "the shared expert's gate projection", "gated shared expert"
    ),
    Name("blocks.{i}.ln2_post.w", ("d_model",), "post-MLP norm scale", "post MLP norms"),
    Name("blocks.{i}.ln2_post.b", ("d_model",), "post-MLP norm shift", "post MLP LayerNorms"),
    Name("ln_final.w", ("d_model",), "final norm scale γ", "final norm"),
    Name("ln_final.b", ("d_model",), "final norm shift β", "final LayerNorm"),
    Name("mlm.W_dense", ("d_model", "d_model"), "the MLM transform's matrix", "MLM head"),
    Name("mlm.b_dense", ("d_model",), "the MLM transform's bias", "MLM head"),
    Name("mlm.ln.w", ("d_model",), "the MLM transform's norm scale γ", "MLM head"),
    Name("mlm.ln.b", ("d_model",), "the MLM transform's norm shift β", "MLM head LayerNorm"),
    Name("unembed.W_U", ("d_model", "vocab"), "unembedding", "untied head"),
    Name("unembed.b_U", ("vocab",), "output bias, added to the logits", "output bias"),
]


# An encoder-decoder's own names, beside its two stacks' (see ``lookup``).
SEQ2SEQ: list[Name] = [
    Name(
        "encoder.hook_out",
        ("source", "d_model"),
        "the encoder's output (after its final norm, where it has one): what every cross-attention's keys and "
        "values are computed from",
        "encoder-decoder",
    ),
]
STACKS = ("encoder.", "decoder.")  # an encoder-decoder's two stacks: each holds the names a decoder-only model's stack does
SHARED = ("embed.W_E",)  # outside the stacks, before them: an encoder-decoder's one embedding
HEAD = ("mlm.", "unembed.", "hook_logits", "hook_log_probs", "hook_probs", "hook_loss")  # outside the stacks, after them
