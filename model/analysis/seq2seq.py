"""An encoder-decoder's pass (run_seq2seq_trace) read out: the model's own output for a source,
what each decoder position predicts and its loss, the two residual streams point by point, and
where each cross-attention query looks most.

The decoder reads the target shifted right (its start token, then the target but the last), so
decoder position i predicts target token i; the trace's ``tokens`` are what it reads."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.engine import GlassboxError, Trace, block_label
from glassbox.model.engine.sampling import Sampling, TextModel, generate

ENCODER, DECODER = "encoder.", "decoder."  # an encoder-decoder's two stacks, as their tensors are named
# the residual stream inside a block, in the order a position meets them (those a block has are traced)
BLOCK_POINTS = ("hook_resid_mid", "hook_resid_cross", "hook_resid_post")


def greedy_target(loaded: TextModel, source: str, n_tokens: int) -> list[int]:
    """The model's own output for ``source``: ``n_tokens`` tokens of the engine's generation at
    temperature 0 (each the most likely token given the source and the ones before)."""
    return [step.token_id for step in generate(loaded, source, n_tokens, Sampling(temperature=0))]


@dataclass(frozen=True)
class Predictions:
    """Per decoder position: the target token it should predict, the model's probability for it,
    its loss, and the model's top tokens there."""

    target: list[int]
    p_target: np.ndarray  # (T,)
    loss: np.ndarray  # (T,) −log p(target token), from the trace's hook_log_probs (the loss's own), in float64
    top_ids: np.ndarray  # (T, k) most likely first; equal probabilities in id order
    top_probs: np.ndarray  # (T, k)

    @property
    def mean_loss(self) -> float:
        """The pass's loss: the mean over the target's tokens (run_seq2seq_trace's ``loss``)."""
        return float(self.loss.mean())


def predictions(trace: Trace, target: list[int], k: int = 5) -> Predictions:
    """What each decoder position of a teacher-forced trace predicts, against ``target`` (the
    target the trace was run with: position i predicts ``target[i]``)."""
    if len(target) != len(trace.tokens):
        raise GlassboxError(f"The target has {len(target)} tokens; the trace's decoder read {len(trace.tokens)}")
    log_probs = trace["hook_log_probs"].to(torch.float64).cpu()  # what the model's loss is computed from
    chosen = log_probs[torch.arange(len(target)), torch.tensor(target)]
    probs = log_probs.exp()
    values, ids = torch.sort(probs, dim=-1, descending=True, stable=True)  # ties in id order, as sampling's top
    k = min(k, probs.shape[-1])
    return Predictions(list(target), chosen.exp().numpy(), (-chosen).numpy(), ids[:, :k].numpy(), values[:, :k].numpy())


def stream_points(trace: Trace, stack: str) -> list[tuple[str, str]]:
    """(label, tensor) of one stack's residual stream (``stack``: "encoder." or "decoder."; "" for
    a decoder-only model), in order: what enters block 0, then within each block every point
    it has (after attention, after cross-attention, the block's output), then the stack's final
    norm where there is one. Only what the trace holds."""
    names = set(trace.names())
    first = stack + "blocks.0.hook_resid_pre"
    points = [("embeddings", first if first in names else stack + "hook_embed")]
    i = 0
    while f"{stack}blocks.{i}.hook_resid_pre" in names:
        points += [
            (f"{block_label(i)}: {point.removeprefix('hook_')}", f"{stack}blocks.{i}.{point}")
            for point in BLOCK_POINTS
            if f"{stack}blocks.{i}.{point}" in names
        ]
        i += 1
    if stack + "ln_final.hook_out" in names:
        points.append(("final norm", stack + "ln_final.hook_out"))
    return points


def stream_norms(trace: Trace, points: list[tuple[str, str]]) -> np.ndarray:
    """(points, positions): the L2 norm of the residual stream at each point and position, float64."""
    return torch.stack([trace[name].to(torch.float64).norm(dim=-1) for _, name in points]).cpu().numpy()


def stream_vectors(trace: Trace, points: list[tuple[str, str]], position: int) -> np.ndarray:
    """(points, d_model): one position's vector at each point of the stream, float64."""
    return torch.stack([trace[name][position].to(torch.float64) for _, name in points]).cpu().numpy()


def most_attended(pattern: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each query (row) of one head's pattern (queries × keys): the key it puts the most weight
    on (the first where several tie) and that weight, its share of the row."""
    pattern = np.asarray(pattern, dtype=np.float64)
    where = pattern.argmax(-1)
    return where, pattern[np.arange(len(pattern)), where]
