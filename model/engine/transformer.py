"""A config-driven decoder-only transformer (or encoder) whose forward pass names every tensor.

Conventions (shared by the engine, the CLI, npz exports and the UI):
- Row vectors times matrices: ``q = x @ W_Q``. Weights are stored (in, out), like GPT-2's
  Conv1D and the worked example's article, and split per head: ``W_Q[h]`` is head h's
  (d_model, d_head) matrix.
- Activations carry a batch dimension inside the model; a ``Trace`` (see trace.py) holds
  one sequence and drops it. Per-head tensors put the head first: ``hook_q`` is
  (heads, positions, d_head), ``hook_pattern`` is (heads, query position, key position).
- ``hook(name, x)`` marks a tensor; it does nothing unless a capture is active. Every name
  is listed, with its axes, in names.py (a test keeps the two in step).

Covered architectures: the article's worked example (pre-norm LayerNorm, ReLU FFN with
biases, a positional table, no attention biases, tied head), GPT-2 (learned positions,
tanh-GELU, biases, final LayerNorm, tied head), and the families model/io/convert/ opens:
GPT-NeoX (parallel blocks, partial RoPE), GPT-Neo (unscaled scores, local attention),
Llama/Mistral/Qwen (RMSNorm, SwiGLU, RoPE with scaling, grouped-query attention, QK-norm,
windows), Gemma (scaled embeddings, GeGLU, post norms, soft-capping, per-layer RoPE) and the
mixtures of experts Mixtral, Qwen-MoE and OLMoE (a router and its experts in place of the MLP,
a gated shared expert, dense blocks among sparse ones, full-width QK-norm, q/k/v clipping), and
the encoder BERT (attention both ways, post-norm blocks, token types, an embedding norm, the MLM
head). The layers between the embedding and the head are a Stack (stack.py), which an
encoder-decoder (seq2seq.py) has two of; what both kinds of model share is LanguageModel.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple, Self

import torch
import torch.nn.functional as F
from torch import nn

from glassbox.model.engine.capture import hook, sparse_embedding, wants
from glassbox.model.engine.components import Norm
from glassbox.model.engine.components.mlp import activation
from glassbox.model.engine.config import ModelConfig, check_context
from glassbox.model.engine.device import HALF, widened
from glassbox.model.engine.errors import GlassboxError
from glassbox.model.engine.kv_cache import KVCache
from glassbox.model.engine.names import is_norm_parameter
from glassbox.model.engine.stack import Stack
from glassbox.model.engine.work import pass_started


class Output(NamedTuple):
    logits: torch.Tensor  # (batch, positions, vocab)
    loss: torch.Tensor | None  # mean cross-entropy over the positions that have a target


# Modules that only hold parameters under the registry's names (embed.W_E, mlm.W_dense): their
# annotations type the attributes for mypy (nn.Module types any attribute as Tensor | Module).
class Embedding(nn.Module):
    W_E: nn.Parameter


class MLMHead(nn.Module):
    W_dense: nn.Parameter
    b_dense: nn.Parameter
    ln: Norm


class Unembedding(nn.Module):
    W_U: nn.Parameter
    b_U: nn.Parameter


class LanguageModel(nn.Module):
    """What a decoder-only model and an encoder-decoder share: the token embedding W_E, the head
    (BERT's MLM transform, the output matrix W_U, its bias, soft-capping), the loss, precision and
    initialisation. A base of a module with ``cfg`` and ``embed.W_E``."""

    cfg: ModelConfig
    device_map: dict[str, str | int]  # set on a model split across devices (placement.dispatch), else absent

    def _add_embedding(self, cfg: ModelConfig) -> None:
        self.embed = Embedding()
        self.embed.W_E = nn.Parameter(torch.zeros(cfg.vocab_size, cfg.d_model))

    def _add_head(self, cfg: ModelConfig) -> None:
        """BERT's MLM transform (dense, activation, LayerNorm) and the output head's own weights."""
        if cfg.mlm_head:
            self.mlm = MLMHead()
            self.mlm.W_dense = nn.Parameter(torch.zeros(cfg.d_model, cfg.d_model))
            self.mlm.b_dense = nn.Parameter(torch.zeros(cfg.d_model))
            self.mlm.ln = Norm(cfg, "mlm.ln.")
        if not cfg.tie_embeddings or cfg.unembed_bias:
            self.unembed = Unembedding()
        if not cfg.tie_embeddings:
            self.unembed.W_U = nn.Parameter(torch.zeros(cfg.d_model, cfg.vocab_size))
        if cfg.unembed_bias:
            self.unembed.b_U = nn.Parameter(torch.zeros(cfg.vocab_size))

    def in_precision(self, dtype: torch.dtype) -> Self:
        """The weights cast to ``dtype``, in place. In a half-precision model two small things stay
        float32: RoPE's frequencies, as transformers keeps them (rounded to bfloat16 they would turn
        far positions wrong), and the norms' weights, which the norms apply in float32 (Gemma's
        stored 1 + w is then exactly transformers' float32 1 + w, not rounded to bfloat16)."""
        for name, param in self.named_parameters():
            keep = dtype in HALF and is_norm_parameter(name)
            param.data = param.data.to(torch.float32 if keep else dtype)
        if dtype not in HALF:
            for module in self.modules():
                for name, buffer in module.named_buffers(recurse=False):
                    setattr(module, name, buffer.to(dtype))
        return self

    @property
    def W_U(self) -> torch.Tensor:
        """The output head, (d_model, vocab); with tied embeddings it is W_E transposed."""
        return self.embed.W_E.T if self.cfg.tie_embeddings else self.unembed.W_U

    @property
    def device(self) -> torch.device:
        return self.embed.W_E.device

    @torch.no_grad()
    def init_weights(self, seed: int = 0, std: float = 0.02) -> Self:
        """GPT-2's initialisation: N(0, std), output projections scaled by 1/sqrt(2 n_layers)."""
        gen = torch.Generator().manual_seed(seed)
        for name, param in self.named_parameters():
            if is_norm_parameter(name):
                param.fill_(1.0 if name.endswith(".w") else 0.0)
            elif name.split(".")[-1].startswith("b"):
                param.zero_()
            else:
                scale = std / math.sqrt(2 * self.cfg.n_layers) if name.endswith(("W_O", "W_out")) else std
                param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float64) * scale)
        return self

    def _embed(self, tokens: torch.Tensor, prefix: str = "") -> torch.Tensor:
        """The rows W_E[token] (× embed_scale), hooked as ``prefix`` + "hook_embed"."""
        # In a traced backward the lookup's gradient is sparse, so autograd adds its rows in place
        # into the tied head's dense gradient: a dense one would be a vocabulary-sized zero tensor
        # and a vocabulary-sized sum, a third of GPT-2's traced backward. run_trace densifies it.
        x = F.embedding(tokens, self.embed.W_E, sparse=sparse_embedding() and torch.is_grad_enabled())
        if self.cfg.embed_scale is not None:
            x = x * torch.tensor(self.cfg.embed_scale, dtype=x.dtype)  # rounded to the model's precision, as in Gemma
        return hook(prefix + "hook_embed", x)

    def _vocab_logits(self, x: torch.Tensor, columns: list[int] | None = None) -> torch.Tensor:
        """The normed stream → logits: BERT's MLM transform, T5's scale, x · W_U (+ b_U), and
        soft-capping where the model caps its logits; of the vocabulary ids ``columns`` alone
        where given."""
        cfg = self.cfg
        if cfg.mlm_head:
            pre = hook("mlm.hook_dense", x @ self.mlm.W_dense + self.mlm.b_dense)
            x = self.mlm.ln(hook("mlm.hook_act", activation(cfg.activation, pre)))
        if cfg.head_scale is not None:
            x = x * cfg.head_scale
        W_U = self.W_U if columns is None else self.W_U[:, columns]
        logits = x.to(W_U.device) @ W_U  # a split model's head may sit on another device
        if cfg.unembed_bias:
            logits = logits + (self.unembed.b_U if columns is None else self.unembed.b_U[columns])
        if cfg.final_softcap is not None:
            cap = cfg.final_softcap
            logits = torch.tanh(hook("hook_logits_uncapped", logits) / cap) * cap
        return logits

    def _output(self, logits: torch.Tensor, targets: torch.Tensor | None) -> Output:
        """The hooked logits and, with ``targets`` (-1 where a position has none), the mean
        cross-entropy over the positions with one."""
        logits = hook("hook_logits", logits)
        if targets is None and not (wants("hook_log_probs") or wants("hook_probs")):
            return Output(logits, None)

        # The loss is computed from log-probabilities; the probabilities are a side branch
        # for display, so they get no gradient.
        # (in float32 for a half-precision model, as transformers computes its loss)
        log_probs = hook("hook_log_probs", widened(logits).log_softmax(dim=-1))
        if wants("hook_probs"):
            hook("hook_probs", log_probs.exp())
        if targets is None:
            return Output(logits, None)
        targets = targets.to(log_probs.device)  # made beside the tokens; a split model's head may be elsewhere
        has_target = targets >= 0
        nll = -log_probs.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
        per_position = hook("hook_loss", torch.where(has_target, nll, float("nan")))
        loss = torch.where(has_target, per_position, 0.0).sum() / has_target.sum()
        return Output(logits, loss)


