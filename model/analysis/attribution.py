"""Attribution per input token: how much each token's embedding matters to one logit,
f = logit(target) at the last position, as a function of the token embeddings (hook_embed;
positions, where a table adds them, stay as they are).

- saliency: ‖∂f/∂e_i‖, how sensitive f is to token i's embedding;
- input × gradient: e_i · ∂f/∂e_i, its first-order share;
- integrated gradients (Sundararajan et al., 2017): (e_i − b_i) · the mean of ∂f/∂e_i along
  the straight path from a baseline b (zeros, or one token's embedding at every position) to
  e, by the midpoint rule with ``steps`` points. Completeness: the scores add up to
  f(e) − f(b), up to the rule's error, which is reported (in a mixture of experts also the
  jumps where a token's top-k experts change along the path: the gradient does not see them);
- attention rollout (Abnar and Zuidema, 2020): each block's head-averaged pattern with the
  skip connection as ½(A + I), multiplied through the blocks; the last row. It reads the
  attention weights only (no gradients, nothing of the MLPs): a heuristic beside the others.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.analysis import batches
from glassbox.model.engine import GlassboxError, Transformer, check_prompt, check_token_id, editing
from glassbox.model.engine.capture import capture

METHODS = ("saliency", "input_x_gradient", "integrated_gradients", "attention_rollout")
MAX_STEPS = 10_000  # integrated gradients' path points: 300 would do; 10^12 would allocate 8 TB of alphas


@dataclass
class Attribution:
    method: str
    scores: np.ndarray  # one per token
    target_logit: float
    baseline_logit: float | None = None  # integrated gradients only
    completeness_error: float | None = None  # |Σ scores − (f(e) − f(b))|
    steps: int | None = None


def _embeddings(model: Transformer, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(), capture(["hook_embed"]) as recorder:
        model(ids)
    return recorder.tensors["hook_embed"][0]


def _logit_and_gradient(
    model: Transformer, ids: torch.Tensor, embeddings: torch.Tensor, target: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """f and ∂f/∂embeddings for a batch of embeddings (points, T, d): one forward, one backward,
    the embeddings put in place of hook_embed by an edit (the shared model's parameters get no
    gradient)."""
    points = embeddings.detach().requires_grad_(True)
    with torch.enable_grad(), editing({"hook_embed": lambda _: points}):
        f = model(ids.expand(len(points), -1), last_only=True).logits[:, -1, target]
        (gradient,) = torch.autograd.grad(f.sum(), points)
    return f.detach(), gradient


def _logit(model: Transformer, ids: torch.Tensor, embeddings: torch.Tensor, target: int) -> float:
    """f for one set of embeddings: a plain forward pass with them in place of hook_embed."""
    with torch.no_grad(), editing({"hook_embed": lambda _: embeddings[None]}):
        return float(model(ids, last_only=True).logits[0, -1, target])


def attribute(
    model: Transformer,
    tokens: list[int],
    target: int,
    method: str = "saliency",
    steps: int = 32,
    baseline_token: int | None = None,
) -> Attribution:
    check_prompt(model.cfg, tokens)
    check_token_id(model.cfg, target)
    if method not in METHODS:
        raise GlassboxError(f"Unknown method {method!r}: one of {', '.join(METHODS)}")
    if method == "integrated_gradients" and not 1 <= steps <= MAX_STEPS:  # checked before anything is allocated
        raise GlassboxError(f"Integrated gradients needs at least 1 step and at most {MAX_STEPS:,}, not {steps:,}")
    ids = torch.tensor([tokens], device=model.device)
    x = _embeddings(model, ids)
    if method == "attention_rollout":
        return Attribution(method, attention_rollout(model, tokens), _logit(model, ids, x, target))
    if method in ("saliency", "input_x_gradient"):
        f, gradient = _logit_and_gradient(model, ids, x[None], target)
        scores = gradient[0].norm(dim=-1) if method == "saliency" else (x * gradient[0]).sum(-1)
        return Attribution(method, scores.double().cpu().numpy(), float(f[0]))
    if baseline_token is not None:
        check_token_id(model.cfg, baseline_token, "Baseline token id")
    baseline = torch.zeros_like(x) if baseline_token is None else _embeddings(model, torch.full_like(ids, baseline_token))
    alphas = (torch.arange(steps, dtype=torch.float64) + 0.5) / steps  # the midpoint rule
    # the path in at least float32 (in bfloat16 neighbouring points of a long path would coincide)
    path_dtype = torch.promote_types(x.dtype, torch.float32)
    start, span = baseline.to(path_dtype), (x - baseline).to(path_dtype)
    per_pass = batches.per_pass(len(tokens))
    total = torch.zeros_like(span, dtype=torch.float64)
    for first in range(0, steps, per_pass):
        a = alphas[first : first + per_pass].to(path_dtype).to(x.device)[:, None, None]
        _, gradient = _logit_and_gradient(model, ids, (start + a * span).to(x.dtype), target)
        total += gradient.double().sum(0)
    scores = (span.double() * total / steps).sum(-1)
    f_x, f_b = _logit(model, ids, x, target), _logit(model, ids, baseline, target)
    error = abs(float(scores.sum()) - (f_x - f_b))
    return Attribution(method, scores.cpu().numpy(), f_x, f_b, error, steps)


@torch.no_grad()
def attention_rollout(model: Transformer, tokens: list[int]) -> np.ndarray:
    """The last position's row of the rolled-out attention: how much of it, through every
    block's attention and skip connection, comes from each token (sums to 1)."""
    with capture(["blocks.*.attn.hook_pattern"]) as recorder:
        model(torch.tensor([tokens], device=model.device))
    T = len(tokens)
    rollout = torch.eye(T, dtype=torch.float64)
    for i in range(model.cfg.n_layers):
        a = recorder.tensors[f"blocks.{i}.attn.hook_pattern"][0].double().mean(0)  # the heads' mean
        a = 0.5 * a + 0.5 * torch.eye(T, dtype=torch.float64)
        rollout = (a / a.sum(-1, keepdim=True)) @ rollout
    return rollout[-1].cpu().numpy()
