"""Direct logit attribution: the final residual stream at one position is a sum of what was
written into it (the embeddings, each head's output, each attention's output bias, each MLP's
output); the final norm, with its scale for that position held fixed, is linear in that sum,
and so is the unembedding. Each part put through both is its direct share of a logit; with the
norm's bias (a LayerNorm's β) they add up to the logit exactly.

Models with post norms (Gemma 2 and 3) norm each attention output as a whole, so there the
heads are not split: the part is ``blocks.{i}.hook_attn_out`` (and likewise the MLP output is
one part there). A mixture-of-experts block's output is split per expert: each chosen expert's
output times its weight (``…mlp.experts.hook_out[e]``; the experts not chosen at the position
wrote nothing and are left out) and the shared expert's output times its gate
(``…mlp.shared.hook_out``). With final soft-capping the
logit attributed is the one before the cap (``hook_logits_uncapped``): the cap is not linear.

A post-norm model (BERT) norms the stream after every sublayer, and its MLM head puts a GELU
before the unembedding: its last stream is not a sum of what each part wrote, and the head is not
linear in it, so there is no direct attribution (``linear_head`` says why, in one sentence).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch

from glassbox.model.engine import GlassboxError, Transformer, check_prompt, check_token_id
from glassbox.model.engine.capture import capture


@dataclass
class LogitAttribution:
    """``values[i]`` is part ``names[i]``'s direct share of ``logit`` (of ``token_id``, or of
    ``token_id`` minus ``wrong_id`` when that is given) at ``position``; they sum to ``logit``."""

    names: list[str]
    values: np.ndarray
    logit: float
    token_id: int
    wrong_id: int | None
    position: int


NO_DLA = (
    "This model norms the stream after every sublayer (post-norm) and its MLM head is not linear: the last "
    "stream is not a sum of what each part wrote, so no part has a direct share of a logit. Ablation and "
    "patching below measure each part's effect instead."
)


def linear_head(cfg) -> str | None:
    """None where a logit is a sum of the parts' direct shares; else why not (NO_DLA)."""
    return NO_DLA if cfg.norm_position == "post" or cfg.mlm_head else None


_PART_WORDS = [  # engine name → words, as every page names blocks (from 1) and heads (from 1)
    (r"hook_embed", lambda m: "token embedding"),
    (r"hook_pos_embed", lambda m: "position embedding"),
    (r"hook_token_type_embed", lambda m: "token-type embedding"),
    (r"ln_final\.b", lambda m: "final norm's bias"),
    (r"blocks\.(\d+)\.attn\.hook_result\[(\d+)\]", lambda m: f"block {int(m[1]) + 1}, head {int(m[2]) + 1}"),
    (r"blocks\.(\d+)\.hook_attn_out", lambda m: f"block {int(m[1]) + 1}, attention"),
    (r"blocks\.(\d+)\.attn\.b_O", lambda m: f"block {int(m[1]) + 1}, attention's output bias"),
    (r"blocks\.(\d+)\.hook_mlp_out", lambda m: f"block {int(m[1]) + 1}, MLP"),
    (r"blocks\.(\d+)\.mlp\.experts\.hook_out\[(\d+)\]", lambda m: f"block {int(m[1]) + 1}, expert {int(m[2]) + 1}"),
    (r"blocks\.(\d+)\.mlp\.shared\.hook_out", lambda m: f"block {int(m[1]) + 1}, shared expert"),
]


def part_words(name: str) -> str:
    """A part of ``parts_written`` in words: "blocks.3.attn.hook_result[1]" → "block 4, head 2"."""
    for pattern, words in _PART_WORDS:
        match = re.fullmatch(pattern, name)
        if match:
            return words(match)
    return name


