"""Lab: grokking (model/lab/grokking.py). A one-layer transformer learns (a + b) mod 113 from 30% of
the pairs: train and test loss with the phases (ours and the paper's), the progress measures
(restricted and excluded loss, the sum of squared weights), the embedding's Fourier spectrum at a
saved step (which opens that model in the explorer) and the key frequencies beside the paper's."""

import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.lab import checkpoint_slider, lab_header, lab_run, paper_table
from glassbox.app.components.labels import plain

exp = lab_header("grokking")
code = exp.code
st.markdown(
    f"The prompt is “a b =”, the answer (a + b) mod {code.P}. A one-layer transformer without LayerNorm trains on "
    f"{code.FRACTION:.0%} of the {code.P}² pairs with strong weight decay. It memorises them at once, "
    "then slowly builds a circuit of a few Fourier frequencies, and only when weight decay cleans away "
    "the memorisation does the test loss fall: it *groks*."
)


def training_pairs(columns: list) -> dict:
    """The live run's own setting: the share of the pairs it trains on."""
    fraction = columns[0].select_slider(
        "Training pairs",
        options=[0.3, 0.4, 0.5, 0.6],
        value=code.LIVE_FRACTION,
        format_func=lambda f: f"{f:.0%}",
        key="lab_grokking_fraction",
        help=f"The paper's {code.FRACTION:.0%} groks after thousands of steps; a run trained here uses "
        f"{code.LIVE_FRACTION:.0%} at learning rate {code.LIVE_LR:g} to grok in a few hundred",
    )
    return {"fraction": float(fraction)}


run = lab_run("grokking", max_steps=2000, step=50, more=training_pairs)
if run is None:
    st.stop()
figures = run.figures
curves, bounds, paper = figures["curves"], figures["phases"], figures["paper"]
x = curves["steps"]
PHASES = (("memorisation_end", "memorisation ends"), ("cleanup_start", "cleanup starts"), ("cleanup_end", "cleanup ends"))


def marked(fig: go.Figure) -> go.Figure:
    """Our phase boundaries as dashed lines; the paper's phases as shaded bands (its step axis),
    where they fall inside this run."""
    end = x[-1]
    bands = (
        (0, paper["memorisation_end"], "memorise", "rgba(31,119,180,0.08)"),
        (paper["memorisation_end"], paper["cleanup_start"], "circuit formation", "rgba(255,127,14,0.08)"),
        (paper["cleanup_start"], paper["cleanup_end"], "cleanup", "rgba(44,160,44,0.10)"),
    )
    for start, stop, label, colour in bands:
        if start < end:
            fig.add_vrect(
                x0=start, x1=min(stop, end), fillcolor=colour, line_width=0, annotation_text=label,
                annotation_position="top left", annotation_font_size=10,
            )  # fmt: skip
    for key, label in PHASES:
        if bounds[key] is not None:
            fig.add_vline(x=bounds[key], line_dash="dash", line_color="#555", annotation_text=f"ours: {label}",
                          annotation_position="bottom right", annotation_font_size=10)  # fmt: skip
    return fig


st.subheader("Train and test loss")
fig = go.Figure()
fig.add_scatter(x=x, y=curves["train_loss"], name="train loss", mode="lines")
fig.add_scatter(x=x, y=curves["test_loss"], name="test loss", mode="lines")
fig.update_layout(
    title="Cross-entropy on the training pairs and on the held-out pairs",
    xaxis=dict(title="step", tickformat=",d"),  # linear, as the paper draws it: the phases are long stretches of steps
    yaxis=dict(type="log", title="loss (log scale)"),
    height=420,
)
show(marked(fig))
st.caption(
    plain(
        f"Dashed: our phase boundaries (memorisation ends when train accuracy reaches {code.MEMORISED:.0%}; cleanup "
        "starts when the test loss falls below half its peak; it ends when the embedding has settled on its final key "
        f"frequencies and test accuracy is at least {code.GROKKED:.0%}). Shaded and named at the top: the paper's phases. {figures['steps']:,} steps on {figures['train_pairs']:,} "
        f"pairs ({figures['fraction']:.0%}), learning rate {figures['lr']:g}, took {figures['seconds']:.0f} s here."
    )
)

st.subheader("Progress measures")
st.markdown(
    "**Restricted loss**: the test loss when the MLP keeps only the key frequencies' cos and sin of w(a+b). "
    "**Excluded loss**: the train loss with exactly those taken out. The circuit forms long before the test "
    "loss moves: restricted loss falls and excluded loss rises while test loss stays high."
)
fig = go.Figure()
for name, label in (("train_loss", "train loss"), ("test_loss", "test loss"), ("restricted_loss", "restricted loss"),
                    ("excluded_loss", "excluded loss")):  # fmt: skip
    fig.add_scatter(x=x, y=curves[name], name=label, mode="lines")
fig.add_scatter(x=x, y=curves["weight_norm"], name="sum of squared weights", mode="lines", yaxis="y2",
                line=dict(dash="dot", color="#444"))  # fmt: skip
fig.update_layout(
    title=f"Restricted and excluded loss (key frequencies {', '.join(map(str, figures['key_frequencies']))}), "
    "and the sum of squared weights",
    xaxis=dict(title="step", tickformat=",d"),
    yaxis=dict(type="log", title="loss (log scale)"),
    yaxis2=dict(title="sum of squared weights", overlaying="y", side="right", showgrid=False),
    legend=dict(orientation="h", y=-0.25),
    height=460,
)
show(marked(fig))

st.subheader("The embedding in the Fourier basis")
step = checkpoint_slider(run, "lab_grokking_step", "12 45 =", view="Tokens & embeddings")
at = min(range(len(x)), key=lambda i: abs(x[i] - step))
norms, keys = curves["spectrum"][at], set(curves["key_frequencies"][at])
frequencies = list(range(1, len(norms) + 1))
fig = go.Figure(
    go.Bar(
        x=frequencies,
        y=norms,
        marker_color=["#d62728" if k in keys else "#1f77b4" for k in frequencies],
        hovertemplate="frequency %{x}: norm %{y:.3f}<extra></extra>",
    )
)
fig.update_layout(
    title=f"Norm of W_E's number rows along cos and sin of each frequency, step {x[at]:,} "
    f"(red: the {len(keys)} holding {figures['key_share']:.0%} of it)",
    xaxis=dict(title="frequency k (w = 2πk/113)", dtick=5),
    yaxis_title="norm",
    height=380,
)
show(fig)
st.caption(
    plain(
        "At the start every frequency carries some of the embedding; after cleanup only a few do: the ones the "
        f"circuit uses. This run's key frequencies at its last step: {', '.join(map(str, figures['key_frequencies']))}; "
        f"the paper's model: {', '.join(map(str, paper['key_frequencies']))}."
    )
)

paper_table(figures["comparison"])
