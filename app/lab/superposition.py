"""Lab: superposition (model/lab/superposition.py). Toy models squeeze n sparse features into
m < n dimensions: WᵀW per sparsity, five features in a plane forming a pentagon (with a step
slider over training), dimensions per feature against sparsity, and the two-feature phase diagram."""

import plotly.graph_objects as go
import streamlit as st
import torch
from plotly.subplots import make_subplots

from glassbox.app.components.charts import log_axis, show
from glassbox.app.components.lab import lab_header, lab_run, paper_table

exp = lab_header("superposition")
code = exp.code
st.markdown(
    "A toy model reads n features through m < n dimensions and back: h = W x, x′ = ReLU(WᵀW x + b). Each feature is "
    "zero with probability S (its sparsity), else uniform on [0, 1]. When features are dense, the model keeps the m "
    "most important ones. When they are sparse, it stores more features than it has dimensions: in superposition."
)
run = lab_run("superposition", max_steps=20_000, step=100)
if run is None:
    st.stop()
figures = run.figures
intro, pentagon, dims, phase = (figures[k] for k in ("intro", "pentagon", "dimensionality", "phase"))
threshold = figures["setup"]["represented_at"]
st.caption(
    f"Each run trained {figures['steps']:,} steps with AdamW (lr {figures['setup']['lr']:g}), all its instances at once; "
    f"the four runs took {figures['seconds']:.0f} s here. A feature counts as represented where ‖W_i‖ ≥ {threshold}."
)

st.subheader(f"{intro['n']} features in {intro['m']} dimensions: WᵀW as sparsity rises")
st.markdown(
    "Feature i's importance is 0.7^i: feature f0 matters most. WᵀW shows, for each pair of features, how much one "
    "comes out when the other goes in: a diagonal of 1s is a feature with a dimension of its own, off-diagonal "
    "entries are features sharing dimensions."
)
labels = [f"f{i}" for i in range(intro["n"])]
at = st.select_slider(
    "Sparsity S", intro["sparsity"], value=intro["sparsity"][-2], key="lab_superposition_sparsity", format_func=lambda s: f"{s:g}"
)
k = intro["sparsity"].index(at)
a, b = st.columns([3, 2])
fig = go.Figure(
    go.Heatmap(z=intro["WtW"][k], x=labels, y=labels, zmin=-1, zmax=1, colorscale="RdBu", reversescale=True, colorbar_title="WᵀW")
)
fig.update_layout(
    title=f"WᵀW at S = {at:g}: {intro['represented'][k]} of {intro['n']} features represented",
    xaxis_title="feature in",
    yaxis_title="feature out",
    yaxis_autorange="reversed",
    height=460,
)
show(fig, a)
fig = go.Figure()
fig.add_bar(
    y=labels,
    x=intro["norms"][k],
    orientation="h",
    name="‖W_i‖",
    marker=dict(color=intro["interference"][k], colorscale="Viridis", cmin=0, cmax=1, colorbar=dict(title="shared", x=1.15)),
)
fig.add_bar(y=labels, x=intro["b"][k], orientation="h", name="bias b_i", marker_color="#FF8700")
fig.add_vline(x=threshold, line_dash="dot", annotation_text="represented")
fig.update_layout(
    title="Each feature's length ‖W_i‖ and bias b_i",
    xaxis_title="value",
    yaxis=dict(title="feature", autorange="reversed", tickmode="array", tickvals=labels),
    barmode="group",
    legend=dict(orientation="h", y=-0.2),
    height=460,
)
show(fig, b)
st.caption(
    "Bar colour: Σ_j≠i (Ŵ_i·W_j)², 0 where the feature has its direction to itself, 1 and above where other "
    "features share it. "
    + ", ".join(f"S = {s:g}: {r} represented" for s, r in zip(intro["sparsity"], intro["represented"], strict=True))
)


