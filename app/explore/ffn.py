"""FFN (the MLP): every neuron's pre- and post-activation at every position, how many are
active, and which neurons write most into the residual stream at a chosen position."""

import pandas as pd
import streamlit as st

from app.components.charts import show
from app.components.labels import plain
from app.explore.common import Explorer, array, bar_chart, choose_layer, choose_position, heatmap, lacks
from model.analysis import active, top_neurons
from model.serving import Needs


def lit(ctx: Explorer) -> set[str]:
    return {f"blocks.{st.session_state.explore_block}.mlp"}


def render(ctx: Explorer) -> None:
    cfg = ctx.cfg
    if lacks(ctx, mlp=True):
        return
    left, right = st.columns(2)
    with left:
        layer = choose_layer(ctx)
    with right:
        position = choose_position(ctx)
    p = f"blocks.{layer}.mlp."
    trace = ctx.trace(Needs((p + "*", f"blocks.{layer}.ln2.hook_out")))
    on = active(trace, cfg, layer)
    rule = "output > 0" if cfg.activation == "relu" and not cfg.gated_mlp else "pre-activation > 0"
    if cfg.gated_mlp:
        st.markdown(f"{cfg.d_ff:,} neurons, gated: pre = x·W_gate, gate = {cfg.activation}(pre), linear = x·W_in "
                    "(the up projection), post = gate × linear; then post·W_out adds back into the residual stream"
                    + (" (after the post norm ln2_post)" if cfg.post_norms else "") + ".")
    else:
        st.markdown(f"{cfg.d_ff:,} neurons: pre = x·W_in + b_in, post = {cfg.activation}(pre), then post·W_out adds "
                    "back into the residual stream.")
    fraction = on.double().mean(-1).cpu().numpy()
    show(bar_chart(ctx.labels, fraction, f"Fraction of neurons active ({rule})", "fraction",
                   text=[f"{f:.0%}" for f in fraction]), width="stretch")
    heatmap(array(trace[p + "hook_pre"]), ctx.labels, None, "Pre-activation", p + "hook_pre", col_title="neuron",
            zoom_key="ffn:pre", trace=trace)
    if cfg.gated_mlp:
        a, b = st.columns(2)
        with a:
            heatmap(array(trace[p + "hook_gate"]), ctx.labels, None, f"Gate: {cfg.activation}(pre)", p + "hook_gate",
                    col_title="neuron", zoom_key="ffn:gate", width=450, trace=trace)
        with b:
            heatmap(array(trace[p + "hook_linear"]), ctx.labels, None, "Linear (up): x·W_in", p + "hook_linear",
                    col_title="neuron", zoom_key="ffn:linear", width=450, trace=trace)
    heatmap(array(trace[p + "hook_post"]), ctx.labels, None, "Post: gate × linear" if cfg.gated_mlp
            else f"Post-activation ({cfg.activation})", p + "hook_post", col_title="neuron", zoom_key="ffn:post", trace=trace)
    neurons = top_neurons(ctx.model, trace, layer, position, 12)
    st.subheader(f"Top neurons at “{plain(ctx.labels[position])}”")
    st.caption("Ranked by how much they write into the residual stream: |post| × ‖W_out[neuron]‖.")
    st.dataframe(pd.DataFrame([{"neuron": n.index, "pre": n.pre, "post": n.post, "|post|·‖W_out row‖": n.write}
                               for n in neurons]), hide_index=True, width="stretch")