class Transformer(Stack, LanguageModel):
    """A decoder-only model (or, with ``causal`` false, an encoder such as BERT): the embedding,
    one stack of blocks (stack.py), the head."""

    def __init__(self, cfg: ModelConfig):
        nn.Module.__init__(self)
        self.cfg = cfg
        self._add_embedding(cfg)
        self._add_stack(cfg, "")
        self._add_head(cfg)

    def head(self, x: torch.Tensor, columns: list[int] | None = None) -> torch.Tensor:
        """Residual stream → logits (of the vocabulary ids ``columns`` alone, where given): the
        final norm and the head (also what the logit lens applies to earlier points of the stream)."""
        if self.cfg.final_norm:
            x = self.ln_final(x)
        return self._vocab_logits(x, columns)

    def forward(
        self, tokens: torch.Tensor, targets: torch.Tensor | None = None, cache: KVCache | None = None, last_only: bool = False
    ) -> Output:
        """tokens: (batch, positions) ids. targets: same shape, the id each position should
        predict, -1 where none; the loss is the mean cross-entropy over positions with one.
        With a ``cache``, ``tokens`` continue the cached positions, and are added to it.
        ``last_only``: the logits of the last position alone (generation needs no others, and the
        head is the largest product of a long prompt)."""
        if last_only and targets is not None:
            raise GlassboxError("last_only computes the last position's logits alone: no loss over the others")
        pass_started()  # counted, and where a long computation was cancelled, stopped here (work.py)
        start = cache.length if cache is not None else 0
        check_context(self.cfg, start + tokens.shape[1])
        x = self.run(self._embed(tokens), cache)
        if last_only:
            x = x[:, -1:]
        return self._output(self.head(x), targets)

    def forward_from(
        self,
        resid: torch.Tensor,
        block: int,
        last_only: bool = False,
        cache: KVCache | None = None,
        columns: list[int] | None = None,
    ) -> Output:
        """The rest of a pass from the residual stream entering ``block`` (what
        ``blocks.{block}.hook_resid_pre`` holds, batch × positions × d_model): the blocks from
        there, then the head. An analysis that changes nothing before ``block`` runs this instead
        of the whole pass (path patching). With a ``cache``, ``resid`` continues its positions
        (and is added to it); with ``columns``, the logits (and ``hook_logits``) are of those
        vocabulary ids alone (a metric that reads two: GPT-2's whole head reads 154 MB of weights
        per pass).
        Relative positions (T5) are not supported here."""
        if self.cfg.positional == "relative":
            raise GlassboxError("A pass from a block needs every block's position bias: not for relative positions")
        pass_started()
        x = resid
        for later in self.blocks[block:]:
            x = later(x, cache)
        if cache is not None:
            cache.length += x.shape[1]
        if last_only:
            x = x[:, -1:]
        return self._output(self.head(x, columns), None)


