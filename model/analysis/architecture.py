"""A model's architecture in words: what its blocks do that a plain GPT-2 block does not, each
phrase read off the config (the Overview shows them)."""

from __future__ import annotations

import math

from glassbox.model.engine import GlassboxError, ModelConfig
from glassbox.model.engine.names import block_runs

# What the explorer, the analyses and the CLI say where a model lacks what they read
NO_BLOCKS = "This model has no blocks: its logits are W_E · W_U, a bigram table."
NO_MLP = "This model has no MLP: its blocks are attention only."
NO_NORMS = "This model has no norms: each sublayer reads the residual stream as it is."
NO_POSITIONS = "This model has no positions: a token's vector is the same wherever it stands."
ENCODER_DECODER = (
    "This model is an encoder-decoder, which reads a source and writes a target: this analysis reads a "
    "single decoder's pass over one prompt, so it does not apply (the explorer shows an encoder-decoder "
    "in views of its own: both stacks, cross-attention, every tensor and gradient)."
)


def has_mlp(cfg: ModelConfig) -> bool:
    """Whether the model's blocks have MLPs (not a zero-layer or an attention-only model)."""
    return cfg.n_layers > 0 and not cfg.attn_only


def missing(cfg: ModelConfig, mlp: bool = False) -> str | None:
    """Why a model lacks what an analysis reads, in one sentence: a single decoder-only pass (an
    encoder-decoder), its blocks (a zero-layer model), or with ``mlp`` their MLPs (an
    attention-only model); None where it has them."""
    if cfg.encoder_decoder:
        return ENCODER_DECODER
    if cfg.n_layers == 0:
        return NO_BLOCKS
    return NO_MLP if mlp and cfg.attn_only else None


def require(cfg: ModelConfig, mlp: bool = False) -> None:
    """A GlassboxError saying ``missing``'s sentence, where there is one."""
    why = missing(cfg, mlp)
    if why:
        raise GlassboxError(why)


def _ranges(layers: list[int]) -> str:
    """The engine's block indices [0, 1, 2, 4] → "blocks 1–3, 5", counted from 1 as every page
    counts blocks ("block 1 (blocks.0)")."""
    return ("block " if len(layers) == 1 else "blocks ") + block_runs(layers)


def architecture(cfg: ModelConfig) -> list[str]:
    """One short phrase per feature of this model's blocks, in the order a token meets them."""
    notes = []
    if cfg.kind == "encoder":
        notes.append("an encoder: every position sees every other, and each predicts its own token (masked LM), not the next one")
    if cfg.embed_scale is not None:
        notes.append(f"embeddings × {cfg.embed_scale:.4g} (√d_model)")
    if cfg.n_token_types:
        notes.append(f"token-type rows ({cfg.n_token_types}) added to the embeddings: a single sentence is type 0")
    if cfg.embed_norm:
        notes.append(f"a {_norm_name(cfg)} on the summed embeddings, before the first block")
    if cfg.n_layers == 0:  # nothing of a block applies
        return notes + ["no blocks: the head reads the embeddings directly, a bigram table", *_positions(cfg), *_head(cfg)]
    if cfg.attn_only:
        notes.append("attention only: no MLP, each block adds its attention output alone")
    else:
        notes.append(
            "parallel block: attention and MLP both read the block's input"
            if cfg.parallel_block
            else "sequential block: the MLP reads the stream after attention"
        )
    where = "attention" if cfg.attn_only else "each sublayer"
    if cfg.norm == "none":
        notes.append(f"no norms: {where} reads the stream as it is")
    elif cfg.norm_position == "post":  # the norm is on the stream itself: nothing passes a block un-normed
        notes.append(
            f"{_norm_name(cfg)} after each sublayer, on the stream plus its output: x = norm(x + sublayer(x)) (post-norm)"
        )
    else:
        notes.append(_norm_name(cfg) + (f" before and after {where}" if cfg.post_norms else f" before {where}"))
    notes += _positions(cfg)
    notes += _attention(cfg)
    if cfg.gated_mlp and not cfg.attn_only:
        kind = {"silu": "SwiGLU", "gelu_tanh": "GeGLU", "gelu": "GeGLU"}.get(cfg.activation, f"gated {cfg.activation}")
        notes.append(f"{kind} {'experts' if cfg.n_experts else 'MLP'}: act(x·W_gate) × x·W_in")
    return notes + _experts(cfg) + _head(cfg)


