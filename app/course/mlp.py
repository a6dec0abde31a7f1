"""The lesson on the MLP as keys and values: on the course's model, the neurons that fire most at a
prompt's last position, what each reads and writes, and the prediction with each removed. Computed
by model/course/mlp.py."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.course import course_model, lesson_end, lesson_page, lesson_pass
from glassbox.app.components.course_prompt import fit_note, prompt_box
from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import number, plain, token_labels
from glassbox.model.course.mlp import PROMPT, TOP_NEURONS, mlp_parameters, neuron_table
from glassbox.model.engine import GlassboxError, block_label, check_prompt
from glassbox.model.io.checkpoint import LoadedModel
from glassbox.model.plot.labels import token_text

READ_COLOUR, PROMOTE_COLOUR, SUPPRESS_COLOUR = "#1f6feb", "#2b8a3e", "#c92a2a"


@st.cache_data(max_entries=16, show_spinner="Finding the neurons and removing each…")
def table(prompt: str, _loaded: LoadedModel) -> list[dict]:
    tokens = _loaded.encode(prompt)
    check_prompt(_loaded.cfg, tokens)
    passes = 1 + 2 * TOP_NEURONS * _loaded.cfg.n_layers  # the trace, then each removal with its reference
    with lesson_pass("the MLP's neurons, each removed", _loaded, len(tokens), passes=passes):
        return neuron_table(_loaded, prompt)


def name(row: dict) -> str:
    return f"block {row['block'] + 1} · neuron {row['neuron']}"


def intro(loaded: LoadedModel) -> None:
    cfg = loaded.cfg
    st.markdown(
        "Attention moves information between positions; the MLP works on each position alone. It widens the "
        f"stream's {cfg.d_model} numbers to {cfg.d_ff} **neurons** and back: h = act(x·W_in + b_in), "
        "out = h·W_out + b_out. Read it neuron by neuron. Neuron n has a column of W_in, a **key**: its "
        "pre-activation is the stream's dot product with that column. It has a row of W_out, a **value**: what it "
        "adds to the stream, times how strongly it fired. A neuron that fires adds its value; one that does not "
        "adds (almost) nothing."
    )
    st.caption(
        f"The course's model: d_model = {cfg.d_model}, d_ff = {cfg.d_ff}, activation {cfg.activation}; "
        f"{mlp_parameters(cfg.d_model, cfg.d_ff):,} parameters per MLP (2·{cfg.d_model}·{cfg.d_ff} weights, "
        f"{cfg.d_ff} + {cfg.d_model} biases), {cfg.n_layers} MLPs."
    )


def firing_chart(rows: list[dict]) -> go.Figure:
    labels = [name(r) for r in rows]
    shades = ("#1f6feb", "#74a9f7")  # alternate blocks, so each block's neurons read as a group
    fig = go.Figure(
        go.Bar(
            x=[r["post"] for r in rows],
            y=labels,
            orientation="h",
            marker_color=[shades[r["block"] % 2] for r in rows],
            text=[f"{r['post']:.2f}" for r in rows],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{y}: %{x:.4f}<extra></extra>",
        )
    )
    fig.update_layout(
        height=90 + 22 * len(rows),
        margin=dict(l=10, r=40, t=10, b=10),
        xaxis_title="activation at the last position (after the activation function)",
        yaxis=dict(title="neuron", autorange="reversed", type="category"),
    )
    return fig


def token_bars(loaded: LoadedModel, items: list[dict], key: str, title: str, x_title: str, colour: str) -> go.Figure:
    labels = token_labels([loaded.pieces[x["token"]] for x in items], [x["token"] for x in items])
    fig = go.Figure(
        go.Bar(
            x=[x[key] for x in items],
            y=labels,
            orientation="h",
            marker_color=colour,
            hovertemplate="%{y}: %{x:.4f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=dict(text=title, font=dict(size=13), x=0),
        height=230,
        margin=dict(l=10, r=10, t=40, b=10),
        xaxis_title=x_title,
        yaxis=dict(title="token", autorange="reversed", type="category"),
    )
    return fig


@fragment
def neurons(loaded: LoadedModel) -> None:
    st.subheader("The neurons that fire")
    prompt = prompt_box(loaded, "mlp_prompt", PROMPT)
    try:
        rows = table(prompt, loaded)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    fit_note(loaded, prompt)
    top = rows[0]["removed"]["top"]
    word = token_text(loaded.pieces[top])
    st.markdown(
        f"The model predicts **{plain(word)}** next (p = {rows[0]['removed']['p_before']:.3f}). In each block, "
        f"the {TOP_NEURONS} neurons with the largest activation at the last position:"
    )
    show(firing_chart(rows), config={"displayModeBar": False})
    st.dataframe(
        [
            {
                "neuron": name(r),
                "activation": round(r["post"], 4),
                "reads (tokens alone)": " ".join(token_text(loaded.pieces[x["token"]]) for x in r["reads"][:3]),
                "promotes": " ".join(token_text(loaded.pieces[x["token"]]) for x in r["promotes"][:3]),
                f"p({word}) removed": round(r["removed"]["p_after"], 4),
                "change": round(r["removed"]["p_after"] - r["removed"]["p_before"], 4),
                "KL (nats)": float(f"{r['removed']['kl']:.3g}"),
            }
            for r in rows
        ],
        hide_index=True,
        height=35 * (len(rows) + 1) + 3,
    )  # every row without a scroll bar
    st.caption(
        f"Removed: the neuron's activation set to 0 at every position (the explorer's zero ablation), and the "
        f"model run again. The change is p({plain(word)}) after minus before."
    )
    one_neuron(loaded, rows, word)


def one_neuron(loaded: LoadedModel, rows: list[dict], word: str) -> None:
    st.subheader("One neuron: its key and its value")
    chosen = st.selectbox("Neuron", range(len(rows)), format_func=lambda i: name(rows[i]), key="mlp_neuron")
    row = rows[chosen]
    label = f"{block_label(row['block'])}, neuron {row['neuron']}"
    st.markdown(
        f"**Reads** (its key, W_in's column {row['neuron']}): each token's embedding alone, through "
        f"{block_label(row['block'])}'s ln2 (its γ and β), times the column, plus b_in: the pre-activation "
        "that token would give if the stream held nothing else. Later blocks read a stream that earlier blocks "
        "have written into, so this is an approximation there. **Writes** (its value, W_out's row): the row "
        "through the final norm (centred, times its γ; its scale, the same for every token, left out) and the "
        "unembedding W_U: what one unit of activation adds to each token's logit."
    )
    columns = st.columns(3)
    show(
        token_bars(loaded, row["reads"], "pre", "Reads: the tokens that excite it", "pre-activation (token alone)", READ_COLOUR),
        columns[0],
        config={"displayModeBar": False},
    )
    show(
        token_bars(
            loaded, row["promotes"], "logit", "Writes: the tokens it promotes", "logit per unit activation", PROMOTE_COLOUR
        ),
        columns[1],
        config={"displayModeBar": False},
    )
    show(
        token_bars(loaded, row["suppresses"], "logit", "…and suppresses", "logit per unit activation", SUPPRESS_COLOUR),
        columns[2],
        config={"displayModeBar": False},
    )
    gone = row["removed"]
    after = token_text(loaded.pieces[gone["top_after"]])
    cells = st.columns(3)
    cells[0].metric(f"p({plain(word)}) with it", number(gone["p_before"]))
    cells[1].metric(
        f"p({plain(word)}) without it",
        number(gone["p_after"]),
        delta=number(gone["p_after"] - gone["p_before"]),
        delta_color="off",
    )
    cells[2].metric("top prediction without it", plain(after), help=f"p = {gone['p_top_after']:.4f}")
    st.caption(
        f"{plain(label)}: activation {row['post']:.4f} (pre-activation {row['pre']:.4f}); KL(with ‖ without) = "
        f"{gone['kl']:.3g} nats. One neuron of {loaded.cfg.d_ff} rarely decides a prediction alone: the others "
        "write much of the same."
    )


lesson = lesson_page("mlp")
model = course_model()
intro(model)
neurons(model)
lesson_end(lesson)
