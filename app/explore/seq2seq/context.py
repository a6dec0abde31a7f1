"""What every encoder-decoder view shares: the source and the target in context, their one trace
(forward and backward) from the shared cache, and the two stacks."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import streamlit as st

from glassbox.app.explore.common import Explorer
from glassbox.app.resources import admitted_pass, same_request_waits, trace_cache
from glassbox.model.analysis.seq2seq import DECODER, ENCODER
from glassbox.model.engine import Trace
from glassbox.model.serving import Needs

STACKS = {"encoder": ENCODER, "decoder": DECODER}  # each stack in words (as in the URL): its tensors' prefix


@dataclass
class Seq2SeqExplorer(Explorer):
    """``source``: what the encoder reads; ``target_tokens``: the target, which decoder position i
    predicts token i of; ``tokens``: what the decoder reads (its start token, then the target but
    the last). ``greedy``: the target is the model's own output for the source."""

    target_tokens: list[int] = field(default_factory=list)
    greedy: bool = False

    @classmethod
    def of(cls, model_key: str, loaded, source: list[int], target: list[int], greedy: bool) -> Seq2SeqExplorer:
        read = [loaded.cfg.decoder_start_token_id] + target[:-1]
        return cls(model_key, loaded, read, None, source=source, target_tokens=target, greedy=greedy)

    @cached_property
    def target_labels(self) -> list[str]:
        """The target's positions: decoder position i and the token it should predict."""
        return [f"{i}:{self.piece(t)}" for i, t in enumerate(self.target_tokens)]

    def stack_labels(self, stack: str) -> list[str]:
        """The positions of a stack's tensors: the source's in the encoder, what the decoder reads in the decoder."""
        return self.source_labels if stack == ENCODER else self.labels

    def n_layers(self, stack: str) -> int:
        return self.cfg.n_layers if stack == ENCODER else self.cfg.n_decoder_layers

    def trace(self, needs: Needs | None = None) -> Trace:
        """Every tensor and gradient of this source and target (the mean loss over the target's
        tokens), whatever the view needs: one trace per (model, source, target), admitted against
        the server's budget and kept in the cache every session shares."""
        key = ("seq2seq", self.model_key, tuple(self.source), tuple(self.target_tokens))
        length = max(len(self.source), len(self.tokens))

        def compute() -> Trace:
            with admitted_pass("trace", self.loaded, length, backward=True):
                return self.loaded.trace(self.target_tokens, backward=True, source=self.source)

        with st.spinner("Tracing the source and the target…"), same_request_waits("the same trace") as waiting:
            return trace_cache().get(key, compute, waiting)
