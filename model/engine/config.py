"""The model's shape and architecture as one frozen dataclass, and the context-length rule."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from glassbox.model.engine.errors import GlassboxError

NORMS = ("layernorm", "rmsnorm", "none")  # "none": no norm at all, the sublayers read the stream itself
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")
POSITIONALS = ("table", "rope", "relative", "none")  # "relative": T5's bucketed bias on the scores (relative.py)
NORM_POSITIONS = ("pre", "post")
ROPE_SCALINGS = ("none", "linear", "llama3")
QK_NORM_WIDTHS = ("head", "full")  # over each head's d_head features (Qwen 3, Gemma 3), or all heads' together (OLMoE)


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    n_ctx: int  # longest sequence the model accepts
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    # A field typed X with the default None is optional when the config is made and always set
    # after __post_init__ (a dataclass cannot type the two apart): hence its type: ignore.
    d_head: int = None  # type: ignore[assignment]  # default d_model // n_heads
    n_kv_heads: int = None  # type: ignore[assignment]  # fewer than n_heads: grouped-query; 1: multi-query
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    activation: str = "gelu_tanh"
    gated_mlp: bool = False  # SwiGLU = gated_mlp with activation "silu"
    positional: str = "table"  # "table": a (n_ctx, d_model) matrix added to embeddings; "none": no positions (bigram)
    rope_base: float = 10000.0
    attn_bias: bool = True  # biases on q, k, v (and on the output, unless attn_out_bias says otherwise)
    mlp_bias: bool = True
    final_norm: bool = True
    tie_embeddings: bool = True
    # The families beyond GPT-2 (issue 12); every default keeps the plain GPT-2/Llama behaviour.
    attn_out_bias: bool = None  # type: ignore[assignment]  # None: as attn_bias (GPT-Neo: False/True; Qwen2: True/False)
    parallel_block: bool = False  # GPT-NeoX: attention and MLP both read the block's input
    rotary_dim: int | None = None  # RoPE on the first rotary_dim features of each head (None: all)
    rope_scaling: str = "none"  # "linear" or "llama3": how the frequencies are stretched
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0  # llama3 scaling only
    rope_high_freq_factor: float = 4.0  # llama3 scaling only
    rope_original_ctx: int = 8192  # llama3 scaling only
    window: int | None = None  # local attention: a query sees the `window` latest positions
    local_layers: tuple[int, ...] | None = None  # the layers with the window (None: all, when window is set)
    local_rope_base: float | None = None  # the local layers' own RoPE base, unscaled (Gemma 3)
    attn_scale: float | None = None  # what the scores q·k are multiplied by (None: 1/√d_head)
    attn_softcap: float | None = None  # scores → cap·tanh(scores/cap) (Gemma 2)
    final_softcap: float | None = None  # logits → cap·tanh(logits/cap) (Gemma 2)
    embed_scale: float | None = None  # the embedding rows are multiplied by it (Gemma: √d_model)
    qk_norm: bool = False  # an RMSNorm over each head's q and k, before RoPE (Qwen 3, Gemma 3)
    post_norms: bool = False  # a norm on each sublayer's output before it joins the residual (Gemma 2, 3)
    causal: bool = True  # False: every position sees every other, as an encoder does (the course's mask lesson)
    attn_only: bool = False  # blocks without an MLP: resid_post = resid_pre + attn_out (the micro-models' circuits)
    qk_norm_width: str = "head"  # "full": QK-norm over all heads' q (and k) features at once, before the split (OLMoE)
    clip_qkv: float | None = None  # q, k and v clamped to ±clip_qkv after QK-norm, before RoPE (OLMoE)
    # A mixture of experts (Mixtral, Qwen-MoE, OLMoE) in place of the MLP; None keeps the dense MLP.
    n_experts: int | None = None  # routed experts per MoE block
    experts_top_k: int = 2  # experts each position is routed to
    norm_top_k: bool = True  # the chosen experts' probabilities renormalised to sum to 1 (Mixtral; Qwen: norm_topk_prob)
    d_ff_expert: int | None = None  # each routed expert's width (default d_ff; d_ff stays the dense blocks' width)
    d_ff_shared: int | None = None  # a shared expert every position goes through, of this width (Qwen2-MoE)
    shared_expert_gate: bool = False  # the shared expert's output scaled by sigmoid(x · W_shared_gate) (Qwen2-MoE)
    moe_layers: tuple[int, ...] | None = None  # the blocks with experts (None: every block); the others keep a dense MLP
    # GShard's capacity factor C: each expert takes at most ceil(C · positions · top_k / n_experts) of a
    # sequence's positions, first come first served; a position over capacity loses that expert (None: no cap)
    expert_capacity: float | None = None
    # Encoders (BERT) and encoder-decoders (T5, BART); every default keeps the decoder-only behaviour above.
    norm_position: str = "pre"  # "post": each sublayer's sum is normed, x = LN(x + f(x)) (BERT, BART)
    n_token_types: int | None = None  # BERT's token-type (segment) embeddings; a single sentence is type 0
    embed_norm: bool = False  # a norm on the summed embeddings, before the first block (BERT)
    mlm_head: bool = False  # BERT's transform before the output head: LN(act(x W_dense + b_dense))
    unembed_bias: bool = False  # a bias b_U added to the logits (BERT's decoder bias)
    head_scale: float | None = None  # the stream multiplied by it before the head (T5 with a tied head: d_model^-0.5)
    encoder_decoder: bool = False  # an encoder of n_layers blocks and a decoder of n_decoder_layers (seq2seq.py)
    n_decoder_layers: int | None = None  # default n_layers
    relative_buckets: int = 32  # positional "relative": how many buckets of distance, each a learned bias per head
    relative_max_distance: int = 128  # distances from here on share the last bucket
    decoder_start_token_id: int = 0  # what an encoder-decoder's decoder reads first (T5: the pad token, 0)
    cross_attention: bool = False  # set on an encoder-decoder's decoder stack: each block attends to the encoder's output

    def __post_init__(self):
        _check_types(self)
        if self.d_head is None:
            if self.d_model % self.n_heads:
                raise GlassboxError(
                    f"Invalid model config: d_model ({self.d_model}) must be a multiple of n_heads "
                    f"({self.n_heads}), or d_head given"
                )
            object.__setattr__(self, "d_head", self.d_model // self.n_heads)
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.attn_out_bias is None:
            object.__setattr__(self, "attn_out_bias", self.attn_bias)
        if self.positional == "rope" and self.rotary_dim is None:
            object.__setattr__(self, "rotary_dim", self.d_head)
        if self.local_layers is not None:
            object.__setattr__(self, "local_layers", tuple(self.local_layers))
        if self.moe_layers is not None:
            object.__setattr__(self, "moe_layers", tuple(self.moe_layers))
        if self.encoder_decoder and self.n_decoder_layers is None:
            object.__setattr__(self, "n_decoder_layers", self.n_layers)
        if self.n_experts is not None and self.d_ff_expert is None:
            object.__setattr__(self, "d_ff_expert", self.d_ff)
        problems = []
        if self.norm not in NORMS:
            problems.append(f"norm must be one of {NORMS}, not {self.norm!r}")
        if self.activation not in ACTIVATIONS:
            problems.append(f"activation must be one of {ACTIVATIONS}, not {self.activation!r}")
        if self.positional not in POSITIONALS:
            problems.append(f"positional must be one of {POSITIONALS}, not {self.positional!r}")
        if self.n_heads % self.n_kv_heads:
            problems.append(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.positional == "rope" and (self.rotary_dim % 2 or self.rotary_dim > self.d_head):
            problems.append(f"RoPE needs an even rotary_dim of at most d_head ({self.d_head}), not {self.rotary_dim}")
        if self.rope_scaling not in ROPE_SCALINGS:
            problems.append(f"rope_scaling must be one of {ROPE_SCALINGS}, not {self.rope_scaling!r}")
        if self.attn_only and self.parallel_block:
            problems.append("an attention-only block has no MLP to run in parallel")
        if self.local_layers is not None and not all(0 <= i < self.n_layers for i in self.local_layers):
            problems.append(f"local_layers must be block indices below {self.n_layers}")
        if self.qk_norm_width not in QK_NORM_WIDTHS:
            problems.append(f"qk_norm_width must be one of {QK_NORM_WIDTHS}, not {self.qk_norm_width!r}")
        elif self.qk_norm_width != "head" and not self.qk_norm:
            problems.append(f"qk_norm_width {self.qk_norm_width!r} needs qk_norm")
        problems += self._norm_free_problems()
        problems += self._experts_problems()
        problems += self._encoder_problems()
        if problems:
            raise GlassboxError("Invalid model config: " + "; ".join(problems))

    def _norm_free_problems(self) -> list[str]:
        """A norm-free model (norm "none", as the grokking paper's) is a pre-norm decoder block
        without its norms: none of the other norms can be asked for."""
        if self.norm != "none":
            return []
        normed = [name for name in ("final_norm", "qk_norm", "post_norms", "embed_norm", "mlm_head") if getattr(self, name)]
        problems = [f"a model without norms (norm 'none') has no {name}: it must be false" for name in normed]
        if self.norm_position != "pre" or self.cross_attention or self.encoder_decoder:
            problems.append("a model without norms (norm 'none') is a decoder-only stack of pre-norm blocks")
        return problems

    def _experts_problems(self) -> list[str]:
        """What is wrong with the mixture-of-experts fields (nothing when they are unset)."""
        if self.n_experts is None:
            moe_only = [name for name in ("d_ff_shared", "moe_layers", "expert_capacity") if getattr(self, name) is not None]
            moe_only += ["shared_expert_gate"] if self.shared_expert_gate else []
            return [f"{name} needs n_experts (a mixture of experts)" for name in moe_only]
        problems = []
        if self.experts_top_k > self.n_experts:
            problems.append(f"experts_top_k ({self.experts_top_k}) must be at most n_experts ({self.n_experts})")
        if self.mlp_bias:
            problems.append("a mixture of experts has no MLP biases: mlp_bias must be false")
        if self.attn_only:
            problems.append("an attention-only block has no MLP to replace with experts")
        if self.expert_capacity is not None and self.expert_capacity * self.experts_top_k < 1 / self.n_experts:
            problems.append("expert_capacity leaves no expert a single position")
        if self.shared_expert_gate and self.d_ff_shared is None:
            problems.append("shared_expert_gate needs a shared expert (d_ff_shared)")
        if self.moe_layers is not None and not all(0 <= i < self.n_layers for i in self.moe_layers):
            problems.append(f"moe_layers must be block indices below {self.n_layers}")
        return problems

    def _encoder_problems(self) -> list[str]:
        """What is wrong with the encoder and encoder-decoder fields (nothing when they are unset)."""
        problems = []
        if self.norm_position not in NORM_POSITIONS:
            problems.append(f"norm_position must be one of {NORM_POSITIONS}, not {self.norm_position!r}")
        elif self.norm_position == "post" and (self.parallel_block or self.post_norms or self.attn_only):
            problems.append("a post-norm block is sequential, with an MLP and no other post norms")
        if self.cross_attention or self.encoder_decoder:
            unsupported = [name for name in ("qk_norm", "clip_qkv", "attn_softcap", "window") if getattr(self, name)]
            problems += [f"an encoder-decoder's cross-attention has no {name}" for name in unsupported]
        if self.n_decoder_layers is not None and not self.encoder_decoder:
            problems.append("n_decoder_layers needs encoder_decoder")
        if self.encoder_decoder and not self.causal:
            problems.append("an encoder-decoder's decoder is causal (its encoder attends both ways by itself)")
        return problems

    def stacks(self) -> tuple[ModelConfig, ModelConfig]:
        """An encoder-decoder's two stacks, each as a config of its own: the encoder's n_layers
        blocks attend both ways; the decoder's n_decoder_layers blocks are causal and attend to
        the encoder's output too."""
        decoder_layers = self.n_layers if self.n_decoder_layers is None else self.n_decoder_layers
        return (
            dataclasses.replace(self, causal=False, encoder_decoder=False, n_decoder_layers=None),
            dataclasses.replace(
                self, n_layers=decoder_layers, cross_attention=True, encoder_decoder=False, n_decoder_layers=None
            ),
        )

    @property
    def kind(self) -> str:
        """ "decoder" (GPT-2, Llama: causal, predicts the next token), "encoder" (BERT: attends both
        ways, predicts masked tokens) or "encoder-decoder" (T5: seq2seq.py)."""
        return "encoder-decoder" if self.encoder_decoder else "decoder" if self.causal else "encoder"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> ModelConfig:
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

    def is_local(self, layer: int) -> bool:
        """Whether a layer's attention is windowed (local) rather than over the whole prefix."""
        return self.window is not None and (self.local_layers is None or layer in self.local_layers)

    def is_moe(self, layer: int) -> bool:
        """Whether a block's MLP is a mixture of experts (else the dense MLP)."""
        return self.n_experts is not None and (self.moe_layers is None or layer in self.moe_layers)

    def kv_head(self, head: int) -> int:
        """The key/value head a query head reads (grouped-query attention shares them)."""
        return head // (self.n_heads // self.n_kv_heads)


ZERO_ALLOWED = ("n_layers", "decoder_start_token_id")  # a zero-layer model is a bigram table: logits = W_E · W_U


def _check_types(cfg: ModelConfig) -> None:
    """Sizes are positive integers, numbers are positive, switches are booleans: checked before
    any arithmetic on them, so a bad config file gives one clear message, not a TypeError.
    The kind of each field is read from its annotation; one whose default is None may also be null."""
    problems = []
    for field in dataclasses.fields(cfg):
        value = getattr(cfg, field.name)
        kind = field.type.replace(" | None", "")
        if value is None and field.default is None:
            continue
        if kind == "bool":
            if not isinstance(value, bool):
                problems.append(f"{field.name} must be true or false, not {value!r}")
        elif kind == "str":
            if not isinstance(value, str):
                problems.append(f"{field.name} must be a string, not {value!r}")
        elif kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                problems.append(f"{field.name} must be a positive number, not {value!r}")
        elif kind == "int":
            least = 0 if field.name in ZERO_ALLOWED else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                what = "a whole number ≥ 0" if least == 0 else "a positive integer"
                problems.append(f"{field.name} must be {what}, not {value!r}")
        elif not isinstance(value, (list, tuple)) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in value
        ):  # tuple[int, ...]
            problems.append(f"{field.name} must be a list of integers, not {value!r}")
    if problems:
        raise GlassboxError("Invalid model config: " + "; ".join(problems))


