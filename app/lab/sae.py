"""Lab: sae (model/lab/sae.py). A sparse autoencoder, trained by `glassbox train-sae`'s own loop, on
data with planted features: how many it recovers against its L0 and dictionary size, recovery
forming during training, then the default model's SAE and a link that opens it in the explorer."""

import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import log_axis, show
from glassbox.app.components.lab import lab_header, lab_run, paper_table
from glassbox.app.components.labels import plain

exp = lab_header("sae")
code = exp.code
st.markdown(
    f"{code.N_PLANTED} directions are planted in a {code.D}-dimensional space, each present in a sample with "
    f"probability {code.MEAN_ACTIVE}/{code.N_PLANTED} at a random strength. Sparse autoencoders of several sizes and "
    "sparsities (TopK: exactly k latents on) learn to rebuild the samples. Does each planted direction come back as "
    f"one of their decoder rows (cosine ≥ {code.THRESHOLD})?"
)
run = lab_run("sae", max_steps=3000, step=20)
if run is None:
    st.stop()
figures = run.figures
n = figures["planted"]["n"]
grid = figures["grid"]
sizes = sorted({e["d_sae"] for e in grid})

st.subheader("Recovered features against L0")
fig = go.Figure()
for size in sizes:
    row = sorted((e for e in grid if e["d_sae"] == size), key=lambda e: e["l0"])
    fig.add_scatter(
        x=[e["l0"] for e in row],
        y=[e["recovered"] for e in row],
        mode="lines+markers",
        customdata=[[e["k"], e["mmcs"]] for e in row],
        hovertemplate="k = %{customdata[0]}: L0 %{x:.2f}, %{y} recovered, MMCS %{customdata[1]:.3f}<extra></extra>",
        name=f"{size} latents ({size / n:g}× planted)",
    )
ks = sorted({e["k"] for e in grid})
fig.add_hline(y=n, line_dash="dot", annotation_text=f"all {n} planted", annotation_position="bottom right")
fig.update_layout(
    title=f"Planted features recovered (cosine ≥ {figures['threshold']}), one line per dictionary size",
    xaxis=dict(type="log", title="L0: mean latents active per sample (log scale; k, TopK's setting, sets it)", tickvals=ks),
    yaxis_title="planted features recovered",
    legend_title="dictionary size",
    height=420,
)
show(fig)
st.caption(
    f"One point per k ({', '.join(map(str, ks))}). The planted data has {figures['planted']['measured_l0']:.2f} "
    "features active per sample. Each SAE trained "
    f"{figures['steps']:,} steps; {len(grid)} of them took {figures['seconds']:.0f} s here."
)

st.subheader("One SAE, feature by feature")
labels = [f"{e['d_sae']} latents, k = {e['k']}" for e in grid]
chosen = st.selectbox("SAE", range(len(grid)), index=figures["best"]["index"], format_func=labels.__getitem__, key="lab_sae_pick")
entry = grid[chosen]
a, b, c, d = st.columns(4)
a.metric("Recovered", f"{entry['recovered']} / {n}")
b.metric("Mean max cosine", f"{entry['mmcs']:.3f}")
c.metric("Variance explained", f"{entry['explained']:.3f}")
d.metric("Dead latents", f"{entry['dead']} / {entry['d_sae']}")
fig = go.Figure(
    go.Bar(
        x=[f"f{i}" for i in range(n)],
        y=entry["max_cos"],
        marker_color=["#2a9d8f" if v >= figures["threshold"] else "#e76f51" for v in entry["max_cos"]],
    )
)
fig.add_hline(y=figures["threshold"], line_dash="dot")  # labelled in the axis title: over the bars a label is unreadable
fig.update_layout(
    title=f"Each planted feature's best cosine with a decoder row ({labels[chosen]})",
    xaxis_title="planted feature",
    yaxis_title=f"best cosine with a decoder row (dotted: {figures['threshold']}, recovered)",
    yaxis_range=[0, 1.02],
    height=340,
)
show(fig)

st.subheader("Recovery forming during training")
curve = entry["curve"]
step = st.select_slider("Step", curve["step"], value=curve["step"][-1], key="lab_sae_step")
at = curve["step"].index(step)
a, b, c = st.columns(3)
a.metric("Recovered at this step", f"{curve['recovered'][at]} / {n}")
b.metric("Mean max cosine", f"{curve['mmcs'][at]:.3f}")
c.metric("L0", f"{curve['l0'][at]:.2f}")
fig = go.Figure()
shown_steps = [max(s, 1) for s in curve["step"]]  # step 0 drawn at 1 on the log axis
fig.add_scatter(x=shown_steps, y=curve["recovered"], mode="lines+markers", name="recovered")
fig.add_scatter(
    x=[max(step, 1)], y=[curve["recovered"][at]], mode="markers", marker_size=14, name=f"step {step:,}", showlegend=True
)
fig.update_layout(
    title=f"Planted features recovered during training ({labels[chosen]})",
    xaxis=log_axis(shown_steps, "training step (log scale; step 0 drawn at 1)"),
    yaxis_title="planted features recovered",
    yaxis_range=[0, n + 2],
    height=320,
)
show(fig)

st.subheader("The same SAE on the default model")
default = figures["default_sae"]
st.markdown(
    f"`glassbox train-sae` trained **default-sae** with this loop on the default model's residual stream "
    f"({default['hook']}): {default['d_sae']:,} features for {default['d_in']} dimensions "
    f"({default['expansion']:.0f}×), k = {default['k']}. Here are its numbers on the {default['stories']} stories it never saw."
)
a, b, c = st.columns(3)
a.metric("L0", f"{default['l0']:.2f}")
b.metric("Variance explained", f"{default['explained']:.4f}")
c.metric("Never active", f"{default['dead']} / {default['d_sae']:,}")
st.caption(plain(f"Measured on {default['positions']:,} positions. The explorer opens on: “{default['prompt']}”"))
st.page_link(
    "screens/explore.py",
    label="Open the default model's features in the explorer",
    icon=":material/search:",
    query_params={"model": "default", "prompt": default["prompt"], "view": "Features"},
)

paper_table(figures["comparison"])
