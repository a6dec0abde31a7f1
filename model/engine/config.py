"""The model's shape and architecture as one frozen dataclass, and the context-length rule."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from model.engine.errors import GlassboxError

NORMS = ("layernorm", "rmsnorm")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")
POSITIONALS = ("table", "rope")


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    n_ctx: int  # longest sequence the model accepts
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    d_head: int | None = None  # default d_model // n_heads
    n_kv_heads: int | None = None  # fewer than n_heads: grouped-query; 1: multi-query
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    activation: str = "gelu_tanh"
    gated_mlp: bool = False  # SwiGLU = gated_mlp with activation "silu"
    positional: str = "table"  # "table": a (n_ctx, d_model) matrix added to embeddings
    rope_base: float = 10000.0
    attn_bias: bool = True
    mlp_bias: bool = True
    final_norm: bool = True
    tie_embeddings: bool = True

    def __post_init__(self):
        if self.d_head is None:
            object.__setattr__(self, "d_head", self.d_model // self.n_heads)
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        problems = []
        if self.norm not in NORMS:
            problems.append(f"norm must be one of {NORMS}, not {self.norm!r}")
        if self.activation not in ACTIVATIONS:
            problems.append(f"activation must be one of {ACTIVATIONS}, not {self.activation!r}")
        if self.positional not in POSITIONALS:
            problems.append(f"positional must be one of {POSITIONALS}, not {self.positional!r}")
        if self.n_heads % self.n_kv_heads:
            problems.append(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.positional == "rope" and self.d_head % 2:
            problems.append("RoPE needs an even d_head")
        if problems:
            raise GlassboxError("Invalid model config: " + "; ".join(problems))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "ModelConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise GlassboxError(f"Unknown model config fields: {sorted(unknown)}")
        return cls(**values)

    def kv_head(self, head: int) -> int:
        """The key/value head a query head reads (grouped-query attention shares them)."""
        return head // (self.n_heads // self.n_kv_heads)


def check_context(cfg: ModelConfig, n_tokens: int, n_new: int = 0) -> None:
    """The one context-length rule: a prompt of ``n_tokens`` plus ``n_new`` generated tokens
    (the last of which is predicted, never fed back) must fit in the model's context."""
    if n_new == 0 and n_tokens > cfg.n_ctx:
        raise GlassboxError(f"The prompt is {n_tokens} tokens; this model's context is {cfg.n_ctx} tokens.")
    if n_new > 0 and n_tokens + n_new - 1 > cfg.n_ctx:
        raise GlassboxError(f"The prompt is {n_tokens} tokens; {n_new} new ones would run past this "
                            f"model's context of {cfg.n_ctx} tokens")