def parts_written(model: Transformer) -> list[str]:
    """The names of what is added into the residual stream, in order (heads as ``…hook_result[h]``,
    experts as ``…mlp.experts.hook_out[e]``)."""
    cfg = model.cfg
    names = ["hook_embed"] + (["hook_pos_embed"] if cfg.positional == "table" else [])
    for i in range(cfg.n_layers):
        p = f"blocks.{i}."
        if cfg.post_norms:
            names.append(p + "hook_attn_out")
        else:
            names += [f"{p}attn.hook_result[{h}]" for h in range(cfg.n_heads)]
            names += [p + "attn.b_O"] if cfg.attn_out_bias else []
        if cfg.is_moe(i) and not cfg.post_norms:  # the experts' weighted outputs, summed into the MLP output
            assert cfg.n_experts is not None, "is_moe: the model has experts"
            names += [f"{p}mlp.experts.hook_out[{e}]" for e in range(cfg.n_experts)]
            names += [p + "mlp.shared.hook_out"] if cfg.d_ff_shared is not None else []
        else:
            names += [] if cfg.attn_only else [p + "hook_mlp_out"]
    return names + (["ln_final.b"] if cfg.final_norm and cfg.norm == "layernorm" else [])


@torch.no_grad()
def direct_logit_attribution(
    model: Transformer, tokens: list[int], token_id: int, position: int = -1, wrong_id: int | None = None
) -> LogitAttribution:
    cfg, T = model.cfg, len(tokens)
    if linear_head(cfg):
        raise GlassboxError(linear_head(cfg))
    check_prompt(cfg, tokens)
    position = position + T if position < 0 else position
    if not 0 <= position < T:
        raise GlassboxError(f"Position {position} is outside the prompt's {T} positions")
    for t in (token_id, wrong_id):
        if t is not None:
            check_token_id(cfg, t)
    logits_name = "hook_logits_uncapped" if cfg.final_softcap is not None else "hook_logits"
    wanted = [
        "hook_embed",
        "hook_pos_embed",
        "blocks.*.attn.hook_result",
        "blocks.*.hook_attn_out",
        "blocks.*.hook_mlp_out",
        "ln_final.hook_scale",
        logits_name,
    ]
    if cfg.n_experts is not None and not cfg.post_norms:
        wanted += [
            "blocks.*.mlp.experts.hook_out",
            "blocks.*.mlp.hook_expert_weights",
            "blocks.*.mlp.shared.hook_out",
            "blocks.*.mlp.hook_shared_gate",
        ]
    with capture(wanted) as recorder:
        model(torch.tensor([tokens], device=model.device))
    per_unit = ("hook_result", "experts.hook_out")  # (head or expert, position, d_model)
    got = {name: t[0, ..., position, :] if name.endswith(per_unit) else t[0, position] for name, t in recorder.tensors.items()}
    W_U = model.W_U.detach()
    direction = W_U[:, token_id].double() - (W_U[:, wrong_id].double() if wrong_id is not None else 0)

    def through_head(vector: torch.Tensor) -> float:
        """A part's direct share: the final norm with its scale fixed (linear), then the unembedding."""
        x = vector.to(torch.float64)
        if cfg.final_norm:
            if cfg.norm == "layernorm":
                x = x - x.mean()
            x = x / got["ln_final.hook_scale"].to(torch.float64) * model.ln_final.w.to(torch.float64)
        return float(x @ direction)

    def share(name: str) -> float | None:
        """A part's direct share; None for an expert not chosen at this position (it wrote nothing)."""
        if name.endswith("]"):  # one head, blocks.i.attn.hook_result[h], or one expert, blocks.i.mlp.experts.hook_out[e]
            source, unit = name[:-1].split("[")
            vector = got[source][int(unit)].to(torch.float64)
            if source.endswith("experts.hook_out"):
                weight = got[source.replace("experts.hook_out", "hook_expert_weights")][int(unit)]
                if weight == 0:
                    return None
                vector = vector * weight.to(torch.float64)
            return through_head(vector)
        if name.endswith("attn.b_O"):
            return through_head(model.get_parameter(name).detach())
        if name == "ln_final.b":
            return float(model.get_parameter(name).detach().to(torch.float64) @ direction)
        if name.endswith("mlp.shared.hook_out"):  # times its gate, where the model gates it
            gate = got.get(name.replace("shared.hook_out", "hook_shared_gate"))
            return through_head(got[name].to(torch.float64) * (1 if gate is None else gate.to(torch.float64)))
        return through_head(got[name])

    shares = {name: share(name) for name in parts_written(model)}
    names = [name for name, value in shares.items() if value is not None]
    values = [shares[name] for name in names]
    logits = got[logits_name].to(torch.float64)
    logit = float(logits[token_id] - (logits[wrong_id] if wrong_id is not None else 0))
    return LogitAttribution(names, np.array(values), logit, token_id, wrong_id, position)
