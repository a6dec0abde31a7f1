"""Real models' shapes, from their config.json values (the hub's own keys; no weights), and what
follows from a shape alone: the parameters, counted tensor by tensor; FLOPs per token; the bytes
the KV cache keeps per token. Lessons 6 and 7 read it.

The entries already curated for loading (model/io/catalog.py) are taken from there. GPT-3 has no
hub configuration: its shape is table 2.1 of the GPT-3 paper, written in GPT-2's keys."""

from __future__ import annotations

from dataclasses import dataclass

from glassbox.model.io.catalog import GPT2, PYTHIA, entry

BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}


@dataclass(frozen=True)
class Shape:
    """What the parameter count and the cache need to know of a decoder."""

    layers: int
    d_model: int
    heads: int
    kv_heads: int
    d_head: int
    d_ff: int
    vocab: int
    context: int
    tied: bool
    position_table: bool  # learned positions (GPT-2, GPT-3); the others rotate q and k (RoPE)
    layernorm: bool  # LayerNorm (a weight and a bias) rather than RMSNorm (a weight)
    gated: bool  # SwiGLU/GeGLU: three matrices per MLP instead of two
    qkv_bias: bool
    out_bias: bool
    mlp_bias: bool
    qk_norm: bool = False  # a norm over each head's q and k (Qwen3, Gemma 3)
    norms_per_layer: int = 2  # Gemma 3 also normalises each sublayer's output: 4
    experts: int = 1  # Mixtral: 8 MLPs per layer and a router
    active_experts: int = 1


@dataclass(frozen=True)
class RealModel:
    name: str
    config: dict  # config.json's keys (GPT-3: the paper's shape in GPT-2's keys)
    published: float  # the parameter count its authors give
    source: str  # where the published count is from

    @property
    def shape(self) -> Shape:
        return shape_of(self.config)

    @property
    def parameters(self) -> int:
        return count(self.shape)[0]

    @property
    def active_parameters(self) -> int:
        return count(self.shape)[1]


def shape_of(c: dict) -> Shape:
    """A config.json as a Shape, read the way each family's transformers class reads it."""
    kind = c["model_type"]
    if kind == "gpt2":
        d = c["n_embd"]
        return Shape(
            c["n_layer"],
            d,
            c["n_head"],
            c["n_head"],
            d // c["n_head"],
            c.get("n_inner") or 4 * d,
            c["vocab_size"],
            c["n_positions"],
            True,
            True,
            True,
            False,
            True,
            True,
            True,
        )
    if kind == "gpt_neox":
        d, h = c["hidden_size"], c["num_attention_heads"]
        return Shape(
            c["num_hidden_layers"],
            d,
            h,
            h,
            d // h,
            c["intermediate_size"],
            c["vocab_size"],
            c["max_position_embeddings"],
            c.get("tie_word_embeddings", False),
            False,
            True,
            False,
            True,
            True,
            True,
        )
    if kind in ("llama", "qwen3", "mixtral", "gemma3_text"):
        d, h = c["hidden_size"], c["num_attention_heads"]
        return Shape(
            c["num_hidden_layers"],
            d,
            h,
            c.get("num_key_value_heads", h),
            c.get("head_dim") or d // h,
            c["intermediate_size"],
            c["vocab_size"],
            c["max_position_embeddings"],
            c.get("tie_word_embeddings", False),
            False,
            False,
            True,
            c.get("attention_bias", False),
            c.get("attention_bias", False),
            c.get("mlp_bias", False),
            qk_norm=kind in ("qwen3", "gemma3_text"),
            norms_per_layer=4 if kind == "gemma3_text" else 2,
            experts=c.get("num_local_experts", 1),
            active_experts=c.get("num_experts_per_tok", 1),
        )
    raise ValueError(f"no shape reader for model_type {kind!r}")


def parts(s: Shape) -> dict[str, int]:
    """Where the parameters are, tensor by tensor: the embeddings (the position table and an untied
    head with them); per layer the attention's four projections (grouped-query: K and V for
    kv_heads only), their biases and q/k norms; the MLPs (each expert's, and the router); the norms
    (each layer's and the final one)."""
    norm = 2 * s.d_model if s.layernorm else s.d_model
    q_width, kv_width = s.heads * s.d_head, s.kv_heads * s.d_head
    attention = s.d_model * (q_width + 2 * kv_width) + q_width * s.d_model
    attention += (q_width + 2 * kv_width) * s.qkv_bias + s.d_model * s.out_bias + 2 * s.d_head * s.qk_norm
    router = s.d_model * s.experts if s.experts > 1 else 0
    return {
        "embeddings": s.vocab * s.d_model * (1 if s.tied else 2) + s.context * s.d_model * s.position_table,
        "attention": s.layers * attention,
        "MLP": s.layers * (s.experts * mlp_size(s) + router),
        "norms": s.layers * s.norms_per_layer * norm + norm,
    }


def mlp_size(s: Shape) -> int:
    """One MLP (one expert): two matrices, or three when gated, and their biases."""
    return (3 if s.gated else 2) * s.d_model * s.d_ff + (s.d_ff + s.d_model) * s.mlp_bias


def count(s: Shape) -> tuple[int, int]:
    """(all parameters, those one token uses: with experts, only the active ones' MLPs)."""
    total = sum(parts(s).values())
    return total, total - s.layers * (s.experts - s.active_experts) * mlp_size(s)


