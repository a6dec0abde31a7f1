"""A config-driven decoder-only transformer whose forward pass names every tensor.

Conventions (shared by the engine, the CLI, npz exports and the UI):
- Row vectors times matrices: ``q = x @ W_Q``. Weights are stored (in, out), like GPT-2's
  Conv1D and the worked example's article, and split per head: ``W_Q[h]`` is head h's
  (d_model, d_head) matrix.
- Activations carry a batch dimension inside the model; a ``Trace`` (see trace.py) holds
  one sequence and drops it. Per-head tensors put the head first: ``hook_q`` is
  (heads, positions, d_head), ``hook_pattern`` is (heads, query position, key position).
- ``hook(name, x)`` marks a tensor; it does nothing unless a capture is active.

Covered architectures: the article's worked example (pre-norm LayerNorm, ReLU FFN with
biases, a positional table, no attention biases, tied head), GPT-2 (learned positions,
tanh-GELU, biases, final LayerNorm, tied head), and modern variants (RMSNorm, SwiGLU,
RoPE, grouped-query and multi-query attention, untied head).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .capture import hook, wants
from .errors import GlassboxError

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


class Output(NamedTuple):
    logits: torch.Tensor  # (batch, positions, vocab)
    loss: torch.Tensor | None  # mean cross-entropy over the positions that have a target


def _activation(name: str, x: torch.Tensor) -> torch.Tensor:
    if name == "relu":
        return F.relu(x)
    if name == "gelu":
        return F.gelu(x)
    if name == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    return F.silu(x)


class Norm(nn.Module):
    """LayerNorm (biased variance, eps inside the square root) or RMSNorm."""

    def __init__(self, cfg: ModelConfig, prefix: str):
        super().__init__()
        self.kind, self.eps, self.prefix = cfg.norm, cfg.norm_eps, prefix
        self.w = nn.Parameter(torch.ones(cfg.d_model))
        self.b = nn.Parameter(torch.zeros(cfg.d_model)) if cfg.norm == "layernorm" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.prefix
        if self.kind == "layernorm":
            mean = hook(p + "hook_mean", x.mean(-1))
            x = x - mean[..., None]
        scale = hook(p + "hook_scale", (x.pow(2).mean(-1) + self.eps).sqrt())
        normalized = hook(p + "hook_normalized", x / scale[..., None])
        out = normalized * self.w
        if self.b is not None:
            out = out + self.b
        return hook(p + "hook_out", out)


def rope_tables(cfg: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles, (n_ctx, d_head), in the rotate-half layout."""
    inv_freq = 1.0 / cfg.rope_base ** (torch.arange(0, cfg.d_head, 2, dtype=torch.float64) / cfg.d_head)
    angles = torch.outer(torch.arange(cfg.n_ctx, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (i, i + d_head/2) of each head's vector by the position's angles."""
    half = x.shape[-1] // 2
    rotated_half = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated_half * sin


class KVCache:
    """Each layer's keys and values for the positions seen so far (after RoPE, before the
    key/value heads are shared out), so that generation feeds the model only the new token.
    Belongs to one generation: never stored on the shared model."""

    def __init__(self, n_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers
        self.length = 0  # positions already cached

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this step's keys and values (batch, heads, new positions, d_head); return all."""
        if self.keys[layer] is not None:
            k, v = torch.cat([self.keys[layer], k], dim=2), torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values if t is not None)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, prefix: str, layer: int = 0):
        super().__init__()
        self.cfg, self.prefix, self.layer = cfg, prefix, layer
        H, K, D, dh = cfg.n_heads, cfg.n_kv_heads, cfg.d_model, cfg.d_head
        self.W_Q = nn.Parameter(torch.zeros(H, D, dh))
        self.W_K = nn.Parameter(torch.zeros(K, D, dh))
        self.W_V = nn.Parameter(torch.zeros(K, D, dh))
        self.W_O = nn.Parameter(torch.zeros(H, dh, D))
        if cfg.attn_bias:
            self.b_Q = nn.Parameter(torch.zeros(H, dh))
            self.b_K = nn.Parameter(torch.zeros(K, dh))
            self.b_V = nn.Parameter(torch.zeros(K, dh))
            self.b_O = nn.Parameter(torch.zeros(D))
        if cfg.positional == "rope":
            cos, sin = rope_tables(cfg)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    def _project(self, x: torch.Tensor, W: torch.Tensor, bias_name: str) -> torch.Tensor:
        out = torch.einsum("btd,hde->bhte", x, W)
        if self.cfg.attn_bias:
            out = out + getattr(self, bias_name)[:, None, :]
        return out

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        p, cfg = self.prefix, self.cfg
        T = x.shape[1]
        start = cache.length if cache is not None else 0  # absolute position of x's first row
        q = hook(p + "hook_q", self._project(x, self.W_Q, "b_Q"))
        k = hook(p + "hook_k", self._project(x, self.W_K, "b_K"))
        v = hook(p + "hook_v", self._project(x, self.W_V, "b_V"))
        if cfg.positional == "rope":
            cos, sin = self.rope_cos[start:start + T].to(x.dtype), self.rope_sin[start:start + T].to(x.dtype)
            q = hook(p + "hook_rot_q", apply_rope(q, cos, sin))
            k = hook(p + "hook_rot_k", apply_rope(k, cos, sin))
        if cache is not None:
            k, v = cache.extend(self.layer, k, v)
        if cfg.n_kv_heads != cfg.n_heads:  # each group of query heads shares one key/value head
            group = cfg.n_heads // cfg.n_kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)

        explicit = wants(p + "hook_scores") or wants(p + "hook_scores_masked") or wants(p + "hook_pattern")
        if explicit or start > 0:  # query at position start + i sees keys 0 .. start + i
            future = torch.ones(T, start + T, dtype=torch.bool, device=x.device).triu(start + 1)
        if explicit:
            scores = hook(p + "hook_scores", q @ k.transpose(-1, -2) / math.sqrt(cfg.d_head))
            masked = hook(p + "hook_scores_masked", scores.masked_fill(future, float("-inf")))
            pattern = hook(p + "hook_pattern", masked.softmax(dim=-1))
            z = pattern @ v
        elif start == 0:  # the fused kernel never materialises the pattern (nor the mask)
            z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=~future)
        z = hook(p + "hook_z", z)

        if wants(p + "hook_result"):
            result = hook(p + "hook_result", torch.einsum("bhte,hed->bhtd", z, self.W_O))
            out = result.sum(dim=1)
        else:
            out = torch.einsum("bhte,hed->btd", z, self.W_O)
        if cfg.attn_bias:
            out = out + self.b_O
        return out


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig, prefix: str):
        super().__init__()
        self.cfg, self.prefix = cfg, prefix
        D, Fd = cfg.d_model, cfg.d_ff
        self.W_in = nn.Parameter(torch.zeros(D, Fd))
        self.W_out = nn.Parameter(torch.zeros(Fd, D))
        if cfg.gated_mlp:
            self.W_gate = nn.Parameter(torch.zeros(D, Fd))
        if cfg.mlp_bias:
            self.b_in = nn.Parameter(torch.zeros(Fd))
            self.b_out = nn.Parameter(torch.zeros(D))
            if cfg.gated_mlp:
                self.b_gate = nn.Parameter(torch.zeros(Fd))

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        out = x @ getattr(self, "W_" + name)
        return out + getattr(self, "b_" + name) if self.cfg.mlp_bias else out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p, cfg = self.prefix, self.cfg
        if cfg.gated_mlp:  # act(x W_gate) * (x W_in), e.g. SwiGLU
            pre = hook(p + "hook_pre", self._linear(x, "gate"))
            gate = hook(p + "hook_gate", _activation(cfg.activation, pre))
            linear = hook(p + "hook_linear", self._linear(x, "in"))
            post = hook(p + "hook_post", gate * linear)
        else:
            pre = hook(p + "hook_pre", self._linear(x, "in"))
            post = hook(p + "hook_post", _activation(cfg.activation, pre))
        return self._linear(post, "out")


