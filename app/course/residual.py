"""The lesson on the residual stream as a bus: on the course's model, the size of every writer's write at
a prompt's last position, a logit split into each writer's direct share (the explorer's direct logit
attribution, summing to the logit), and the logit lens after each block. Computed by
model/course/residual.py."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import log_axis, show
from glassbox.app.components.course import course_model, lesson_end, lesson_page, lesson_pass
from glassbox.app.components.course_prompt import fit_note, prompt_box
from glassbox.app.components.errors import fragment
from glassbox.app.components.labels import number, plain, token_labels
from glassbox.model.course.residual import PROMPT, attribution, lens, writes
from glassbox.model.engine import GlassboxError, check_prompt
from glassbox.model.io.checkpoint import LoadedModel
from glassbox.model.plot.labels import token_text

WRITE_COLOUR, UP_COLOUR, DOWN_COLOUR, LENS_COLOUR = "#495057", "#2b8a3e", "#c92a2a", "#1f6feb"


@st.cache_data(max_entries=16, show_spinner=False)
def bus(prompt: str, _loaded: LoadedModel) -> dict:
    tokens = _loaded.encode(prompt)
    check_prompt(_loaded.cfg, tokens)
    with lesson_pass("the residual stream's writers and the logit lens", _loaded, len(tokens), passes=3):
        return {"tokens": tokens, "writes": writes(_loaded, tokens), "lens": lens(_loaded, tokens)}


@st.cache_data(max_entries=64, show_spinner=False)
def shares(prompt: str, token: int, _loaded: LoadedModel) -> dict:
    tokens = _loaded.encode(prompt)
    with lesson_pass("a direct logit attribution", _loaded, len(tokens)):
        return attribution(_loaded, tokens, token)


def intro(loaded: LoadedModel) -> None:
    st.markdown(
        f"Each position carries one vector of d_model = {loaded.cfg.d_model} numbers from the embeddings to the "
        "unembedding: the **residual stream**. No block replaces it. Each reads it (through a norm), computes, and "
        "**adds** its write: x ← x + attention(ln1(x)), then x ← x + MLP(ln2(x)). Like a bus, every writer puts its "
        "signal on the same wires and every later reader sees the sum of all that was written before it. So the "
        "last stream is exactly the sum of every write, and the stream keeps its width whatever the depth."
    )


def write_chart(seen: dict) -> go.Figure:
    fig = go.Figure(
        go.Bar(
            x=seen["norms"],
            y=seen["labels"],
            orientation="h",
            marker_color=WRITE_COLOUR,
            text=[f"{v:.2f}" for v in seen["norms"]],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{y}: ‖write‖ = %{x:.4f}<extra></extra>",
        )
    )
    fig.update_layout(
        height=100 + 26 * len(seen["labels"]),
        margin=dict(l=10, r=40, t=10, b=10),
        xaxis_title="‖write‖ at the last position",
        yaxis=dict(title="writer", autorange="reversed"),
    )
    return fig


def share_chart(seen: dict, word: str) -> go.Figure:
    values = seen["writer_values"]
    low, high = min(min(values), 0.0), max(max(values), 0.0)
    pad = 0.18 * (high - low) or 1.0  # room for the values written beyond each bar's end
    fig = go.Figure(
        go.Bar(
            x=values,
            y=seen["writers"],
            orientation="h",
            marker_color=[UP_COLOUR if v >= 0 else DOWN_COLOUR for v in values],
            text=[f"{v:+.3f}" for v in values],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{y}: %{x:.5f}<extra></extra>",
        )
    )
    fig.update_layout(
        height=100 + 26 * len(values),
        margin=dict(l=10, r=50, t=10, b=10),
        xaxis=dict(title=f"direct share of the logit of {word}", range=[low - pad, high + pad]),
        yaxis=dict(title="writer", autorange="reversed"),
    )
    return fig


def lens_chart(loaded: LoadedModel, seen: dict, word: str) -> go.Figure:
    fig = go.Figure(
        go.Scatter(
            x=seen["labels"],
            y=seen["p_top"],
            mode="lines+markers",
            marker=dict(size=9),
            line=dict(color=LENS_COLOUR),
            hovertemplate="%{x}: p = %{y:.4f}<extra></extra>",
            name=f"p({word})",
        )
    )
    fig.update_layout(
        height=300,
        margin=dict(l=10, r=10, t=10, b=10),
        xaxis_title="the stream, read after",
        yaxis=log_axis(seen["p_top"], f"p({word}), the final top token"),
    )
    return fig


@fragment
def on_the_model(loaded: LoadedModel) -> None:
    st.subheader("Who wrote what")
    prompt = prompt_box(loaded, "residual_prompt", PROMPT)
    try:
        seen = bus(prompt, loaded)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    fit_note(loaded, prompt)
    w = seen["writes"]
    st.markdown("The size of each write at the last position:")
    show(write_chart(w), config={"displayModeBar": False})
    st.caption(
        f"The last stream (‖·‖ = {w['stream_norm']:.2f}) against the sum of these {len(w['labels'])} writes, entry by entry: "
        f"largest difference {number(w['sum_vs_stream'], 3)} (float32 rounding). Writes are not all "
        "aligned, so their sizes do not add up to the stream's."
    )

    lensed = seen["lens"]
    final_ids, final_probs = lensed["top_ids"][-1], lensed["top_probs"][-1]
    options = token_labels([loaded.pieces[t] for t in final_ids], final_ids)
    st.subheader("Who wrote the prediction")
    st.markdown(
        "The final norm, its scale at this position held fixed, is linear; so is the unembedding. Put each write "
        "through both and it gets its **direct share** of a logit; with the final norm's β as one more writer, the "
        "shares add up to the logit exactly. It is the explorer's direct logit attribution, grouped by writer (each "
        "block's heads and attention bias together)."
    )
    pick = st.selectbox(
        "The token whose logit to split (the model's top 5)",
        range(len(final_ids)),
        format_func=lambda i: f"{options[i]} (p = {final_probs[i]:.3f})",
        key="residual_token",
    )
    token = int(final_ids[pick])
    word = token_text(loaded.pieces[token])
    try:
        split = shares(prompt, token, loaded)
    except GlassboxError as exc:
        st.error(plain(exc))
        return
    show(share_chart(split, word), config={"displayModeBar": False})
    cells = st.columns(3)
    cells[0].metric("sum of the shares", number(split["sum"], 5))
    cells[1].metric(f"the model's logit of {plain(word)}", number(split["logit"], 5))
    cells[2].metric("difference", number(split["difference"], 3))
    with st.expander("Every part: each head, each bias"):
        st.dataframe(
            [
                {"part": p, "engine name": n, "share": round(v, 6)}
                for p, n, v in zip(split["parts"], split["names"], split["values"])
            ],
            hide_index=True,
        )

    st.subheader("The logit lens: reading the bus early")
    st.markdown(
        "Apply the final norm and the unembedding to the stream after each block, as if the model stopped there: "
        "what would it predict? The last row is the model's own prediction."
    )
    show(lens_chart(loaded, lensed, token_text(loaded.pieces[lensed["top"]])), config={"displayModeBar": False})
    st.dataframe(
        [
            {
                "the stream after": label,
                **{f"top {i + 1}": f"{token_text(loaded.pieces[t])} ({p:.3f})" for i, (t, p) in enumerate(zip(ids, probs))},
            }
            for label, ids, probs in zip(lensed["labels"], lensed["top_ids"], lensed["top_probs"])
        ],
        hide_index=True,
    )
    note = ""
    if lensed["top_ids"][0][0] == seen["tokens"][-1] and loaded.cfg.tie_embeddings:
        note = (
            f" Read at the embeddings, the stream predicts its own token, {plain(token_text(loaded.pieces[seen['tokens'][-1]]))}: "
            "this model's unembedding is its embedding matrix transposed, and a row's dot product with itself is large."
        )
    st.caption("Each cell: a token and its probability at that point, at the prompt's last position." + note)


lesson = lesson_page("residual")
model = course_model()
intro(model)
on_the_model(model)
lesson_end(lesson)