def check_prompt(cfg: ModelConfig, tokens: list[int], what: str = "The prompt") -> None:
    """The one rule for a prompt given to a pass: at least one token, within the context."""
    if len(tokens) == 0:
        raise GlassboxError(f"{what} is empty: give at least one token.")
    check_context(cfg, len(tokens), what=what)


def check_token_id(cfg: ModelConfig, token_id: int, what: str = "Token id") -> None:
    if not 0 <= token_id < cfg.vocab_size:
        raise GlassboxError(f"{what} {token_id} is outside the vocabulary (0..{cfg.vocab_size - 1})")


def check_context(cfg: ModelConfig, n_tokens: int, n_new: int = 0, what: str = "The prompt") -> None:
    """The one context-length rule: a prompt of ``n_tokens`` plus ``n_new`` generated tokens
    (the last of which is predicted, never fed back) must fit in the model's context."""
    if n_new == 0 and n_tokens > cfg.n_ctx:
        raise GlassboxError(f"{what} is {n_tokens:,} tokens; this model's context is {cfg.n_ctx:,} tokens.")
    if n_new > 0 and n_tokens + n_new - 1 > cfg.n_ctx:
        raise GlassboxError(
            f"{what} is {n_tokens:,} tokens; {n_new} new ones would run past this model's context of {cfg.n_ctx} tokens"
        )
