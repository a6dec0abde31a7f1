"""The residual stream: how much each part adds at each position, and the logit lens, what the
model would predict if it stopped after each block."""

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.labels import plain
from glassbox.app.explore.common import Explorer, choose_position, derived, heatmap, probs_at
from glassbox.model.analysis import contribution_norms, logit_lens, residual_points
from glassbox.model.analysis.residual import contribution_names
from glassbox.model.engine import GlassboxError
from glassbox.model.plot.heatmap import heatmap_figure
from glassbox.model.serving import Needs

LENS_WINDOW = 24  # positions shown at once in the lens grid


def needs(ctx: Explorer) -> Needs:
    """What each part adds and the stream after each block, for this model's parts."""
    names = [name for _, name in contribution_names(ctx.cfg) + residual_points(ctx.cfg)]
    return Needs((*dict.fromkeys(names), "hook_probs"))


def parts_named(ctx: Explorer) -> str:
    """The norm chart's tensors, as the engine names them."""
    added = "‖blocks.i.hook_attn_out‖" + ("" if ctx.cfg.attn_only else ", ‖blocks.i.hook_mlp_out‖")
    first = f"‖{contribution_names(ctx.cfg)[0][1]}‖"
    return f"{added} (first row: {first})" if ctx.cfg.n_layers else first


def lit(ctx: Explorer) -> set[str]:
    return {f"blocks.{i}.{part}" for i in range(ctx.cfg.n_layers) for part in ("attn", "mlp")}


@st.cache_resource(max_entries=16, show_spinner="Applying the head after every block…")
def lens(model_key: str, tokens: tuple, token_id: int, positions: tuple, _ctx: Explorer, _trace):
    return logit_lens(_ctx.model, _trace, token_id, positions=list(positions))


def render(ctx: Explorer) -> None:
    cfg = ctx.cfg
    trace = ctx.trace(needs(ctx))
    labels, norms = derived(trace, ("contribution norms",), lambda: contribution_norms(trace, cfg))
    heatmap(
        norms,
        labels,
        ctx.labels,
        "What each part adds: ‖contribution‖ per position",
        parts_named(ctx),
        row_title="part",
        col_title="token",
        sequential=True,
        zoom_key="res:norms",
        trace=trace,
    )
    if cfg.norm_position == "post":
        st.caption(
            "Post-norm: each output is added to the stream and the sum is normed again (ln1, ln2), so the stream "
            "is not the sum of these parts; each row is what a sublayer wrote, before that norm rescaled it."
        )

    st.subheader("Logit lens")
    left, right = st.columns(2)
    with left:
        position = choose_position(ctx, help="The position whose predictions are followed through the blocks")
    best = int(probs_at(trace, position).argmax())
    with right:
        chosen = st.text_input(
            "Token to follow",
            value="",
            key="explore_lens_token",
            persist_state="session",
            placeholder=ctx.loaded.tokenizer.pieces[best],
            help="One token of this vocabulary; empty: the model's own top prediction here",
        )
    token_id = best
    if chosen:
        try:
            token_id = ctx.loaded.tokenizer.token_id(chosen)
        except GlassboxError as exc:
            st.warning(f"{plain(exc)}. Following the top prediction instead.")
    T = len(ctx.tokens)
    start = max(0, min(position - LENS_WINDOW // 2, T - LENS_WINDOW))
    window = range(start, min(T, start + LENS_WINDOW))
    result = lens(ctx.model_key, tuple(ctx.tokens), token_id, tuple(window), ctx, trace)
    at = position - start  # the chosen position's index in the window
    head = f"The final {cfg.norm} and the unembedding" if cfg.final_norm else "The unembedding (this model has no final norm)"
    if cfg.mlm_head:  # the lens applies the whole head, its nonlinear transform included
        head = f"The MLM head (x·W_dense + b_dense, {cfg.activation}, {cfg.norm}) and the unembedding" + (
            " with its bias" if cfg.unembed_bias else ""
        )
    st.caption(
        f"{head} applied to the residual stream after every block. The last row is the model's own output (hook_probs)."
        if cfg.n_layers
        else f"{head} applied to the residual stream; with no blocks it is the embeddings alone, so the one row is "
        "the model's own output (hook_probs)."
    )

    top_p = result.top_probs[:, :, 0]
    text = [[ctx.piece(int(i)) for i in row] for row in result.top_ids[:, :, 0]]
    fig = heatmap_figure(
        top_p,
        result.labels,
        [ctx.labels[c] for c in window],
        "Top token after each block",
        size=f"(positions {window.start}–{window.stop - 1} of {T})",
        row_title="residual stream",
        col_title="position (predicting its own token)" if cfg.kind == "encoder" else "position (predicting the next token)",
        colour="sequential",
        zmax=1,
        text=text,
        hover="%{y}, %{x}<br>top token %{text}: p = %{z:.4f}<extra></extra>",
        colorbar="p",
        gaps=False,
        marks=[(None, at)],
        height=120 + 34 * len(result.labels),
    )
    show(fig, width="stretch")

    if cfg.n_layers:
        show(chosen_chart(ctx, result, token_id, position, at), width="stretch")
    else:  # one point: a chart of it would be empty
        st.markdown(f"p(“{plain(ctx.piece(token_id))}”) at “{plain(ctx.labels[position])}”: **{result.chosen[0, at]:.4f}**")
    table = pd.DataFrame(
        {
            f"top {k + 1}": [
                f"{ctx.piece(int(result.top_ids[r, at, k]))} {result.top_probs[r, at, k]:.3f}" for r in range(len(result.labels))
            ]
            for k in range(result.top_ids.shape[2])
        },
        index=result.labels,
    )
    st.dataframe(table, width="stretch")  # a row per point of the stream, the top 5 across: it fits the page


def chosen_chart(ctx: Explorer, result, token_id: int, position: int, at: int) -> go.Figure:
    """The followed token's probability at each point of the stream."""
    fig = go.Figure(
        go.Scatter(
            x=result.labels,
            y=result.chosen[:, at],
            mode="lines+markers+text",
            text=[f"{p:.3f}" for p in result.chosen[:, at]],
            textposition="top center",
        )
    )
    fig.update_layout(
        title=dict(
            text=f"<b>p(“{ctx.piece(token_id)}”)</b> at “{ctx.labels[position]}”, block by block", font=dict(size=13), x=0
        ),
        height=320,
        margin=dict(l=10, r=10, t=40, b=10),
        yaxis=dict(title="probability", range=[0, 1.05]),
        xaxis=dict(title="residual stream", type="category"),
    )
    return fig
