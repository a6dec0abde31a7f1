"""The worked example of "Large Language Models from scratch — Part 2" as a Glassbox model.

``published.json`` (a copy of the article's data) gives the configuration and every weight
the article prints. Those are used exactly. The weights it does not print (block 1's FFN,
block 2's attention except W_V(2,1), block 2's W_O and FFN) are reconstructed by
reconstruct.py: fitted so that the figures the article prints for them come out.

Article names -> engine names: W_E -> embed.W_E, W_P -> pos_embed.W_pos,
W_Q(b,h) -> blocks.{b-1}.attn.W_Q[h-1] (same for K, V), W_O(b) -> blocks.{b-1}.attn.W_O
(its rows split per head), W_1(b), b_1(b), W_2(b), b_2(b) -> blocks.{b-1}.mlp.W_in, b_in,
W_out, b_out.
"""

from __future__ import annotations

import json
import re

import torch

from functools import cache

from model.engine import ModelConfig
from model.io.assets import asset

DIR = asset("worked-example")
PUBLISHED = DIR / "published.json"  # a copy of the article's data; the README describes it
PROMPT = "the cat sat on the"


@cache
def published() -> dict:
    """The article's configuration, printed weights and printed figures, parsed once per
    process (treat it as read-only)."""
    return json.loads(PUBLISHED.read_text())


def config(article: dict) -> ModelConfig:
    c = article["config"]
    return ModelConfig(
        vocab_size=len(c["vocab"]),
        n_ctx=len(article["given_weights"]["W_P"]),
        d_model=c["d_model"],
        n_layers=c["n_blocks"],
        n_heads=c["n_heads"],
        d_head=c["d_head"],
        d_ff=c["d_ff"],
        norm="layernorm",
        norm_eps=1e-5,
        activation=c["activation"],
        positional="table",
        attn_bias=False,
        mlp_bias=True,
        final_norm=True,
        tie_embeddings=c["weight_tying"],
    )


def engine_slot(article_name: str, cfg: ModelConfig) -> tuple[str, int | None]:
    """Where an article weight lives: (parameter name, head index or None)."""
    if article_name == "W_E":
        return "embed.W_E", None
    if article_name == "W_P":
        return "pos_embed.W_pos", None
    m = re.fullmatch(r"W_([QKV])\((\d),(\d)\)", article_name)
    if m:
        return f"blocks.{int(m[2]) - 1}.attn.W_{m[1]}", int(m[3]) - 1
    m = re.fullmatch(r"(W_O|W_1|b_1|W_2|b_2)\((\d)\)", article_name)
    if m:
        local = {"W_O": "attn.W_O", "W_1": "mlp.W_in", "b_1": "mlp.b_in", "W_2": "mlp.W_out", "b_2": "mlp.b_out"}
        return f"blocks.{int(m[2]) - 1}.{local[m[1]]}", None
    raise KeyError(article_name)


# Article figure -> (engine tensor, head): the tensors the article prints for weights it does not.
FIGURES = {
    "h(1)": ("blocks.0.mlp.hook_pre", None),
    "ffn_out(1)": ("blocks.0.hook_mlp_out", None),
    "X(1)": ("blocks.0.hook_resid_post", None),
    "X(2)": ("blocks.1.hook_resid_post", None),
    "h(2)": ("blocks.1.mlp.hook_pre", None),
    "X_final": ("ln_final.hook_out", None),
    "dL/dX(2)": ("grad:blocks.1.hook_resid_post", None),
    "dL/dh_act(2)": ("grad:blocks.1.mlp.hook_post", None),
    "dL/dh(2)": ("grad:blocks.1.mlp.hook_pre", None),
    "dL/dW_Q(2,1)": ("grad:blocks.1.attn.W_Q", 0),
    "dL/dW_K(2,1)": ("grad:blocks.1.attn.W_K", 0),
    "dL/dW_V(2,1)": ("grad:blocks.1.attn.W_V", 0),
    "dL/dX(1)": ("grad:blocks.0.hook_resid_post", None),
    "dL/dX(0)": ("grad:blocks.0.hook_resid_pre", None),
}


def printed_figure(value) -> tuple[int | None, torch.Tensor]:
    """(row or None, values) of a published figure: {"row": r, "value": [...]} or a full grid."""
    if isinstance(value, dict):
        return value["row"], torch.tensor(value["value"], dtype=torch.float64)
    return None, torch.tensor(value, dtype=torch.float64)


def article_weights(cfg: ModelConfig, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Engine parameters (or their gradients) under the article's names: W_Q(b,h) is
    d_model x d_head, W_O(b) the (heads * d_head) x d_model matrix applied to the
    concatenated heads."""
    weights = {"W_E": params["embed.W_E"], "W_P": params["pos_embed.W_pos"]}
    for b in range(1, cfg.n_layers + 1):
        for h in range(1, cfg.n_heads + 1):
            for kind in "QKV":
                name, head = engine_slot(f"W_{kind}({b},{h})", cfg)
                weights[f"W_{kind}({b},{h})"] = params[name][head]
        for kind in ("W_O", "W_1", "b_1", "W_2", "b_2"):
            name, _ = engine_slot(f"{kind}({b})", cfg)
            weights[f"{kind}({b})"] = params[name]
    return {k: (v.reshape(-1, cfg.d_model) if k.startswith("W_O") else v) for k, v in weights.items()}
