"""The MLP (the article's FFN, a feed-forward network): every neuron's pre- and post-activation at every position, how many are
active, and which neurons write most into the residual stream at a chosen position. In a
mixture-of-experts block, first the routing (which experts each token chose, with what weight,
the load per expert, the router's probabilities at a token), then the same neuron view on one
chosen expert, on the positions routed to it."""

from functools import partial

import numpy as np
import pandas as pd
import streamlit as st

from glassbox.app.components.charts import paired_bars, show
from glassbox.app.components.labels import plain
from glassbox.app.explore.common import (
    Explorer,
    array,
    bar_chart,
    choose_expert,
    choose_layer,
    choose_position,
    derived,
    heatmap,
    lacks,
)
from glassbox.model.analysis import active, top_neurons
from glassbox.model.analysis.experts import SHARED, Unit, expert_label, routing, unit
from glassbox.model.plot.heatmap import ClickLayer, fits_text, heatmap_figure
from glassbox.model.serving import Needs

CLICK_CELLS = 4096  # a routing map with more cells than this is not made clickable (one marker per cell)


def lit(ctx: Explorer) -> set[str]:
    return {f"blocks.{st.session_state.explore_block}.mlp"}


def render(ctx: Explorer) -> None:
    if lacks(ctx, mlp=True):
        return
    left, right = st.columns(2)
    with left:
        layer = choose_layer(ctx)
    with right:
        position = choose_position(ctx)
    trace = ctx.trace(Needs((f"blocks.{layer}.mlp.*", f"blocks.{layer}.ln2.hook_out")))
    if not ctx.cfg.is_moe(layer):
        neurons(ctx, trace, unit(ctx.cfg, layer), position)
        return
    experts(ctx, trace, layer, position)


def describe(cfg, chosen: Unit) -> str:
    """The unit's hidden layer in one sentence: what pre, post (and gate, linear) are."""
    if chosen.routed:
        what = f"{expert_label(chosen.expert).capitalize()}: "
        into = "times its weight (0 where it was not chosen), joins the block's output"
    elif chosen.expert == SHARED:
        what = "The shared expert, which every token goes through: "
        into = ("times its sigmoid gate, " if cfg.shared_expert_gate else "") + "joins the routed experts' sum"
    else:
        what, into = (
            "",
            "adds back into the residual stream"
            + (
                " (after the post norm ln2_post)"
                if cfg.post_norms
                else ", and ln2 norms the sum (post-norm)"
                if cfg.norm_position == "post"
                else ""
            ),
        )
    if cfg.gated_mlp:
        return (
            f"{what}{chosen.width:,} neurons, gated: pre = x·W_gate, gate = {cfg.activation}(pre), linear = x·W_in "
            f"(the up projection), post = gate × linear; then post·W_out {into}."
        )
    bias = " + b_in" if cfg.mlp_bias and chosen.expert is None else ""
    return f"{what}{chosen.width:,} neurons: pre = x·W_in{bias}, post = {cfg.activation}(pre), then post·W_out {into}."