def flops_per_token(s: Shape) -> int:
    """≈ 2 × the parameters a token uses: one multiply and one add per weight it is multiplied by.
    Attention's own products (q·k and the weighted values, growing with the context) are left out."""
    return 2 * count(s)[1]


def kv_bytes_per_token(s: Shape, dtype: str = "fp16", kv_heads: int | None = None) -> int:
    """Keys and values (2) × layers × key/value heads × d_head × bytes per number."""
    return 2 * s.layers * (kv_heads or s.kv_heads) * s.d_head * BYTES[dtype]


LLAMA = {"model_type": "llama", "hidden_act": "silu", "rms_norm_eps": 1e-05, "tie_word_embeddings": False}
LLAMA_70B = dict(
    LLAMA, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8
)

MODELS = [
    RealModel("GPT-2 small", dict(GPT2, n_layer=12), 124e6, "Radford et al. 2019 (the hub card: 124M)"),
    RealModel("GPT-2 medium", dict(GPT2, n_layer=24, n_embd=1024, n_head=16), 355e6, "the hub card: 355M"),
    RealModel("GPT-2 large", dict(GPT2, n_layer=36, n_embd=1280, n_head=20), 774e6, "the hub card: 774M"),
    RealModel("GPT-2 XL", dict(GPT2, n_layer=48, n_embd=1600, n_head=25), 1.5e9, "the hub card: 1.5B"),
    RealModel(
        "GPT-3 175B",
        {"model_type": "gpt2", "n_layer": 96, "n_embd": 12288, "n_head": 96, "n_positions": 2048, "vocab_size": 50257},
        175e9,
        "Brown et al. 2020, table 2.1 (shape and count)",
    ),
    RealModel("Pythia-70M", entry("EleutherAI/pythia-70m").config, 70_426_624, "Biderman et al. 2023, table 1"),
    RealModel(
        "Pythia-1.4B",
        dict(PYTHIA, hidden_size=2048, num_hidden_layers=24, num_attention_heads=16, intermediate_size=8192),
        1_414_647_808,
        "Biderman et al. 2023, table 1",
    ),
    RealModel(
        "Pythia-12B",
        dict(PYTHIA, vocab_size=50688, hidden_size=5120, num_hidden_layers=36, num_attention_heads=40, intermediate_size=20480),
        11_846_072_320,
        "Biderman et al. 2023, table 1",
    ),
    RealModel("Llama-2-70B", dict(LLAMA_70B, vocab_size=32000, max_position_embeddings=4096), 70e9, "Touvron et al. 2023 (70B)"),
    RealModel(
        "Llama-3-8B",
        dict(
            LLAMA,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=128256,
            max_position_embeddings=8192,
        ),
        8e9,
        "Meta 2024 (the hub card: 8B)",
    ),
    RealModel(
        "Llama-3-70B", dict(LLAMA_70B, vocab_size=128256, max_position_embeddings=8192), 70e9, "Meta 2024 (the hub card: 70B)"
    ),
    RealModel("Qwen3-0.6B", entry("Qwen/Qwen3-0.6B").config, 0.6e9, "Qwen 2025 (the hub card: 0.6B)"),
    RealModel(
        "Qwen3-8B",
        dict(
            entry("Qwen/Qwen3-0.6B").config,
            hidden_size=4096,
            intermediate_size=12288,
            num_hidden_layers=36,
            num_attention_heads=32,
            num_key_value_heads=8,
            tie_word_embeddings=False,
        ),
        8.2e9,
        "Qwen 2025 (the hub card: 8.2B)",
    ),
    RealModel("Gemma-3-270M", entry("google/gemma-3-270m").config, 270e6, "Google 2025 (the hub card: 270M)"),
    RealModel(
        "Gemma-3-1B",
        dict(
            entry("google/gemma-3-270m").config,
            hidden_size=1152,
            intermediate_size=6912,
            num_hidden_layers=26,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=256,
            layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(26)],
        ),
        1e9,
        "Google 2025 (the hub card: 1B)",
    ),
    RealModel(
        "Mixtral-8x7B",
        {
            "model_type": "mixtral",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "vocab_size": 32000,
            "max_position_embeddings": 32768,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "tie_word_embeddings": False,
            "rms_norm_eps": 1e-05,
        },
        46.7e9,
        "Mistral AI 2024 (46.7B, 12.9B active)",
    ),
]
MODEL = {m.name: m for m in MODELS}


# DeepSeek-V3's attention (its config.json's keys; multi-head latent attention, MLA): keys and values
# are rebuilt per head from a shared latent of kv_lora_rank numbers, each query and key head is a
# part without position (qk_nope_head_dim) and a part RoPE rotates (qk_rope_head_dim), and a value
# head has its own width. No single d_head describes it, and d_model / heads is none of them.
DEEPSEEK_V3_ATTENTION = {
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_attention_heads": 128,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
}


def mla_head_widths(c: dict) -> dict[str, int]:
    """An MLA config's per-head widths, as transformers' DeepseekV3Attention reads them."""
    return {
        "query and key": c["qk_nope_head_dim"] + c["qk_rope_head_dim"],
        "of which RoPE": c["qk_rope_head_dim"],
        "value": c["v_head_dim"],
        "d_model / heads": c["hidden_size"] // c["num_attention_heads"],
    }
