"""The lesson on key figures of real models: their shapes, parameters counted from the shapes beside the
published counts, where the parameters are, FLOPs and KV bytes per token."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.course import lesson_end, lesson_page
from glassbox.model.course.real_model_configs import MODEL
from glassbox.model.course.real_model_figures import appendix_slips, deepseek_d_head, figures

PART_COLOURS = {"embeddings": "#83C9FF", "attention": "#0068C9", "MLP": "#FF8700", "norms": "#29B09D"}


def where_the_parameters_are(rows: list[dict]) -> go.Figure:
    """Each model's parameters split into embeddings, attention, MLPs and norms, as shares."""
    names = [r["model"] for r in rows]
    fig = go.Figure(
        [
            go.Bar(
                y=names,
                x=[100 * r["where"][part] / r["parameters"] for r in rows],
                name=part,
                orientation="h",
                marker_color=colour,
                hovertemplate="%{y}: %{x:.1f}% " + part + "<extra></extra>",
            )
            for part, colour in PART_COLOURS.items()
        ]
    )
    fig.update_layout(
        barmode="stack",
        xaxis_title="share of the parameters (%)",
        yaxis=dict(autorange="reversed"),
        height=110 + 26 * len(rows),
        margin=dict(t=10, b=10, l=10, r=10),
        legend=dict(orientation="h", y=1.08, x=0),
    )
    return fig


lesson = lesson_page("key-figures")
st.markdown(
    "A model's size follows from a handful of numbers in its configuration: the layers, the width d_model, the "
    "heads and how wide each is, the MLP's width d_ff, the vocabulary. Each weight matrix is a product of two of "
    "them, so the parameters can be counted without downloading a single weight. Below, each count is checked "
    "against the published one. Making one token costs about two operations per weight it meets (a multiply "
    "and an add), and the KV cache keeps two vectors per layer and key/value head for every token."
)
rows = figures()["models"]
st.markdown("**Shapes**, from each configuration:")
st.dataframe(
    [
        {
            "model": r["model"],
            "layers": r["layers"],
            "d_model": r["d_model"],
            "heads": r["heads"],
            "key/value heads": r["kv_heads"],
            "d_head": r["d_head"],
            "d_ff": r["d_ff"],
            "vocabulary": r["vocab"],
            "context": r["context"],
        }
        for r in rows
    ],
    hide_index=True,
    height=35 * (len(rows) + 1) + 3,
)
st.markdown("**Sizes**, computed from the shapes:")
st.dataframe(
    [
        {
            "model": r["model"],
            "parameters (counted)": f"{r['parameters']:,}",
            "published": f"{r['published'] / 1e9:,.3g}B" if r["published"] >= 1e9 else f"{r['published'] / 1e6:,.3g}M",
            "difference": f"{r['difference_percent']:+.2f}%",
            "GFLOPs per token": round(r["flops_per_token"] / 1e9, 2),
            "KV cache per token (fp16)": f"{r['kv_bytes_per_token_fp16']:,} bytes",
        }
        for r in rows
    ],
    hide_index=True,
    height=35 * (len(rows) + 1) + 3,
)
st.caption(
    "Published counts are rounded by their authors (GPT-2 XL's 1.5B is 1.56B counted); Pythia's paper "
    "gives exact counts. Mixtral's FLOPs count the 2 experts of 8 a token uses (12.9B of 46.7B parameters). "
    "FLOPs leave out attention's own products, which grow with the context."
)

st.subheader("One model, part by part")
name = st.selectbox("Model", list(MODEL), index=0, key="figures_model")
chosen = next(r for r in rows if r["model"] == name)
st.table(
    [
        {"part": part, "parameters": f"{size:,}", "share": f"{100 * size / chosen['parameters']:.1f}%"}
        for part, size in chosen["where"].items()
    ]
    + [{"part": "all", "parameters": f"{chosen['parameters']:,}", "share": "100%"}]
)
show(where_the_parameters_are(rows), config={"displayModeBar": False})
st.caption(
    "Small models spend most of their parameters on the vocabulary; large ones on their MLPs (Mixtral's "
    "eight experts most of all)."
)

st.subheader("The course's appendix, checked")
slips = "; ".join(
    f"{s['model']}'s {s['figure']} is printed as {s['printed']:,}, its configuration says {s['configuration']:,}"
    for s in appendix_slips()
)
deepseek = deepseek_d_head()
st.markdown(
    f"Two figures in the course's table of key figures differ from the configurations: {slips}. Its other "
    "GPT-2 and GPT-3 figures agree. Its DeepSeek-V3 column is not recomputed here, as DeepSeek's attention "
    "compresses keys and values into a shared latent (MLA), which this count does not describe; but its "
    f"d_head of {deepseek['printed']} is d_model / heads ({deepseek['d_model']:,} / {deepseek['heads']}), a width no "
    "head has. "
    f"Per head the configuration gives {deepseek['query and key']} for queries and keys "
    f"({deepseek['query and key'] - deepseek['of which RoPE']} + {deepseek['of which RoPE']} that RoPE "
    f"rotates) and {deepseek['value']} for values."
)
lesson_end(lesson)
