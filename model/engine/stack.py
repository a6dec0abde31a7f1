"""A stack of blocks and what prepares their input: the embedded tokens x, then
    x = x + W_pos[position]              (a learned table; RoPE is inside attention instead)
    x = x + W_type[0]                    (BERT's token-type rows: one sentence is all type 0)
    x = ln_embed(x)                      (BERT's embedding norm)
    bias = W_pos_bias[bucket(k − q)]     (T5's relative positions: one bias on every block's scores)
    x = block_{n−1}(… block_0(x))
The final norm belongs to the stack but is applied by its reader: the decoder-only model's head
(which the logit lens applies to earlier points too), or an encoder's output.

A decoder-only Transformer is one stack (with the embedding and the head around it); an
encoder-decoder has two, named under "encoder." and "decoder." (seq2seq.py).
"""

from __future__ import annotations

import torch
from torch import nn

from glassbox.model.engine.capture import hook
from glassbox.model.engine.components import Block, Norm
from glassbox.model.engine.config import ModelConfig
from glassbox.model.engine.kv_cache import KVCache
from glassbox.model.engine.relative import relative_bias


# Modules that only hold a parameter, annotated for mypy (as transformer.Embedding is)
class PositionTable(nn.Module):
    W_pos: nn.Parameter


class TokenTypes(nn.Module):
    W_type: nn.Parameter


class Stack(nn.Module):
    def __init__(self, cfg: ModelConfig, prefix: str = ""):
        super().__init__()
        self.cfg = cfg
        self._add_stack(cfg, prefix)

    def _add_stack(self, cfg: ModelConfig, prefix: str) -> None:
        """The stack's parameters, in the order the registry lists them (names.PARAMETERS)."""
        self.stack_prefix = prefix
        if cfg.positional == "table":
            self.pos_embed = PositionTable()
            self.pos_embed.W_pos = nn.Parameter(torch.zeros(cfg.n_ctx, cfg.d_model))
        if cfg.n_token_types is not None:
            self.token_type_embed = TokenTypes()
            self.token_type_embed.W_type = nn.Parameter(torch.zeros(cfg.n_token_types, cfg.d_model))
        if cfg.embed_norm:
            self.ln_embed = Norm(cfg, prefix + "ln_embed.")
        if cfg.positional == "relative":
            self.W_pos_bias = nn.Parameter(torch.zeros(cfg.relative_buckets, cfg.n_heads))
        self.blocks = nn.ModuleList(Block(cfg, i, prefix) for i in range(cfg.n_layers))
        if cfg.final_norm:
            self.ln_final = Norm(cfg, prefix + "ln_final.")

    def run(
        self,
        x: torch.Tensor,
        cache: KVCache | None = None,
        source: torch.Tensor | None = None,
        source_cache: KVCache | None = None,
    ) -> torch.Tensor:
        """The embedded tokens x (batch, positions, d_model) through the positions and the blocks,
        not the final norm. With a ``cache``, x continues the cached positions, and is added to it.
        ``source``, ``source_cache``: the encoder's output and its keys and values, for a decoder."""
        p, cfg = self.stack_prefix, self.cfg
        T = x.shape[1]
        start = cache.length if cache is not None else 0
        if cfg.positional == "table":
            # looked up like the tokens (a copy, not a view): a trace never aliases a weight
            positions = torch.arange(start, start + T, device=x.device)
            x = x + hook(p + "hook_pos_embed", self.pos_embed.W_pos[positions].expand_as(x))
        if cfg.n_token_types is not None:  # every token of a single sentence is of type 0
            x = x + hook(p + "hook_token_type_embed", self.token_type_embed.W_type[0].expand_as(x))
        if cfg.embed_norm:
            x = self.ln_embed(x)
        bias = None
        if cfg.positional == "relative":  # computed once, shared by every block (as T5's first layer shares it)
            bias = hook(
                p + "hook_pos_bias",
                relative_bias(self.W_pos_bias, start, T, start + T, not cfg.causal, cfg.relative_max_distance)[None],
            )
        for block in self.blocks:
            x = block(x, cache, bias, source, source_cache)
        if cache is not None:
            cache.length += T
        return x
