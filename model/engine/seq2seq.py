"""An encoder-decoder (T5, BART) whose forward pass names every tensor, built from the decoder-only
model's parts: one token embedding W_E shared by two stacks (stack.py) and the head.

    source tokens s (S of them)  →  encoder: bidirectional blocks, its final norm  →  e = encoder.hook_out
    decoder tokens t (T of them) →  decoder: each block causal self-attention, then cross-attention
                                    (queries from the decoder's stream, keys and values from e),
                                    then the MLP; its final norm  →  head  →  logits (T, vocab)

In training and in a trace the decoder reads the target shifted right (teacher forcing): it
reads decoder_start_token_id, then the target's tokens but the last, and position i predicts the
target's token i (``shift_right``). T5's specifics are config switches: RMSNorm without a mean,
scores without the 1/√d scale (attn_scale 1), the relative position bias (relative.py: one per
stack, bidirectional in the encoder, causal in the decoder), ReLU or gated-GELU MLPs, and with a
tied head the stream scaled by d_model^-0.5 before it (head_scale). BART's too: post-norm blocks
(norm_position "post", the cross-attention normed after its sum as well), each stack's learned
positions and embedding LayerNorm (stack.py), no final norm, a head bias (unembed_bias).

Names: the encoder's tensors under "encoder." (its positions on the "source" axis), the decoder's
under "decoder.", the cross-attention's "decoder.blocks.{i}.cross_attn.*" (its pattern is
(head, target position, source position)); the embedding W_E and the head's names are unprefixed.
"""

from __future__ import annotations

import torch

from glassbox.model.engine.capture import hook
from glassbox.model.engine.config import ModelConfig, check_context
from glassbox.model.engine.errors import GlassboxError
from glassbox.model.engine.kv_cache import KVCache
from glassbox.model.engine.stack import Stack
from glassbox.model.engine.transformer import LanguageModel, Output, Transformer
from glassbox.model.engine.work import pass_started


def shift_right(target: torch.Tensor, start_token: int) -> torch.Tensor:
    """The decoder's input for teacher forcing: ``start_token``, then the target but its last token."""
    return torch.cat([torch.full_like(target[:, :1], start_token), target[:, :-1]], dim=1)


class EncoderDecoder(LanguageModel):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self._add_embedding(cfg)
        encoder, decoder = cfg.stacks()
        self.encoder = Stack(encoder, "encoder.")
        self.decoder = Stack(decoder, "decoder.")
        self._add_head(cfg)

    def encode(self, source: torch.Tensor) -> torch.Tensor:
        """source: (batch, S) ids → the encoder's output (batch, S, d_model), what cross-attention reads."""
        check_context(self.cfg, source.shape[1], what="The source")
        x = self.encoder.run(self._embed(source, "encoder."))
        if self.cfg.final_norm:
            x = self.encoder.ln_final(x)
        return hook("encoder.hook_out", x)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """The decoder's stream → logits: its final norm, then the head."""
        if self.cfg.final_norm:
            x = self.decoder.ln_final(x)
        return self._vocab_logits(x)

    def forward(
        self,
        source: torch.Tensor | None,
        tokens: torch.Tensor,
        targets: torch.Tensor | None = None,
        *,
        encoded: torch.Tensor | None = None,
        cache: KVCache | None = None,
        source_cache: KVCache | None = None,
        last_only: bool = False,
    ) -> Output:
        """source: (batch, S) ids for the encoder (or ``encoded``, its output, computed once for a
        generation). tokens: (batch, T) the decoder's input. targets: (batch, T) the id each
        decoder position should predict, -1 where none. ``cache``: the decoder's self-attention
        keys and values; ``source_cache``: the cross-attention's, computed from the source once."""
        pass_started()  # work.py
        if encoded is None:
            if source is None:
                raise GlassboxError("An encoder-decoder's pass reads the source tokens or the encoder's output (encoded=)")
            encoded = self.encode(source)
        start = cache.length if cache is not None else 0
        check_context(self.cfg, start + tokens.shape[1], what="The target")
        x = self.decoder.run(self._embed(tokens, "decoder."), cache, encoded, source_cache)
        if last_only:
            x = x[:, -1:]
        return self._output(self.head(x), targets)


def build_model(cfg: ModelConfig) -> Transformer | EncoderDecoder:
    """The model a config describes: an EncoderDecoder where ``cfg.encoder_decoder``, else a Transformer."""
    return EncoderDecoder(cfg) if cfg.encoder_decoder else Transformer(cfg)
