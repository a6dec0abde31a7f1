"""The residual stream: what each part adds to it, and the logit lens (what the model would
predict if it stopped after each block)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.engine import GlassboxError, ModelConfig, Trace, Transformer, block_label


def stream_start(cfg: ModelConfig) -> str:
    """The traced tensor that starts the residual stream: block 0's input, or with no blocks the
    token embeddings (a zero-layer model adding a positional table has no one tensor for it)."""
    if cfg.n_layers:
        return "blocks.0.hook_resid_pre"
    if cfg.positional == "table":
        raise GlassboxError(
            "A zero-layer model with learned positions: its residual stream (token plus position "
            "rows) is not traced as one tensor"
        )
    return "hook_embed"


def stream_end(cfg: ModelConfig) -> str:
    """The traced tensor the final norm (or the head) reads: the last block's output."""
    return f"blocks.{cfg.n_layers - 1}.hook_resid_post" if cfg.n_layers else stream_start(cfg)


def contribution_names(cfg: ModelConfig) -> list[tuple[str, str]]:
    """(label, tensor) of what each part adds to the residual stream, in order: the embeddings
    (with positions), then every attention output and MLP output (an attention-only block has none)."""
    out = [("embeddings", stream_start(cfg))]
    for i in range(cfg.n_layers):
        out.append((f"{block_label(i)} attention", f"blocks.{i}.hook_attn_out"))
        out += [] if cfg.attn_only else [(f"{block_label(i)} MLP", f"blocks.{i}.hook_mlp_out")]
    return out


def contribution_norms(trace: Trace, cfg: ModelConfig) -> tuple[list[str], np.ndarray]:
    """L2 norm per position of what each part adds to the residual stream (``contribution_names``)."""
    parts = contribution_names(cfg)
    return [label for label, _ in parts], torch.stack(
        [trace[name].to(torch.float64).norm(dim=-1) for _, name in parts]
    ).cpu().numpy()


def residual_points(cfg: ModelConfig) -> list[tuple[str, str]]:
    """(label, tensor) of the residual stream before block 0 and after every block."""
    return [("embeddings", stream_start(cfg))] + [
        (f"after {block_label(i)}", f"blocks.{i}.hook_resid_post") for i in range(cfg.n_layers)
    ]


@dataclass(frozen=True)
class Lens:
    labels: list[str]
    positions: list[int]
    top_ids: np.ndarray  # (points, len(positions), k)
    top_probs: np.ndarray  # (points, len(positions), k)
    chosen: np.ndarray  # (points, len(positions)): the probability of the chosen token


@torch.no_grad()
def logit_lens(
    model: Transformer, trace: Trace, token_id: int | list[int], k: int = 5, positions: list[int] | None = None
) -> Lens:
    """The final norm and the output head applied to the residual stream after every block:
    what the model would predict if it stopped there. The last point is the model's own
    prediction. Only at ``positions`` (default all): the head is the costly part, a
    (d_model × vocab) product per position and point. ``chosen``: the probability of
    ``token_id``, or with a list, of its own token at each position."""
    points = residual_points(model.cfg)
    positions = list(range(len(trace.tokens))) if positions is None else list(positions)
    chosen_ids = torch.as_tensor(token_id).expand(len(positions))  # one id for all, or one per position
    top_ids: list[np.ndarray] = []
    top_probs: list[np.ndarray] = []
    chosen: list[np.ndarray] = []
    for _, name in points:
        probs = model.head(trace[name][positions][None])[0].float().softmax(-1)  # float32 even for a half model
        top = probs.topk(min(k, probs.shape[-1]), dim=-1)
        values, ids = top.values.cpu().numpy(), top.indices.cpu().numpy()
        order = np.lexsort((ids, -values), axis=-1)  # equal probabilities in token-id order, as everywhere
        top_ids.append(np.take_along_axis(ids, order, -1))
        top_probs.append(np.take_along_axis(values, order, -1))
        chosen.append(probs[torch.arange(len(positions)), chosen_ids.to(probs.device)].cpu().numpy())
    return Lens([label for label, _ in points], positions, np.stack(top_ids), np.stack(top_probs), np.stack(chosen))
