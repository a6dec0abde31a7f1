"""The lesson on key figures of real models: each catalogued model's shape, its parameters counted from
the shapes beside the published count, FLOPs and KV-cache bytes per token; and where the course's
appendix table (gentle-introduction.txt) differs from the configurations."""

from __future__ import annotations

from glassbox.model.course.exercises import Exercise, draw
from glassbox.model.course.real_model_configs import (
    DEEPSEEK_V3_ATTENTION,
    MODEL,
    MODELS,
    RealModel,
    count,
    flops_per_token,
    kv_bytes_per_token,
    mla_head_widths,
    parts,
    shape_of,
)

# The course appendix's figures that differ from the models' configurations: (model, what, printed).
APPENDIX_SLIPS = [("GPT-2 small", "vocab", 5025), ("GPT-2 XL", "context", 2048)]
DEEPSEEK_PRINTED_D_HEAD = 56  # the appendix's d_head for DeepSeek-V3: d_model / heads, 7168 / 128


def row(model: RealModel) -> dict:
    s = model.shape
    total, active = count(s)
    return {
        "model": model.name,
        "layers": s.layers,
        "d_model": s.d_model,
        "heads": s.heads,
        "kv_heads": s.kv_heads,
        "d_head": s.d_head,
        "d_ff": s.d_ff,
        "vocab": s.vocab,
        "context": s.context,
        "parameters": total,
        "active_parameters": active,
        "published": model.published,
        "difference_percent": 100 * (total / model.published - 1),
        "flops_per_token": flops_per_token(s),
        "kv_bytes_per_token_fp16": kv_bytes_per_token(s),
        "where": parts(s),
        "source": model.source,
    }


def appendix_slips() -> list[dict]:
    """The course appendix's printed figures beside the configuration's."""
    return [
        {"model": name, "figure": what, "printed": printed, "configuration": row(MODEL[name])[what]}
        for name, what, printed in APPENDIX_SLIPS
    ]


def deepseek_d_head() -> dict:
    """The appendix's DeepSeek-V3 d_head beside its configuration's per-head widths (MLA)."""
    return {
        "printed": DEEPSEEK_PRINTED_D_HEAD,
        "d_model": DEEPSEEK_V3_ATTENTION["hidden_size"],
        "heads": DEEPSEEK_V3_ATTENTION["num_attention_heads"],
        **mla_head_widths(DEEPSEEK_V3_ATTENTION),
    }


def figures(loaded=None) -> dict:
    return {
        "models": [row(m) for m in MODELS],
        "appendix_slips": appendix_slips(),
        "deepseek_d_head": deepseek_d_head(),
        "flops_note": "2 × the parameters a token uses; attention's context-dependent products left out",
    }


# --- exercises ------------------------------------------------------------------------------


def exercises(seed: int, loaded=None) -> list[Exercise]:
    """The parameters of a GPT-2-style and of a Llama-style configuration, counted exactly (the
    count of real_model_configs, which the lesson holds to published counts; ``loaded`` is not used)."""
    rng = draw("key-figures", seed)

    heads = int(rng.choice([4, 8, 12, 16]))
    d_model = heads * int(rng.choice([32, 64]))
    layers, vocab, context = (
        int(rng.integers(2, 13)),
        int(rng.choice([1000, 5000, 8192, 50257])),
        int(rng.choice([256, 512, 1024, 2048])),
    )
    gpt2 = {
        "model_type": "gpt2",
        "n_layer": layers,
        "n_embd": d_model,
        "n_head": heads,
        "n_positions": context,
        "vocab_size": vocab,
    }
    total = count(shape_of(gpt2))[0]
    gpt2_ex = Exercise(
        "gpt2_parameters",
        f"A GPT-2-style model: vocabulary {vocab:,}, context {context:,}, d_model {d_model}, "
        f"{layers} blocks of {heads} heads, MLP width 4 × d_model. It has a token embedding (also used as the output "
        "matrix), a learned position table, and per block a LayerNorm (weight and bias) before attention and before "
        "the MLP, the Q, K, V and output projections with biases, and the MLP's two matrices with biases; then a final "
        "LayerNorm. How many parameters does it have? The exact number.",
        total,
        unit="parameters",
        hint="Per block: attention 4·d² + 4·d, MLP 8·d² + 5·d (4d + d biases), two LayerNorms 4·d; add the "
        "embeddings and the final LayerNorm.",
        solution=f"embeddings {vocab:,} × {d_model} + {context:,} × {d_model} = {(vocab + context) * d_model:,}; "
        f"per block 12 × {d_model}² + 13 × {d_model} = {12 * d_model**2 + 13 * d_model:,}, × {layers} = "
        f"{layers * (12 * d_model**2 + 13 * d_model):,}; final LayerNorm {2 * d_model}: {total:,}.",
        data={"vocab": vocab, "context": context, "d_model": d_model, "layers": layers, "heads": heads},
    )

    heads = int(rng.choice([8, 16, 32]))
    kv_heads = int(rng.choice([h for h in (1, 2, 4, 8) if h < heads]))
    d_head = int(rng.choice([64, 128]))
    d_model, layers = heads * d_head, int(rng.integers(2, 33))
    d_ff, vocab = int(rng.choice([2, 3, 4])) * d_model + 256 * int(rng.integers(0, 4)), int(rng.choice([32000, 128256]))
    llama = {
        "model_type": "llama",
        "hidden_size": d_model,
        "intermediate_size": d_ff,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "vocab_size": vocab,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
    }
    total = count(shape_of(llama))[0]
    kv = kv_heads * d_head
    per_block = 2 * d_model * d_model + 2 * d_model * kv + 3 * d_model * d_ff + 2 * d_model
    llama_ex = Exercise(
        "llama_parameters",
        f"A Llama-style model: vocabulary {vocab:,}, d_model {d_model}, {layers} blocks of {heads} "
        f"query heads (d_head {d_head}) sharing {kv_heads} key/value heads, a SwiGLU MLP of width {d_ff}. It has a token "
        "embedding and a separate output matrix, no position table (RoPE), no biases, and per block an RMSNorm "
        "(a weight) before attention and before the MLP, Q and output projections, K and V for the key/value heads "
        "only, and the MLP's three matrices; then a final RMSNorm. How many parameters does it have? The exact "
        "number.",
        total,
        unit="parameters",
        hint="K and V are d_model × (key/value heads × d_head) each; SwiGLU has gate, up and down matrices.",
        solution=f"embedding and output 2 × {vocab:,} × {d_model} = {2 * vocab * d_model:,}; per block 2 × "
        f"{d_model}² + 2 × {d_model} × {kv} + 3 × {d_model} × {d_ff} + 2 × {d_model} = {per_block:,}, × "
        f"{layers} = {layers * per_block:,}; final RMSNorm {d_model}: {total:,}.",
        data={
            "vocab": vocab,
            "d_model": d_model,
            "layers": layers,
            "heads": heads,
            "kv_heads": kv_heads,
            "d_head": d_head,
            "d_ff": d_ff,
        },
    )
    return [gpt2_ex, llama_ex]