class Block(nn.Module):
    """Pre-norm block: x + attn(ln1(x)), then + mlp(ln2(.))."""

    def __init__(self, cfg: ModelConfig, index: int):
        super().__init__()
        self.prefix = p = f"blocks.{index}."
        self.ln1 = Norm(cfg, p + "ln1.")
        self.attn = Attention(cfg, p + "attn.", index)
        self.ln2 = Norm(cfg, p + "ln2.")
        self.mlp = MLP(cfg, p + "mlp.")

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        p = self.prefix
        resid_pre = hook(p + "hook_resid_pre", x)
        attn_out = hook(p + "hook_attn_out", self.attn(self.ln1(resid_pre), cache))
        resid_mid = hook(p + "hook_resid_mid", resid_pre + attn_out)
        mlp_out = hook(p + "hook_mlp_out", self.mlp(self.ln2(resid_mid)))
        return hook(p + "hook_resid_post", resid_mid + mlp_out)


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Module()
        self.embed.W_E = nn.Parameter(torch.zeros(cfg.vocab_size, cfg.d_model))
        if cfg.positional == "table":
            self.pos_embed = nn.Module()
            self.pos_embed.W_pos = nn.Parameter(torch.zeros(cfg.n_ctx, cfg.d_model))
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        if cfg.final_norm:
            self.ln_final = Norm(cfg, "ln_final.")
        if not cfg.tie_embeddings:
            self.unembed = nn.Module()
            self.unembed.W_U = nn.Parameter(torch.zeros(cfg.d_model, cfg.vocab_size))

    @property
    def W_U(self) -> torch.Tensor:
        """The output head, (d_model, vocab); with tied embeddings it is W_E transposed."""
        return self.embed.W_E.T if self.cfg.tie_embeddings else self.unembed.W_U

    @torch.no_grad()
    def init_weights(self, seed: int = 0, std: float = 0.02) -> "Transformer":
        """GPT-2's initialisation: N(0, std), output projections scaled by 1/sqrt(2 n_layers)."""
        gen = torch.Generator().manual_seed(seed)
        for name, param in self.named_parameters():
            if name.endswith((".w",)):
                param.fill_(1.0)
            elif name.split(".")[-1].startswith("b"):
                param.zero_()
            else:
                scale = std / math.sqrt(2 * self.cfg.n_layers) if name.endswith(("W_O", "W_out")) else std
                param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float64) * scale)
        return self

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None, cache: KVCache | None = None
                ) -> Output:
        """tokens: (batch, positions) ids. targets: same shape, the id each position should
        predict, -1 where none; the loss is the mean cross-entropy over positions with one.
        With a ``cache``, ``tokens`` continue the cached positions, and are added to it."""
        T = tokens.shape[1]
        start = cache.length if cache is not None else 0
        if start + T > self.cfg.n_ctx:
            raise GlassboxError(f"{start + T} tokens exceed this model's context of {self.cfg.n_ctx} tokens")
        x = hook("hook_embed", self.embed.W_E[tokens])
        if self.cfg.positional == "table":
            # looked up like the tokens (a copy, not a view): a trace never aliases a weight
            positions = torch.arange(start, start + T, device=tokens.device)
            x = x + hook("hook_pos_embed", self.pos_embed.W_pos[positions].expand_as(x))
        for block in self.blocks:
            x = block(x, cache)
        if cache is not None:
            cache.length += T
        if self.cfg.final_norm:
            x = self.ln_final(x)
        logits = hook("hook_logits", x @ self.W_U)
        if targets is None and not (wants("hook_log_probs") or wants("hook_probs")):
            return Output(logits, None)

        # The loss is computed from log-probabilities; the probabilities are a side branch
        # for display, so they get no gradient.
        log_probs = hook("hook_log_probs", logits.log_softmax(dim=-1))
        if wants("hook_probs"):
            hook("hook_probs", log_probs.exp())
        if targets is None:
            return Output(logits, None)
        has_target = targets >= 0
        nll = -log_probs.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
        per_position = hook("hook_loss", torch.where(has_target, nll, float("nan")))
        loss = torch.where(has_target, per_position, 0.0).sum() / has_target.sum()
        return Output(logits, loss)
