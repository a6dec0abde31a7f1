"""Exactness, checked on the spot: a model Glassbox converted from a transformers checkpoint
beside transformers' own class loaded from the same folder, on one prompt.

Compared: the logits, the residual stream entering each block (transformers' hidden states),
and on request the loss's gradient with respect to each of those residual streams (torch
autograd in both). Each number is the largest absolute difference, with the size of what was
compared beside it. transformers is optional: without it the check says how to get it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from glassbox.model.engine import GRAD, GlassboxError, run_trace
from glassbox.model.io.guard import read_json

CONFIG_BYTES = 1 << 20


@dataclass
class Verification:
    reference: str  # transformers' class and version
    dtype: str
    n_tokens: int
    logits: float  # largest |Glassbox − transformers|
    logits_scale: float  # largest |logit|, for scale
    residual: float  # largest over the blocks and positions
    residual_scale: float
    loss: float | None = None  # |difference| of the mean next-token cross-entropy
    gradient: float | None = None  # largest over dL/d(residual entering each block)
    gradient_scale: float | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def reference_model(path, dtype: torch.dtype, device: torch.device):
    """transformers' causal-LM class for the folder's config.json, its weights read from there."""
    config = read_json(path / "config.json", CONFIG_BYTES)
    if "glassbox" in config:
        raise GlassboxError("This is a Glassbox checkpoint: transformers has no class for it (verify compares a "
                            "model converted from a transformers folder or a hub id)")
    try:
        import transformers
    except ImportError:
        raise GlassboxError("transformers is not installed: `pip install 'transformers>=4.56'` (or "
                            "`pip install -e '.[dev]'` in a checkout) to compare with its classes") from None
    try:
        hf = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, attn_implementation="eager")
    except ValueError as exc:  # an encoder, an encoder-decoder: no causal-LM class
        raise GlassboxError(f"transformers has no causal-LM class for this model ({' '.join(str(exc).split())[:200]})") from None
    return hf.to(device).eval(), f"transformers {type(hf).__name__} {transformers.__version__}"


def verify(loaded, tokens: list[int], gradients: bool = False) -> Verification:
    """``loaded`` (a checkpoint.LoadedModel) beside transformers' class on ``tokens``."""
    if loaded.cfg.encoder_decoder:
        raise GlassboxError("verify compares decoder-only models; this one is an encoder-decoder")
    model = loaded.model
    dtype = next(model.parameters()).dtype
    hf, reference = reference_model(loaded.path, dtype, model.device)
    ids = torch.tensor([tokens], device=model.device)
    with torch.set_grad_enabled(gradients):
        out = hf(ids, output_hidden_states=True)
        if gradients:
            for h in out.hidden_states:
                h.retain_grad()
            loss = torch.nn.functional.cross_entropy(out.logits[0, :-1], ids[0, 1:])  # run_trace's default loss
            loss.backward()
    trace = run_trace(model, tokens, names=["hook_logits", "blocks.*.hook_resid_pre"], backward=gradients)
    n = loaded.cfg.n_layers
    resid = [trace[f"blocks.{i}.hook_resid_pre"] for i in range(n)]
    theirs = [out.hidden_states[i][0].detach() for i in range(n)]
    result = Verification(
        reference, str(dtype).removeprefix("torch."), len(tokens),
        logits=float((trace["hook_logits"] - out.logits[0].detach()).abs().max()),
        logits_scale=float(out.logits.detach().abs().max()),
        residual=max(float((a - b).abs().max()) for a, b in zip(resid, theirs)),
        residual_scale=max(float(b.abs().max()) for b in theirs))
    if gradients:
        grads = [trace[GRAD + f"blocks.{i}.hook_resid_pre"] for i in range(n)]
        their_grads = [out.hidden_states[i].grad[0] for i in range(n)]
        result.loss = abs(trace.loss - loss.item())
        result.gradient = max(float((a - b).abs().max()) for a, b in zip(grads, their_grads))
        result.gradient_scale = max(float(b.abs().max()) for b in their_grads)
    return result