# The config fields a variant may change: they change what the pass computes, not the shapes or
# buffers of the weights it shares.
VARIANT_FIELDS = ("causal", "attn_scale", "expert_capacity")


def variant(model: Transformer, **changes) -> Transformer:
    """The same weights under a changed config: ``variant(model, causal=False)`` attends both ways,
    as an encoder does; ``variant(model, attn_scale=1.0)`` drops the 1/√d_head score scale. The
    new module holds the model's own parameter and buffer objects (nothing is copied), so the
    shared model is neither changed nor duplicated; as with the model itself, gradients are taken
    with torch.autograd.grad, never .backward()."""
    unknown = sorted(set(changes) - set(VARIANT_FIELDS))
    if unknown:
        raise GlassboxError(f"A variant changes only {', '.join(VARIANT_FIELDS)}, not {', '.join(unknown)}")
    with torch.device("meta"):  # no memory for weights that are replaced at once
        other = Transformer(dataclasses.replace(model.cfg, **changes))
    other.load_state_dict(model.state_dict(keep_vars=True), assign=True)
    for name, buffer in model.named_buffers():  # the non-persistent ones too (RoPE's frequencies)
        owner, _, attribute = name.rpartition(".")
        setattr(other.get_submodule(owner), attribute, buffer)
    return other.train(model.training)