def arrows(fig: go.Figure, W: list, row: int = 1, col: int = 1, show_legend: bool = False) -> None:
    """Feature i's direction W_i (a column of the 2 × n W) as an arrow from the origin, labelled."""
    colours = ["#0068C9", "#FF2B2B", "#29B09D", "#FF8700", "#6D3FC0"]
    for i in range(len(W[0])):
        x, y = W[0][i], W[1][i]
        fig.add_scatter(
            x=[0, x],
            y=[0, y],
            mode="lines+markers+text",
            text=["", f"f{i}"],
            textposition="top center",
            marker=dict(size=[0, 8], color=colours[i % len(colours)]),
            line=dict(color=colours[i % len(colours)], width=3),
            name=f"feature f{i}",
            legendgroup=f"f{i}",
            showlegend=show_legend,
            row=row,
            col=col,
        )


st.subheader(f"{pentagon['n']} features in {pentagon['m']} dimensions: the pentagon")
st.markdown(
    "All five features equally important. Each arrow is a feature's direction W_i in the 2-D hidden space. Dense, "
    "the model keeps two dimensions' worth; sparse, it packs all five into a regular pentagon, 72° apart, and the "
    "ReLU with a negative bias filters out the small interference."
)
count = len(pentagon["sparsity"])
titles = []
for s, angles in zip(pentagon["sparsity"], pentagon["angles"], strict=True):
    titles.append(f"S = {s:g}<br>{' '.join(f'{v:.0f}°' for v in angles) or 'no angle'}")
fig = make_subplots(rows=1, cols=count, subplot_titles=titles, horizontal_spacing=0.02)
for c, W in enumerate(pentagon["W"]):
    arrows(fig, W, 1, c + 1, show_legend=c == 0)
fig.update_xaxes(range=[-1.6, 1.6], showticklabels=False, title_text="dimension 1")
fig.update_yaxes(range=[-1.6, 1.6], showticklabels=False)
fig.update_yaxes(title_text="dimension 2", row=1, col=1)
for c in range(count):
    fig.update_yaxes(scaleanchor=f"x{c + 1 if c else ''}", row=1, col=c + 1)
fig.update_layout(
    title="Feature directions after training, one panel per sparsity (angles between neighbouring directions)",
    height=330,
    legend=dict(orientation="h", y=-0.25),
    margin=dict(t=110),
)
fig.update_annotations(font_size=11)
show(fig)
st.caption(
    "Features represented: "
    + ", ".join(f"S = {s:g}: {r}/{pentagon['n']}" for s, r in zip(pentagon["sparsity"], pentagon["represented"], strict=True))
    + f". Each setting trained {pentagon['restarts']} times from different starts; the best on held-out samples is shown."
)

st.subheader("Watch the pentagon form")
s_last = pentagon["sparsity"][-1]
step = st.select_slider("Step", pentagon["steps"], value=pentagon["steps"][-1], key="lab_superposition_step")
W_then = pentagon["W_at"][pentagon["steps"].index(step)][-1]
angles_then = code.neighbour_angles(torch.tensor(W_then))
lengths = [(W_then[0][i] ** 2 + W_then[1][i] ** 2) ** 0.5 for i in range(pentagon["n"])]
a, b = st.columns([2, 3])
a.metric("Features represented at this step", f"{sum(v >= threshold for v in lengths)} / {pentagon['n']}")
a.metric("Angles between neighbours", " ".join(f"{v:.0f}°" for v in angles_then) or "none")
fig = make_subplots(rows=1, cols=1)
arrows(fig, W_then)
fig.update_layout(
    title=f"W at step {step:,} (S = {s_last:g})",
    xaxis=dict(range=[-1.6, 1.6], title="dimension 1"),
    yaxis=dict(range=[-1.6, 1.6], title="dimension 2", scaleanchor="x"),
    height=420,
)
show(fig, b)

