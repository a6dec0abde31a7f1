"""LayerNorm (or RMSNorm): per position the input's mean and spread, the normalised vector and
the output after the learned scale and shift."""

from functools import partial

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.labels import cell_text, plain
from glassbox.app.explore.common import Explorer, array, derived, heatmap, lacks, lazy_tabs, positions_heatmap
from glassbox.model.analysis import norm_prefixes, norm_summary
from glassbox.model.analysis.architecture import NO_NORMS
from glassbox.model.engine import block_label
from glassbox.model.serving import Needs
from glassbox.model.worked_example.steps.explain import power


def label(prefix: str, post: bool = False) -> str:
    """A norm's name in the picker; ``post``: a post-norm model's, whose ln1 and ln2 norm the sums."""
    if prefix == "ln_final.":
        return "final norm (before the head)"
    if prefix == "mlm.ln.":
        return "MLM head's norm (before the unembedding)"
    block, which = prefix.split(".")[1], prefix.split(".")[2]
    where = {"ln1": "before attention", "ln1_post": "after attention", "ln2": "before the MLP", "ln2_post": "after the MLP"}
    if post:
        where = {"ln1": "after attention, on the sum", "ln2": "after the MLP, on the sum"}
    return f"{block_label(int(block))} {which} ({where[which]})"


def lit(ctx: Explorer) -> set[str]:
    prefix = st.session_state.get("explore_norm", "blocks.0.ln1.")
    if not prefix.startswith("blocks."):  # the final norm, or the MLM head's
        return {"ln_final" if prefix == "ln_final." else "mlm"}
    return {".".join(prefix.split(".")[:2]) + ".norms"}


def render(ctx: Explorer) -> None:
    cfg = ctx.cfg
    prefixes = dict(norm_prefixes(cfg))
    if not prefixes and lacks(ctx):  # a zero-layer model without a final norm has none
        return
    if not prefixes:  # a model without norms (norm "none")
        st.info(plain(NO_NORMS))
        return
    if st.session_state.get("explore_norm") not in prefixes:
        st.session_state.explore_norm = next(iter(prefixes))
    prefix = st.selectbox(
        "Norm",
        list(prefixes),
        key="explore_norm",
        persist_state="session",
        format_func=lambda p: label(p, cfg.norm_position == "post"),
    )
    source = prefixes[prefix]
    trace = ctx.trace(Needs((prefix + "*", source)))
    summary = derived(trace, ("norm summary", prefix), lambda: norm_summary(trace, cfg, prefix, source))
    module = ctx.model.get_submodule(prefix[:-1])  # blocks.0.ln1, ln_final, mlm.ln
    if cfg.norm == "layernorm":
        st.latex(
            r"\mathrm{out} = \frac{x - \mu}{\sqrt{\sigma^2 + \varepsilon}} \odot \gamma + \beta,\quad "
            rf"\mu = \tfrac{{1}}{{{cfg.d_model}}}\textstyle\sum_i x_i,\ \sigma^2 = \tfrac{{1}}{{{cfg.d_model}}}\sum_i (x_i-\mu)^2,"
            rf"\ \varepsilon = {power(cfg.norm_eps)}"
        )
    else:
        st.markdown(
            "This model's norms are **RMSNorm**: no mean is subtracted and, "
            + ("as here, there is often no shift β." if module.b is None else "here, a shift β is added.")
        )
        st.latex(
            r"\mathrm{out} = \frac{x}{\sqrt{\tfrac{1}{d}\sum_i x_i^2 + \varepsilon}} \odot \gamma"
            + (r" + \beta" if module.b is not None else "")
            + rf",\ \varepsilon = {power(cfg.norm_eps)}"
        )
    fig = go.Figure()
    for name in ("input mean", "input std") if cfg.norm == "layernorm" else ("input rms",):
        fig.add_trace(go.Bar(x=ctx.labels, y=summary[name], name=name))
    recorded = "hook_mean, hook_scale" if cfg.norm == "layernorm" else "hook_scale"  # RMSNorm records no mean
    fig.update_layout(
        title=dict(text=f"<b>Per position</b> {prefix}{recorded} (input: {source})", font=dict(size=13), x=0),
        height=300,
        margin=dict(l=10, r=10, t=40, b=10),
        xaxis=dict(title="token", type="category"),
        yaxis=dict(title="the input's statistic"),
        barmode="group",
        legend=dict(orientation="h", y=1.12, x=1, xanchor="right"),
    )
    show(fig, width="stretch")
    table = pd.DataFrame(summary, index=ctx.labels)
    largest = float(np.abs(table.to_numpy()).max(initial=0.0))
    st.dataframe(
        table.style.format(lambda v: cell_text(v, largest, ".6g")), width="stretch", height=min(38 + 35 * len(table), 320)
    )
    if cfg.norm == "layernorm":
        st.caption(
            "The input's mean and standard deviation are recomputed here from the input in float64; the "
            "recorded scale is √(σ² + ε), so it sits just above the std. The normalised vector has mean 0 and "
            "std just under 1."
        )
    else:
        st.caption(
            "The input's root mean square is recomputed here from the input in float64; the recorded scale is "
            "√(mean x² + ε), so it sits just above it. RMSNorm does not subtract the mean: the normalised "
            "vector keeps a mean of its own, and its root mean square is just under 1."
        )
    weights = [array(module.w)[None]] + ([array(module.b)[None]] if module.b is not None else [])
    shifted = len(weights) == 2
    scale = "Learned scale and shift" if shifted else "Learned scale (this norm has no shift)"
    stage = partial(positions_heatmap, ctx, trace)
    lazy_tabs(
        {
            "Input x": partial(stage, source, "Input x", "ln:in"),
            "Normalised": partial(stage, prefix + "hook_normalized", "Normalised", "ln:norm"),
            scale.split(" (")[0]: partial(
                heatmap,
                np.concatenate(weights),
                ["γ (scale)", "β (shift)"][: len(weights)],
                None,
                scale,
                prefix[:-1] + (".w, .b" if shifted else ".w"),
                row_title="",
                col_title="d_model",
                height=240,
            ),
            "Output": partial(stage, prefix + "hook_out", "Output", "ln:out"),
        },
        "explore_norm_stage",
    )