def _experts(cfg: ModelConfig) -> list[str]:
    if cfg.n_experts is None:
        return []
    weights = "renormalised to sum to 1" if cfg.norm_top_k else "their router probabilities, not renormalised"
    notes = [
        f"mixture of experts: {cfg.n_experts} experts of {cfg.d_ff_expert} neurons; a router sends each token "
        f"to {cfg.experts_top_k}, whose outputs are summed with weights {weights}"
    ]
    if cfg.d_ff_shared is not None:
        notes.append(
            f"a shared expert of {cfg.d_ff_shared} neurons that every token goes through"
            + (", its output scaled by a sigmoid gate" if cfg.shared_expert_gate else "")
        )
    if cfg.moe_layers is not None:
        layers = [i for i in range(cfg.n_layers) if cfg.is_moe(i)]
        notes.append(f"experts in {_ranges(layers)}; a dense MLP of {cfg.d_ff} neurons in the others")
    return notes


def _positions(cfg: ModelConfig) -> list[str]:
    if cfg.positional == "none":
        return ["no positions: nothing says where a token stands"]
    if cfg.positional == "table":
        return [f"learned positions ({cfg.n_ctx:,} rows)"]
    rotary_dim = cfg.rotary_dim
    assert rotary_dim is not None, "ModelConfig sets it for RoPE"
    share = (
        "each head"
        if rotary_dim == cfg.d_head
        else (f"{rotary_dim / cfg.d_head:.0%} of each head ({rotary_dim} of {cfg.d_head} features)")
    )
    scaling = {"none": "", "linear": f", positions ÷ {cfg.rope_factor:g}", "llama3": f", llama3 scaling ×{cfg.rope_factor:g}"}[
        cfg.rope_scaling
    ]
    return [
        f"RoPE on {share}, base {cfg.rope_base:g}{scaling}"
        + (f"; local layers base {cfg.local_rope_base:g}" if cfg.local_rope_base else "")
    ]


def _norm_name(cfg: ModelConfig) -> str:
    return {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}[cfg.norm]


def _head(cfg: ModelConfig) -> list[str]:
    notes = [f"logits soft-capped at ±{cfg.final_softcap:g}"] if cfg.final_softcap is not None else []
    if not cfg.final_norm:
        notes.append(
            "no final norm: the last block's norm has normed the stream already"
            if cfg.norm_position == "post" and cfg.n_layers
            else "no final norm: the head reads the stream as it is"
        )
    if cfg.mlm_head:
        notes.append(f"the MLM head: {_norm_name(cfg)}({cfg.activation}(x·W_dense + b_dense)) before the unembedding")
    head = "tied head (W_U = W_Eᵀ)" if cfg.tie_embeddings else "untied head"
    return notes + [head + (" with a bias b_U of its own" if cfg.unembed_bias else "")]


def _attention(cfg: ModelConfig) -> list[str]:
    notes = []
    if cfg.n_kv_heads == 1 and cfg.n_heads > 1:
        notes.append(f"multi-query: {cfg.n_heads} query heads share 1 key/value head")
    elif cfg.n_kv_heads < cfg.n_heads:
        notes.append(
            f"GQA: {cfg.n_heads} query heads share {cfg.n_kv_heads} key/value heads ({cfg.n_heads // cfg.n_kv_heads} each)"
        )
    if cfg.d_head * cfg.n_heads != cfg.d_model:
        notes.append(f"heads of {cfg.d_head} features ({cfg.n_heads} × {cfg.d_head} ≠ d_model {cfg.d_model})")
    if cfg.qk_norm:
        notes.append("QK-norm: an RMSNorm on each head's q and k")
    if cfg.attn_scale is not None and not math.isclose(cfg.attn_scale, 1 / math.sqrt(cfg.d_head)):
        notes.append(f"scores × {cfg.attn_scale:.4g} (not 1/√d_head = {1 / math.sqrt(cfg.d_head):.4g})")
    if cfg.attn_softcap is not None:
        notes.append(f"scores soft-capped at ±{cfg.attn_softcap:g}")
    if cfg.window is not None:
        layers = [i for i in range(cfg.n_layers) if cfg.is_local(i)]
        where = "every block" if len(layers) == cfg.n_layers else _ranges(layers)
        notes.append(f"window {cfg.window:,} on {where}")
    return notes
