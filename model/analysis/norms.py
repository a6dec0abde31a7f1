"""LayerNorm and RMSNorm: which norms a model has, and what each did at each position."""

from __future__ import annotations

import numpy as np
import torch

from glassbox.model.analysis.residual import stream_end
from glassbox.model.engine import ModelConfig, Trace


def norm_prefixes(cfg: ModelConfig) -> list[tuple[str, str]]:
    """(prefix of a norm's tensors, name of its input tensor), in forward order (an
    attention-only block has no MLP and so no ln2; a zero-layer model at most the final norm).
    The embedding norm of a model that has one (BERT's ln_embed) is not listed: its input, the
    sum of the token, position and token-type rows, is not traced as one tensor."""
    out = []
    for i in range(cfg.n_layers if cfg.norm != "none" else 0):  # a model without norms has none in its blocks
        p = f"blocks.{i}."
        if cfg.norm_position == "post":  # BERT: each norm reads the stream plus its sublayer's output
            out += [(p + "ln1.", p + "hook_attn_sum"), (p + "ln2.", p + "hook_mlp_sum")]
            continue
        out.append((p + "ln1.", p + "hook_resid_pre"))
        if cfg.post_norms:
            out.append((p + "ln1_post.", p + "attn.hook_out"))
        if cfg.attn_only:
            continue
        out.append((p + "ln2.", p + ("hook_resid_pre" if cfg.parallel_block else "hook_resid_mid")))
        if cfg.post_norms:
            out.append((p + "ln2_post.", p + "mlp.hook_out"))
    if cfg.final_norm:
        out.append(("ln_final.", stream_end(cfg)))
    if cfg.mlm_head:  # the MLM head's transform ends in a norm of its own
        out.append(("mlm.ln.", "mlm.hook_act"))
    return out


def norm_summary(trace: Trace, cfg: ModelConfig, prefix: str, input_name: str) -> dict[str, np.ndarray]:
    """Per position: the input's mean and standard deviation recomputed from the input, the
    engine's recorded mean and scale, and the normalised vector's mean and std (0 and ~1)."""
    x = trace[input_name].to(torch.float64)
    normalized = trace[prefix + "hook_normalized"].to(torch.float64)
    if cfg.norm == "layernorm":
        out = {
            "input mean": x.mean(-1),
            "mean (recorded)": trace[prefix + "hook_mean"].to(torch.float64),
            "input std": x.std(-1, correction=0),
        }
    else:  # RMSNorm divides by the root mean square, not the standard deviation
        out = {"input rms": x.pow(2).mean(-1).sqrt()}
    out |= {
        "scale (recorded)": trace[prefix + "hook_scale"].to(torch.float64),
        "normalized mean": normalized.mean(-1),
        "normalized std": normalized.std(-1, correction=0),
    }
    return {k: v.cpu().numpy() for k, v in out.items()}
