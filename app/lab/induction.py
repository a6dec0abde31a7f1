"""Lab: induction (model/lab/induction.py). The micro-model that learns induction heads, measured
as it trains: the loss, the in-context learning score, every head's induction and previous-token
score and what zeroing it costs, all on one step axis with the phase change marked; a step slider
that opens that step's model in the explorer; what zeroing the induction heads does at the end; the
paper's numbers beside ours."""

import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from glassbox.app.components.charts import show
from glassbox.app.components.lab import checkpoint_slider, lab_header, lab_run, paper_table
from glassbox.app.components.labels import plain

COLOURS = ("#457b9d", "#a8dadc", "#e76f51", "#f4a261")  # block 1 head 1, block 1 head 2, block 2 head 1, block 2 head 2

exp = lab_header("induction")
code = exp.code
st.markdown(
    "A two-block, attention-only model reads random syllables in which a random span repeats to the end of "
    "the context. The first copy of the span cannot be predicted; its repeats can, by finding the current "
    "syllable earlier on and copying what followed it: an **induction head** in block 2, fed by a "
    "**previous-token head** in block 1."
)
st.markdown(
    f"The **in-context learning score** is the paper's: the loss late in the context minus the loss early in it "
    f"(theirs: token 500 minus token 50; ours: position {code.LATE} minus position {code.EARLY} of 64, on held-out "
    "sequences). Negative means the context helps."
)
run = lab_run("induction", max_steps=3000, step=50)
if run is None:
    st.stop()
figures = run.figures
measured, found = figures["measured"], figures["jump"]
steps_at = measured["step"]
heads = [(b, h) for b in range(len(measured["induction"][0])) for h in range(len(measured["induction"][0][0]))]


def label(block: int, head: int) -> str:
    return f"block {block + 1}, head {head + 1}"


st.subheader("The phase change, on one step axis")
fig = make_subplots(
    rows=5,
    cols=1,
    shared_xaxes=True,
    vertical_spacing=0.04,
    subplot_titles=(
        "Training loss (every step, and its moving average)",
        "In-context learning score (held out)",
        "Induction score of each head",
        "Previous-token score of each head",
        "What zeroing each head costs the in-context learning score",
    ),
)
fig.add_scatter(
    x=list(range(len(figures["loss"]))),
    y=figures["loss"],
    mode="lines",
    line={"color": "#cccccc", "width": 1},
    name="loss of each step's batch",
    row=1,
    col=1,
)
fig.add_scatter(
    x=list(range(len(figures["smoothed_loss"]))),
    y=figures["smoothed_loss"],
    mode="lines",
    line={"color": "#1d3557", "width": 2},
    name=f"moving average ({figures['setup']['smooth']} steps)",
    row=1,
    col=1,
)
fig.add_scatter(
    x=steps_at, y=measured["icl"], mode="lines+markers", line={"color": "#2a9d8f"}, name="in-context learning score", row=2, col=1
)
for i, (block, head) in enumerate(heads):
    for row, key in ((3, "induction"), (4, "previous"), (5, "ablation")):
        fig.add_scatter(
            x=steps_at,
            y=[m[block][head] for m in measured[key]],
            mode="lines",
            line={"color": COLOURS[i % len(COLOURS)]},
            name=label(block, head),
            legendgroup=label(block, head),
            showlegend=row == 3,
            row=row,
            col=1,
        )
for value, when, where in ((code.PAPER_ICL_BEFORE, "before", "top right"), (code.PAPER_ICL_AFTER, "after", "bottom right")):
    fig.add_hline(
        y=value,
        line_dash="dot",
        line_color="#6c757d",
        annotation_text=f"paper, {when} its phase change: {value:g}",  # the paper's, on the same axis
        annotation_position=where,
        annotation_font_size=10,
        row=2,
        col=1,
    )
start, end = found["window"]
fig.add_vrect(x0=start, x1=end, fillcolor="#ffd166", opacity=0.25, line_width=0, row="all", col=1)
fig.add_vline(x=found["heads_step"], line_dash="dash", line_color="#e63946", row="all", col=1)
titles = ("loss (nats)", "late − early (nats)", "induction score", "previous-token", "ablated − plain (nats)")
for row, title in enumerate(titles, start=1):
    fig.update_yaxes(title_text=title, row=row, col=1)