st.subheader("Dimensions per feature against sparsity")
st.markdown(
    f"{dims['n']} equally important features in {dims['m']} dimensions. A feature's dimensionality D_i = ‖W_i‖² / "
    "Σ_j (Ŵ_i·W_j)² is the share of a dimension it gets: 1 alone, 1/2 in an antipodal pair, 2/5 in a pentagon. "
    "The line is the whole model's m / ‖W‖_F². The paper finds both stick at a few fractions (dotted)."
)
fig = go.Figure()
xs, ys = [], []
for x, D in zip(dims["x"], dims["D"], strict=True):
    kept = [d for d in D if d > 0.05]
    xs += [x] * len(kept)
    ys += kept
fig.add_scatter(x=xs, y=ys, mode="markers", marker=dict(size=5, opacity=0.35, color="#31333F"), name="a feature's D_i")
fig.add_scatter(x=dims["x"], y=dims["dims_per_feature"], mode="lines+markers", name="m / ‖W‖_F²", line_color="#FF2B2B")
for n_, sticky in enumerate(dims["sticky"]):
    crowded = n_ and dims["sticky"][n_ - 1]["fraction"] - sticky["fraction"] < 0.05  # its label goes below the line
    fig.add_hline(
        y=sticky["fraction"],
        line_dash="dot",
        line_color="#6D3FC0",
        opacity=0.6,
        annotation_text=f"{sticky['label']} {sticky['shape']}",
        annotation_position="bottom right" if crowded else "top right",
        annotation_font_size=10,
    )
fig.update_layout(
    title="Dimensions per feature fall as features get sparser, sticking at fractions",
    xaxis=log_axis(dims["x"], "1 / (1 − S)  (log scale)"),
    yaxis=dict(title="dimensions per feature", range=[0, 1.1]),
    height=460,
    margin=dict(r=170),
    legend=dict(orientation="h", y=-0.2),
)
show(fig)
st.caption(
    "Features with D_i above 0.05 are drawn. Features within 0.02 of each fraction: "
    + ", ".join(f"{s['label']}: {c}" for s, c in zip(dims["sticky"], dims["near_sticky"], strict=True))
)

st.subheader("The phase diagram: two features, one dimension")
st.markdown(
    "Feature f0 has importance 1; the extra feature f1's importance and both features' density 1 − S vary. The extra "
    "feature is dropped, takes the dimension for itself, or shares it with f0 as an antipodal pair (W = (w, −w)). "
    f"The rule: a feature is represented where |W_i| ≥ {threshold}. The dotted line is our closed-form rule: "
    "it compares the expected losses of the three configurations (f1 dropped, f1 alone, an antipodal pair) and says "
    "superposition below it."
)
colours = {0: "#83C9FF", 1: "#0068C9", 2: "#FF2B2B"}
fig = go.Figure()
for p, name in enumerate(phase["phases"]):
    cells = [
        (i, d) for r, d in enumerate(phase["density"]) for c, i in enumerate(phase["importance"]) if phase["phase"][r][c] == p
    ]
    fig.add_scatter(
        x=[i for i, _ in cells],
        y=[d for _, d in cells],
        mode="markers",
        marker=dict(symbol="square", size=22, color=colours[p]),
        name=f"extra feature: {name}",
    )
curve = [10 ** (-1 + 2 * t / 100) for t in range(101)]
fig.add_scatter(
    x=curve,
    y=[code.theory_boundary(i) for i in curve],
    mode="lines",
    line=dict(dash="dot", color="#31333F"),
    name="closed-form boundary",
)
fig.update_layout(
    title=f"Which phase the trained model is in ({phase['agreement']:.0%} of cells as the closed-form rule says)",
    xaxis=log_axis(phase["importance"], "relative importance of the extra feature (log scale)"),
    yaxis=log_axis(phase["density"], "feature density 1 − S (log scale)"),
    height=520,
    legend=dict(orientation="h", y=-0.2),
)
show(fig)

paper_table(figures["comparison"])
