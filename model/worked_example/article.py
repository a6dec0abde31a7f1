"""The worked example of "Large Language Models from scratch — Part 2" as a Glassbox model.

``published.json`` (a copy of the article's data) gives the configuration and every weight
the article prints. Those are used exactly. The weights it does not print (block 1's FFN,
block 2's attention except W_V(2,1), block 2's W_O and FFN) are reconstructed by
reconstruct.py: fitted so that the figures the article prints for them come out.

Article names -> engine names: the table in names.py.
"""

from __future__ import annotations

from functools import cache

import torch

from glassbox.model.engine import ModelConfig
from glassbox.model.io.assets import asset
from glassbox.model.io.guard import SIDE_FILE_BYTES, read_json
from glassbox.model.worked_example.names import article_tensor, slot, weight_names

DIR = asset("worked-example")
PUBLISHED = DIR / "published.json"  # a copy of the article's data; the README describes it
PROMPT = "the cat sat on the"
ARTICLE_URL = "https://www.dimensionalityreduction.com/p/large-language-models-from-scratch-dfe"  # Part 2
SERIES_URL = "https://www.dimensionalityreduction.com/s/llms-from-scratch-series"


@cache
def published() -> dict:
    """The article's configuration, printed weights and printed figures, parsed once per
    process (treat it as read-only)."""
    return read_json(PUBLISHED, SIDE_FILE_BYTES)


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


def engine_slot(article_name: str, cfg: ModelConfig | None = None) -> tuple[str, int | None]:
    """Where an article weight or tensor lives: (engine name, head index or None). ``cfg`` is
    not needed (kept for callers)."""
    where = slot(article_name)
    return where.engine, where.head


# Article figure -> (engine tensor, head): the tensors the article prints for weights it does not.
FIGURES = {
    figure: engine_slot(figure)
    for figure in (
        "h(1)",
        "ffn_out(1)",
        "X(1)",
        "X(2)",
        "h(2)",
        "X_final",
        "dL/dX(2)",
        "dL/dh_act(2)",
        "dL/dh(2)",
        "dL/dW_Q(2,1)",
        "dL/dW_K(2,1)",
        "dL/dW_V(2,1)",
        "dL/dX(1)",
        "dL/dX(0)",
    )
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
    return {name: article_tensor(name, params, last=-1) for name in weight_names(cfg.n_layers, cfg.n_heads)}