def neurons(ctx: Explorer, trace, chosen: Unit, position: int) -> None:
    """A unit's neurons at every position; a routed expert's rows where it did not run left blank."""
    cfg = ctx.cfg
    ran = chosen.ran(trace, cfg).cpu().numpy()
    scale = chosen.scale(trace).float().cpu().numpy()
    rows = (
        ctx.labels
        if not chosen.routed
        else [f"{label} · w {w:.2f}" if on else f"{label} · not run" for label, on, w in zip(ctx.labels, ran, scale)]
    )
    blank = lambda values: np.where(ran[:, None], values, np.nan)  # noqa: E731 (an expert's unrouted positions)
    name = lambda hook: chosen.prefix + hook + (f"[{chosen.expert}]" if chosen.routed else "")  # noqa: E731
    st.markdown(describe(cfg, chosen))
    rule = "output > 0" if cfg.activation == "relu" and not cfg.gated_mlp else "pre-activation > 0"
    fraction = np.where(ran, active(trace, cfg, chosen.layer, chosen.expert).double().mean(-1).cpu().numpy(), np.nan)
    show(
        bar_chart(
            ctx.labels,
            np.nan_to_num(fraction),
            f"Fraction of neurons active ({rule})",
            "fraction of neurons (bars labelled in %)",
            text=[f"{f:.0%}" if on else "not run" for f, on in zip(fraction, ran)],
        ),
        width="stretch",
    )
    if chosen.routed:
        st.caption(
            f"Rows: each position with {expert_label(chosen.expert)}'s weight there (w); it ran on "
            f"{int(ran.sum())} of {len(ran)} positions, and the others (not run) are left blank: their "
            "weight is 0, so nothing it computes there reaches the output."
        )
    zoom = "ffn:" if chosen.expert is None else f"ffn:{chosen.expert}:"
    heatmap(
        blank(array(chosen.read(trace, "hook_pre"))),
        rows,
        None,
        "Pre-activation",
        name("hook_pre"),
        col_title="neuron",
        zoom_key=zoom + "pre",
        trace=trace,
    )
    if cfg.gated_mlp:
        a, b = st.columns(2)
        with a:
            heatmap(
                blank(array(chosen.read(trace, "hook_gate"))),
                rows,
                None,
                f"Gate: {cfg.activation}(pre)",
                name("hook_gate"),
                col_title="neuron",
                zoom_key=zoom + "gate",
                width=450,
                trace=trace,
            )
        with b:
            heatmap(
                blank(array(chosen.read(trace, "hook_linear"))),
                rows,
                None,
                "Linear (up): x·W_in",
                name("hook_linear"),
                col_title="neuron",
                zoom_key=zoom + "linear",
                width=450,
                trace=trace,
            )
    heatmap(
        blank(array(chosen.read(trace, "hook_post"))),
        rows,
        None,
        "Post: gate × linear" if cfg.gated_mlp else f"Post-activation ({cfg.activation})",
        name("hook_post"),
        col_title="neuron",
        zoom_key=zoom + "post",
        trace=trace,
    )
    st.subheader(f"Top neurons at “{plain(ctx.labels[position])}”")
    if not ran[position]:
        st.caption(
            f"{expert_label(chosen.expert).capitalize()} did not run here: its weight is 0, so none of its "
            "neurons writes anything at this position."
        )
        return
    weighted = {None: "", SHARED: " × its gate" if cfg.shared_expert_gate else ""}.get(chosen.expert, " × its weight")
    st.caption(f"Ranked by how much they write into the residual stream: |post{weighted}| × ‖W_out[neuron]‖.")
    st.dataframe(
        pd.DataFrame(
            [
                {"neuron": n.index, "pre": n.pre, "post": n.post, f"|post{weighted}|·‖W_out row‖": n.write}
                for n in top_neurons(ctx.model, trace, chosen.layer, position, 12, chosen.expert)
            ]
        ),
        hide_index=True,
        width="stretch",
    )


