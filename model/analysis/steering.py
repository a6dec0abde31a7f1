"""Steering: generation with a vector added to the residual stream.

At block ``block`` the residual stream entering it (``blocks.{block}.hook_resid_pre``; or
``hook``, another tensor of the block that is or joins the stream) gets ``strength × vector``
added at every position from ``start`` on: the prompt's positions from ``start``, and every
token generated after them. The vector may come from two prompts
(contrastive activation addition: the difference of their residual streams at that block, at
their last positions) or from anywhere else of width d_model (a sparse-autoencoder feature's
decoder row, added where the SAE writes: features.steering_vector).

Generation runs with the KV cache, one token a pass after the prompt; the edit counts the
positions it has seen, so it knows where each pass's tokens sit in the sequence. The same
seed draws the steered and the plain completion: where they part, it is the vector's doing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from glassbox.model.engine import GlassboxError, run_trace
from glassbox.model.engine.edits import Edit, editing
from glassbox.model.engine.sampling import GeneratedToken, Sampling, generate


@dataclass(frozen=True)
class Steering:
    block: int  # the vector goes into blocks.{block}.{hook}
    vector: torch.Tensor  # (d_model,)
    strength: float = 1.0
    start: int = 0  # the first position steered (0: the whole prompt, and every new token)
    hook: str = "hook_resid_pre"  # or another of STREAM_HOOKS

    @property
    def name(self) -> str:
        return f"blocks.{self.block}.{self.hook}"


# The block's tensors of width d_model that are, or are added to, the residual stream.
STREAM_HOOKS = ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out", "hook_mlp_out")


def check_block(cfg, block: int) -> None:
    if not 0 <= block < cfg.n_layers:
        raise GlassboxError(f"block must be from 0 to {cfg.n_layers - 1}, not {block}")


def check(cfg, steering: Steering) -> None:
    check_block(cfg, steering.block)
    if steering.hook not in STREAM_HOOKS:
        raise GlassboxError(f"Steering adds to one of {', '.join(STREAM_HOOKS)}, not {steering.hook!r}")
    if tuple(steering.vector.shape) != (cfg.d_model,):
        raise GlassboxError(f"the steering vector must have d_model = {cfg.d_model} numbers, not {tuple(steering.vector.shape)}")
    if not torch.isfinite(steering.vector).all() or not math.isfinite(steering.strength):
        raise GlassboxError("the steering vector and its strength must be finite numbers")
    if steering.start < 0:
        raise GlassboxError(f"the first steered position must be 0 or more, not {steering.start}")


def contrastive_vector(model, positive: list[int], negative: list[int], block: int) -> torch.Tensor:
    """The residual stream entering ``block`` at the last position of ``positive`` minus that of
    ``negative`` (each run alone, no gradient)."""
    check_block(model.cfg, block)
    name = f"blocks.{block}.hook_resid_pre"
    last = [run_trace(model, tokens, names=[name])[name][-1] for tokens in (positive, negative)]
    return last[0] - last[1]


def steering_edit(steering: Steering) -> Edit:
    """An edit of ``steering.name`` that adds the vector at positions ≥ ``start``, counting the
    positions of the passes it has seen (the prompt's, then one a generated token)."""
    seen = 0

    def add(resid: torch.Tensor) -> torch.Tensor:  # batch × position × d_model
        nonlocal seen
        positions = torch.arange(seen, seen + resid.shape[1], device=resid.device)
        seen += resid.shape[1]
        on = (positions >= steering.start).to(resid.dtype)[None, :, None]
        return resid + on * steering.strength * steering.vector.to(resid.device, resid.dtype)

    return add


def steered(loaded, prompt: str, max_new_tokens: int, sampling: Sampling, steering: Steering) -> list[GeneratedToken]:
    """The completion drawn with ``steering`` applied (as ``generate`` draws it: same sampler,
    same seed, each token's distributions)."""
    check(loaded.cfg, steering)
    if loaded.cfg.encoder_decoder:
        raise GlassboxError("Steering adds to a decoder-only model's residual stream; this model is an encoder-decoder")
    with editing({steering.name: steering_edit(steering)}):
        return list(generate(loaded, prompt, max_new_tokens, sampling))
