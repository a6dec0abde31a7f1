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
        _check_types(self)
        if self.d_head is None:
            if self.d_model % self.n_heads:
                raise GlassboxError(f"Invalid model config: d_model ({self.d_model}) must be a multiple of n_heads "
                                    f"({self.n_heads}), or d_head given")
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
        if not isinstance(values, dict):
            raise GlassboxError("A model config must be a JSON object of its fields")
        fields = dataclasses.fields(cls)
        unknown = set(values) - {f.name for f in fields}
        if unknown:
            raise GlassboxError(f"Unknown model config fields: {sorted(unknown)}")
        missing = [f.name for f in fields if f.default is dataclasses.MISSING and f.name not in values]
        if missing:
            raise GlassboxError(f"The model config lacks {missing}")
        return cls(**values)

    def kv_head(self, head: int) -> int:
        """The key/value head a query head reads (grouped-query attention shares them)."""
        return head // (self.n_heads // self.n_kv_heads)


def _check_types(cfg: ModelConfig) -> None:
    """Sizes are positive integers, numbers are positive, switches are booleans: checked before
    any arithmetic on them, so a bad config file gives one clear message, not a TypeError."""
    problems = []
    for field in dataclasses.fields(cfg):
        value = getattr(cfg, field.name)
        if value is None and field.default is None:
            continue
        if isinstance(field.default, bool):
            if not isinstance(value, bool):
                problems.append(f"{field.name} must be true or false, not {value!r}")
        elif isinstance(field.default, str):
            if not isinstance(value, str):
                problems.append(f"{field.name} must be a string, not {value!r}")
        elif isinstance(field.default, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                problems.append(f"{field.name} must be a positive number, not {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{field.name} must be a positive integer, not {value!r}")
    if problems:
        raise GlassboxError("Invalid model config: " + "; ".join(problems))


def check_context(cfg: ModelConfig, n_tokens: int, n_new: int = 0) -> None:
    """The one context-length rule: a prompt of ``n_tokens`` plus ``n_new`` generated tokens
    (the last of which is predicted, never fed back) must fit in the model's context."""
    if n_new == 0 and n_tokens > cfg.n_ctx:
        raise GlassboxError(f"The prompt is {n_tokens} tokens; this model's context is {cfg.n_ctx} tokens.")
    if n_new > 0 and n_tokens + n_new - 1 > cfg.n_ctx:
        raise GlassboxError(f"The prompt is {n_tokens} tokens; {n_new} new ones would run past this "
                            f"model's context of {cfg.n_ctx} tokens")