def experts(ctx: Explorer, trace, layer: int, position: int) -> None:
    """An MoE block: its routing of the prompt, then one expert's neurons."""
    cfg = ctx.cfg
    routed = derived(trace, ("routing", layer), lambda: routing(trace, cfg, layer))
    norm = (
        "its probability renormalised over the chosen ones (they sum to 1)"
        if cfg.norm_top_k
        else "its probability (not renormalised)"
    )
    st.markdown(
        f"A mixture of experts: the router scores {cfg.n_experts} experts for each token (x·W_router, then a "
        f"softmax), and the token runs through its top {cfg.experts_top_k} only, each weighted by {norm}"
        + ("; a shared expert runs on every token beside them" if cfg.d_ff_shared is not None else "")
        + "."
    )
    routing_map(ctx, routed, layer, position)
    left, right = st.columns(2)
    with left:
        load = [f"{expert_label(e)} · {n} slot{'' if n == 1 else 's'}" for e, n in enumerate(routed.load)]
        fig = paired_bars(
            load,
            [("share of token-slots", routed.share, "#0068C9"), ("mean router probability", routed.mean_prob, "#FF8700")],
            f"<b>Load per expert</b>: {routed.chosen.size} token-slots ({len(ctx.tokens)} tokens × {cfg.experts_top_k})",
            "fraction (each sums to 1)",
            "expert",
        )
        # any expert's bars may be the longest: the legend goes above them, not in a corner
        fig.update_layout(legend=dict(orientation="h", x=0, y=1.02, xanchor="left", yanchor="bottom"), margin=dict(t=90))
        show(fig, width="stretch")
    with right:
        probs = routed.probs[position]
        fig = bar_chart(
            [expert_label(e) for e in range(cfg.n_experts)],
            probs,
            f"<b>Router probabilities</b> at “{ctx.labels[position]}”",
            "probability",
            x_title="expert",
            height=90 + 22 * 2 * cfg.n_experts if cfg.n_experts <= 16 else 380,
            text=[f"{p:.2f}" for p in probs],
        )
        fig.update_traces(marker_color=["#0068C9" if on else "#9db4d0" for on in routed.routed[position]])
        show(fig, width="stretch")
        st.caption(
            f"Dark: the {cfg.experts_top_k} chosen at this token. Click a cell of the map to choose a token and an expert."
        )
    st.subheader("One expert's neurons")
    expert = choose_expert(
        ctx, default=int(routed.chosen[position, 0]), help="Its neurons at the positions routed to it (the map's column)"
    )
    neurons(ctx, trace, unit(cfg, layer, expert), position)


def select_cell(chart_key: str) -> None:
    """A click on the routing map chooses that token and that expert (before the rerun that draws them)."""
    points = st.session_state[chart_key].selection.points
    if points:
        st.session_state.explore_pos = int(points[0]["y"])
        st.session_state.explore_expert = int(points[0]["x"])


def routing_map(ctx: Explorer, routed, layer: int, position: int) -> None:
    """Token × expert: each expert's weight, the chosen cells written in; the router's probability
    of every cell on hover; a click chooses the token and the expert."""
    T, E = routed.weights.shape
    text = [[f"{w:.2f}" if on else "" for w, on in zip(row, chosen)] for row, chosen in zip(routed.weights, routed.routed)]
    cols = [f"{e}" for e in range(E)]
    clicks = None
    hover = (
        "%{customdata[0]}<br>expert %{customdata[1]}<br>router probability %{customdata[2]:.4f}"
        "<br>weight %{customdata[3]:.4f}<extra></extra>"
    )
    data = np.array(
        [[ctx.labels[t], e, routed.probs[t, e], routed.weights[t, e]] for t in range(T) for e in range(E)], dtype=object
    )
    if T * E <= CLICK_CELLS:
        rr, cc = np.mgrid[0:T, 0:E]
        clicks = ClickLayer(
            cc.ravel().tolist(), rr.ravel().tolist(), hover, data, size=max(8, min(28, 640 // E)), symbol="square"
        )
    fig = heatmap_figure(
        routed.weights,
        ctx.labels,
        cols,
        "Which experts each token chose: the weights",
        f"blocks.{layer}.mlp.hook_expert_weights",
        row_title="token",
        col_title="expert",
        colour="sequential",
        zmax=1.0,
        colorbar="weight",
        text=text if fits_text(text, E) and T <= 64 else None,
        fixed=True,
        clicks=clicks,
        hover=None if clicks else hover,
        customdata=None if clicks else data.reshape(T, E, 4),
        marks=[(position, None)],
        height=min(140 + 22 * T, 900),
    )
    key = f"ffn:routing:{layer}"
    show(fig, width="stretch", key=key, on_select=partial(select_cell, key), selection_mode="points")
