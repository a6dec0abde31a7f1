"""The model's parts in forward order, each with its parameters and their count."""

from __future__ import annotations

import math
from dataclasses import dataclass

from glassbox.model.engine import Transformer, block_label


@dataclass(frozen=True)
class Part:
    """One part of the pipeline: its parameters (name, shape) and how many numbers they hold."""

    key: str  # "embed", "pos", ("types", "ln_embed"), "blocks.0.attn", "blocks.0.norms", "blocks.0.mlp", "ln_final", ("mlm"), "head"
    label: str
    params: tuple[tuple[str, tuple[int, ...]], ...]
    note: str = ""

    @property
    def count(self) -> int:
        return sum(math.prod(shape) for _, shape in self.params)


def parts(model: Transformer) -> list[Part]:
    """The model's parts in forward order; their counts add up to the model's parameters."""
    cfg = model.cfg
    params = {name: tuple(p.shape) for name, p in model.named_parameters()}

    def under(prefix: str) -> tuple:
        return tuple((n, s) for n, s in params.items() if n.startswith(prefix))

    out = [Part("embed", "token embedding", under("embed."))]
    if cfg.positional == "table":
        out.append(Part("pos", "positions", under("pos_embed.")))
    elif cfg.positional == "rope":  # a model without positions (a bigram) has no part for them
        out.append(Part("pos", "positions (RoPE)", (), "rotations inside attention: no parameters"))
    if cfg.n_token_types:  # BERT: a row per token type (a single sentence: type 0), added with the positions
        out.append(Part("types", "token types", under("token_type_embed.")))
    if cfg.embed_norm:
        out.append(Part("ln_embed", f"embedding {cfg.norm}", under("ln_embed.")))
    one_norm = cfg.attn_only and not cfg.post_norms  # an attention-only block norms only attention's input
    for i in range(cfg.n_layers):
        p = f"blocks.{i}."
        out.append(Part(p + "attn", f"{block_label(i)} attention", under(p + "attn.")))
        if cfg.norm != "none":  # a model without norms has none to count
            out.append(
                Part(p + "norms", f"{block_label(i)} {cfg.norm}{'' if one_norm else 's'}", under(p + "ln1") + under(p + "ln2"))
            )
        if cfg.is_moe(i):  # counted in all: a token uses the router, top_k experts (and the shared one)
            shared = " and a shared expert" if cfg.d_ff_shared is not None else ""
            out.append(
                Part(
                    p + "mlp",
                    f"{block_label(i)} experts",
                    under(p + "mlp."),
                    f"{cfg.n_experts} experts{shared}, each token routed to {cfg.experts_top_k}",
                )
            )
        elif not cfg.attn_only:
            out.append(Part(p + "mlp", f"{block_label(i)} MLP", under(p + "mlp.")))
    if cfg.final_norm:
        out.append(Part("ln_final", f"final {cfg.norm}", under("ln_final.")))
    if cfg.mlm_head:  # BERT's transform before the decoder: LN(act(x W_dense + b_dense))
        out.append(Part("mlm", "MLM transform", under("mlm.")))
    if cfg.tie_embeddings:  # its own bias (BERT's decoder bias) is all it holds
        out.append(
            Part(
                "head",
                "unembedding",
                under("unembed."),
                "tied: the head is W_Eᵀ, counted once under the embedding" + ("; its bias b_U" if cfg.unembed_bias else ""),
            )
        )
    else:
        out.append(Part("head", "unembedding", under("unembed.")))
    return out
