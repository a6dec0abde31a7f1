"""Overview: the pipeline, what each part holds, and what this prompt's trace costs."""

import pandas as pd
import streamlit as st

from glassbox.app.components.charts import log_axis, show
from glassbox.app.components.labels import bar_label, plain, token_labels
from glassbox.app.explore.common import Explorer, bar_chart, probs_at
from glassbox.app.explore.exactness import exactness_panel
from glassbox.model.analysis import architecture, parts
from glassbox.model.analysis.experts import active_parameters
from glassbox.model.engine.sampling import top
from glassbox.model.serving import Needs, full_trace_bytes

NEEDS = Needs(("hook_probs",))


def lit(ctx: Explorer) -> set[str]:
    return set()


POSITIONS = {"table": "plus a positional row", "rope": "positions enter as RoPE rotations", "none": "with no position added"}


def pass_in_words(cfg) -> str:
    """The forward pass in one sentence, for this model's architecture."""
    if cfg.n_layers:
        mlp = "" if cfg.attn_only else f" and an MLP ({cfg.d_ff} {cfg.activation} neurons)"
        if cfg.n_experts is not None:  # the MLP is a mixture of experts (in some blocks, or all)
            some = "" if all(cfg.is_moe(i) for i in range(cfg.n_layers)) else " in some blocks"
            mlp = (
                f" and{some} a mixture of {cfg.n_experts} experts ({cfg.d_ff_expert} {cfg.activation} neurons each, "
                f"{cfg.experts_top_k} per token)"
            )
        adds = f"{cfg.n_layers} blocks each add" if cfg.n_layers > 1 else "1 block adds"
        where = (
            "each sum then normed by a "
            if cfg.norm_position == "post"  # x = norm(x + sublayer(x))
            else f"{'' if cfg.attn_only else 'each '}after a "
        )  # each sublayer after its own norm
        blocks = f"then {adds} attention ({cfg.n_heads} heads of {cfg.d_head}){mlp} to the residual stream, {where}{cfg.norm}; "
        stream = "the last stream"
    else:
        blocks, stream = "no block follows: ", "each token's embedding"
    head = f"a final {cfg.norm} and the unembedding turn" if cfg.final_norm else "the unembedding turns"
    if cfg.mlm_head:
        head = f"the MLM head (dense, {cfg.activation}, {cfg.norm}) and the unembedding turn"
    embedded = (
        POSITIONS[cfg.positional]
        + (" and a token-type row" if cfg.n_token_types else "")
        + (f", the sum normed by a {cfg.norm}" if cfg.embed_norm else "")
    )
    every = " at every position, each its guess of the token at that position" if cfg.kind == "encoder" else ""
    return (
        f"Tokens are looked up in the embedding, {embedded}; {blocks}{head} {stream} into "
        f"{cfg.vocab_size:,} logits{every}" + ("" if cfg.n_layers else ", a bigram table") + "."
    )


def shapes_text(part) -> str:
    """A part's parameters, named within it (the part says the block) and those of one shape
    together, so that the cell stays short: "W_Q, W_K, W_V [4, 128, 32]; W_O [4, 32, 128]"."""
    by_shape: dict[tuple, list[str]] = {}
    for name, shape in part.params:
        by_shape.setdefault(tuple(shape), []).append(name.removeprefix(part.key + "."))
    return "; ".join(f"{', '.join(names)} {list(shape)}" for shape, names in by_shape.items())


def render(ctx: Explorer) -> None:
    cfg, model = ctx.cfg, ctx.model
    all_parts = parts(model)
    total = sum(p.count for p in all_parts)
    active = active_parameters(cfg, total)
    used = f" ({active:,} used per token: only {cfg.experts_top_k} experts run)" if active != total else ""
    st.markdown(f"**{total:,} parameters{used}.** {pass_in_words(cfg)}")
    family = ctx.loaded.about.get("family")  # config.json's: the model folder's text, shown as text
    heading = "This model's blocks" if cfg.n_layers else "This model"  # a zero-layer model: no blocks to describe
    st.markdown(
        f"**{heading}{' (' + plain(family) + ')' if family else ''}:**\n" + "\n".join(f"- {note}" for note in architecture(cfg))
    )
    table = pd.DataFrame(
        [
            {"part": p.label, "count": p.count, "share": f"{p.count / total:.1%}", "parameters": shapes_text(p) or p.note}
            for p in all_parts
        ]
    )
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        height=min(38 + 35 * len(table), 460),
        column_config={
            "part": st.column_config.TextColumn(width="medium"),
            "count": st.column_config.NumberColumn(format="localized", width="small"),
            "share": st.column_config.TextColumn(width="small"),
            "parameters": st.column_config.TextColumn(),
        },
    )  # as wide as its text
    fig = bar_chart(
        [p.label for p in all_parts],
        [p.count for p in all_parts],
        "Parameters per part",
        "parameters",
        x_title="part",
        height=380,
    )
    fig.update_layout(
        yaxis=log_axis([p.count for p in all_parts], "parameters (log scale)"),
        xaxis=dict(dtick=1, tickangle=-35, automargin=True),
    )  # every part named
    show(fig, width="stretch")

    trace = ctx.trace(NEEDS)
    probs = probs_at(trace, -1)
    best = top(probs, ctx.vocab_pieces, 10)
    encoder = cfg.kind == "encoder"  # it predicts the token at each position (masked LM), not the one after
    show(
        bar_chart(
            token_labels([t["token"] for t in best], [t["token_id"] for t in best]),
            [t["p"] for t in best],
            f"What the model predicts {'at' if encoder else 'after'} “{ctx.pieces[-1]}” (hook_probs, last position"
            + ("; an encoder's guess of the token there, seeing every token" if encoder else "")
            + ")",
            "probability",
            x_title="token there" if encoder else "next token",
            text=[bar_label(t["p"]) for t in best],
        ),
        width="stretch",
    )
    full = full_trace_bytes(model, len(ctx.tokens))
    st.caption(
        f"A full trace of this prompt (every tensor and every gradient) holds {full / 2**20:,.1f} MiB; "
        + (
            "one trace serves every view."
            if ctx.plan(Needs(()))[0] is None
            else "too much for one trace here (over 2 GiB, or a third of this server's trace budget), so each view "
            "captures only the tensors it shows."
        )
    )
    exactness_panel(ctx)
