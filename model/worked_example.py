"""The worked example of "Large Language Models from scratch — Part 2" as a Glassbox model.

``published.json`` (a copy of the article's data) gives the configuration and every weight
the article prints. Those are used exactly. The weights it does not print (block 1's FFN,
block 2's attention except W_V(2,1), block 2's W_O and FFN) are, for now, seeded random
placeholders, marked as such in the model's ``about``; a reconstruction solver fitted to
the article's printed figures replaces them (issue 3).

Article names -> engine names: W_E -> embed.W_E, W_P -> pos_embed.W_pos,
W_Q(b,h) -> blocks.{b-1}.attn.W_Q[h-1] (same for K, V), W_O(b) -> blocks.{b-1}.attn.W_O
(its rows split per head), W_1(b), b_1(b), W_2(b), b_2(b) -> blocks.{b-1}.mlp.W_in, b_in,
W_out, b_out.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from .checkpoint import NAMED_MODELS, save
from .tokenizer import Tokenizer
from .transformer import ModelConfig, Transformer

DIR = NAMED_MODELS["worked-example"]
PUBLISHED = DIR / "published.json"
PROMPT = "the cat sat on the"
PLACEHOLDER_SEED = 0


def published() -> dict:
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


@torch.no_grad()
def build(path: Path = DIR) -> Transformer:
    article = published()
    cfg = config(article)
    model = Transformer(cfg).to(torch.float64)
    gen = torch.Generator().manual_seed(PLACEHOLDER_SEED)
    params = dict(model.named_parameters())
    for name, param in params.items():
        if not name.endswith((".w", ".b")):  # LayerNorm gains stay 1, offsets 0
            param.copy_((torch.rand(param.shape, generator=gen, dtype=torch.float64) - 0.3).round(decimals=1))
    printed = []
    for article_name, value in article["given_weights"].items():
        name, head = engine_slot(article_name, cfg)
        value = torch.tensor(value, dtype=torch.float64)
        target = params[name] if head is None else params[name][head]
        target.copy_(value.reshape(target.shape))
        printed.append(article_name)
    about = {
        "source": 'the worked example of "Large Language Models from scratch — Part 2"',
        "sample_prompt": PROMPT,
        "printed_weights": printed,
        "unprinted_weights": (
            f"placeholders: seeded random values (seed {PLACEHOLDER_SEED}) until the reconstruction "
            "solver fits them to the article's printed figures"
        ),
    }
    save(path, model, Tokenizer.word_level(article["config"]["vocab"]), "float64", about)
    return model