fig.update_xaxes(title_text="training step", row=5, col=1)
fig.update_layout(
    title=f"Induction heads form at step {found['heads_step']} (dashed); the phase change, shaded: steps {start}–{end}",
    height=1150,
    legend_title="series",
)
show(fig)
st.caption(
    f"Measured every {figures['setup']['every']} steps on held-out data: the score on {figures['setup']['icl_sequences']} "
    f"sequences like the training ones, head scores on {figures['setup']['score_halves']} random sequences of "
    f"{figures['setup']['half']} syllables repeated once. The induction heads form at step {found['heads_step']}, the "
    f"in-context learning score jumps at {found['icl_step']}, the loss falls fastest at {found['loss_step']} "
    f"({figures['steps']:,} steps, {figures['seconds']:.0f} s here). Dotted: the paper's in-context learning "
    "scores before and after its phase change (500th minus 50th token, natural text)."
)
with st.expander("How the steps are found"):
    for name, rule in found["rules"].items():
        st.markdown(f"- **{name.replace('_', ' ')}**: {rule}")

st.subheader("Loss at each position of the context, over training")
fig = go.Figure(
    go.Heatmap(
        x=steps_at,
        y=list(range(len(measured["position_loss"][0]))),
        z=[list(col) for col in zip(*measured["position_loss"])],
        colorscale="Viridis",
        colorbar={"title": "loss (nats)"},
    )
)
fig.update_layout(
    title="Held-out loss by position: after the phase change, everything past the first repeat is predicted",
    xaxis_title="training step",
    yaxis_title="position in the context",
    height=380,
)
show(fig)

st.subheader("The model at a saved step")
step = checkpoint_slider(run, "lab_induction_step", figures["prompt"], view="Attention")
i = steps_at.index(step)
st.metric(f"In-context learning score at step {step:,}", f"{measured['icl'][i]:+.3f} nats")
st.dataframe(
    [
        {
            "head": label(b, h),
            "induction score": measured["induction"][i][b][h],
            "previous-token score": measured["previous"][i][b][h],
            "zeroing it costs (nats)": measured["ablation"][i][b][h],
        }
        for b, h in heads
    ],
    hide_index=True,
    use_container_width=True,
)
st.caption(plain(f"The explorer opens on a repeated random sequence: {figures['prompt']}"))

st.subheader("Zeroing heads after training")
ablation = figures["ablation"]
bars = [("none", ablation["icl"])]
bars.append(
    (
        f"induction heads ({'; '.join(label(*bh) for bh in ablation['induction_heads']['heads'])})",
        ablation["induction_heads"]["icl"],
    )
)
bars.append(
    (f"previous-token head ({label(*ablation['previous_token_head']['heads'][0])})", ablation["previous_token_head"]["icl"])
)
bars.append((f"control ({label(*ablation['control']['heads'][0])})", ablation["control"]["icl"]))
bars += [(f"{label(e['block'], e['head'])} alone", e["icl"]) for e in ablation["each"]]
fig = go.Figure(go.Bar(x=[b[0] for b in bars], y=[b[1] for b in bars], marker_color="#2a9d8f"))
fig.update_layout(
    title=f"In-context learning score at step {figures['steps']:,}, with heads zeroed (their hook_z)",
    xaxis_title="heads zeroed",
    yaxis_title="late − early (nats)",
    height=420,
)
show(fig)
together = ablation["induction_heads"]
alone = [e for e in ablation["each"] if [e["block"], e["head"]] in together["heads"]]
st.markdown(
    f"Zeroing the induction heads together removes **{together['removed']:.0%}** of the in-context learning; the "
    f"control head removes {ablation['control']['removed']:.0%}, the previous-token head "
    f"{ablation['previous_token_head']['removed']:.0%} (the induction heads need it)."
    + (
        " One at a time, each induction head removes only "
        + " and ".join(f"{max(e['removed'], 0.0):.0%}" for e in alone)
        + ": they back each other up, which ablating one head at a time (as the paper does) would hide."
        if len(alone) > 1 and max(e["removed"] for e in alone) < together["removed"] / 2
        else ""
    )
)

paper_table(figures["comparison"])
