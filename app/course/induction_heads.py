"""The lesson on induction heads: a random sequence repeated once through the induction micro-model, the
previous-token head's and the induction head's patterns, each position's loss, every head's scores,
and the induction score at each checkpoint saved in training. Computed by model/course/induction_heads.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from glassbox.app.components.charts import show
from glassbox.app.components.course import lesson_end, lesson_page, lesson_pass
from glassbox.app.components.labels import plain
from glassbox.app.resources import shared_model
from glassbox.model.course.induction_heads import (
    LENGTH,
    MODEL,
    Repeat,
    composition,
    first_repeat,
    repeated,
    split_losses,
    stripe_share,
)
from glassbox.model.engine import block_label, head_label
from glassbox.model.micro import induction
from glassbox.model.micro.common import read_curve
from glassbox.model.plot.heatmap import heatmap_figure
from glassbox.model.plot.labels import position_labels, token_text

FIRST_COLOUR, SECOND_COLOUR, LOSS_COLOUR = "#868e96", "#1f6feb", "#d9480f"
ODD_COLOUR = "#f08c00"  # the repeat's first position: a repeat, yet not copied
SMOOTH = 25


@st.cache_data(max_entries=32, show_spinner=False)
def sequence(seed: int, length: int, _loaded) -> Repeat:
    with lesson_pass("a repeated random sequence", _loaded, 2 * length):
        return repeated(_loaded, seed, length)


@st.cache_data(max_entries=2, show_spinner="Scoring every head, at every checkpoint…")
def scores(_loaded) -> dict:
    return induction.figures(_loaded)


def pattern_grid(pattern: np.ndarray, labels: list[str], title: str, marks: list[tuple[int, int]]) -> go.Figure:
    """A head's query × key weights, the (query, key) cells of ``marks`` outlined."""
    fig = heatmap_figure(
        pattern,
        labels,
        labels,
        title,
        row_title="query (the token that looks)",
        col_title="key (the token looked at)",
        colour="sequential",
        zmax=1.0,
        fixed=True,
        colorbar="weight",
        marks=marks,
        hover="query %{y}<br>key %{x}<br>%{z:.4f}<extra></extra>",
    )
    fig.update_layout(height=520, margin=dict(l=10, r=10, t=40, b=10))
    return fig


def the_stripe(loaded) -> None:
    st.subheader("A random sequence, twice")
    st.markdown(
        f"Below, {LENGTH} random syllables are followed by the same {LENGTH} again. Nothing in the first copy can be "
        "predicted: each token is a random draw from 64. In the second copy the tokens can be (all but its first "
        "two: see the losses below): find where the "
        "current token occurred before, and copy the token that followed it. That lookup is the **induction head** "
        "(block 2). It works because the **previous-token head** (block 1) has written into each position which "
        "token came just before it, so the induction head's query (“who was preceded by my token?”) can match a "
        "key. Gold outlines mark where each head should look: the token just before (left), and n − 1 positions "
        "back, one after the earlier copy (right)."
    )
    seed = st.number_input(
        "Random sequence (seed)",
        0,
        10_000,
        0,
        key="induction_seed",
        help="Another seed draws other syllables; the mechanism is the same for any.",
    )
    seen = sequence(int(seed), LENGTH, loaded)
    n = LENGTH
    labels = position_labels(loaded.pieces, seen.tokens)
    figure = scores(loaded)
    prev, ind = figure["previous_token_head"], figure["induction_head"]
    left, right = st.columns(2)
    show(
        pattern_grid(
            seen.patterns[prev["block"], prev["head"]],
            labels,
            f"Previous-token head: {block_label(prev['block'])}, head {prev['head'] + 1}",
            [(t, t - 1) for t in range(1, 2 * n)],
        ),
        left,
        config={"displayModeBar": False},
    )
    show(
        pattern_grid(
            seen.patterns[ind["block"], ind["head"]],
            labels,
            f"Induction head: {block_label(ind['block'])}, head {ind['head'] + 1}",
            [(t, t - n + 1) for t in range(n, 2 * n)],
        ),
        right,
        config={"displayModeBar": False},
    )
    share = stripe_share(seen.patterns[ind["block"], ind["head"]], n)
    st.markdown(
        f"On this sequence the induction head puts **{100 * share:.1f}%** of each second-copy token's weight on the outlined key."
    )
    composed(seen, loaded, n, prev, ind)
    losses(seen, loaded, n, prev, ind)


def composition_figure(seen: Repeat, loaded, n: int, query: int, prev: dict, ind: dict) -> go.Figure:
    """Four positions of the sequence (the earlier occurrence, the one after it, the query, the
    token it predicts) and the two heads' arrows between them, with their traced weights."""
    c = composition(seen, n, query, prev, ind)
    word = lambda t: token_text(loaded.pieces[t])  # noqa: E731
    boxes = [
        (0.0, c["source"], c["query_token"]),
        (1.0, c["key"], c["copied_token"]),
        (3.0, c["query"], c["query_token"]),
        (4.0, c["query"] + 1, seen.tokens[c["query"] + 1]),
    ]
    fig = go.Figure()
    for x, position, token in boxes:
        fig.add_shape(
            type="rect",
            x0=x - 0.38,
            x1=x + 0.38,
            y0=-0.3,
            y1=0.3,
            line=dict(color="#495057"),
            fillcolor="#f1f3f5" if x < 4 else "#e7f5ff",
        )
        fig.add_annotation(
            x=x, y=0, text=f"<b>{plain(word(token))}</b><br>position {position}", showarrow=False, font=dict(size=13)
        )
    fig.add_annotation(x=2.0, y=0, text="…", showarrow=False, font=dict(size=18))
    # block 1: the previous-token head, from the key position back to the one before it (above the boxes)
    fig.add_annotation(
        x=0.05,
        y=0.32,
        ax=0.95,
        ay=0.32,
        xref="x",
        yref="y",
        axref="x",
        ayref="y",
        text="",
        showarrow=True,
        arrowhead=3,
        arrowwidth=2,
        arrowcolor=FIRST_COLOUR,
    )
    fig.add_annotation(
        x=-0.55,
        y=0.42,
        showarrow=False,
        align="left",
        xanchor="left",
        yanchor="bottom",
        font=dict(color="#495057", size=12),
        text=f"① {block_label(prev['block'])}, {head_label(prev['head'])}: previous-token head<br>"
        f"position {c['key']} looks back (weight {c['previous_weight']:.2f}) and writes<br>"
        f"“{plain(word(c['query_token']))} came before me” into its stream",
    )
    # block 2: the induction head, from the query to the key whose stream says so (below the boxes)
    fig.add_annotation(
        x=1.05,
        y=-0.36,
        ax=2.95,
        ay=-0.36,
        xref="x",
        yref="y",
        axref="x",
        ayref="y",
        text="",
        showarrow=True,
        arrowhead=3,
        arrowwidth=3,
        arrowcolor=SECOND_COLOUR,
    )
    fig.add_annotation(
        x=2.0,
        y=-0.45,
        showarrow=False,
        align="center",
        yanchor="top",
        font=dict(color=SECOND_COLOUR, size=12),
        text=f"② {block_label(ind['block'])}, {head_label(ind['head'])}: induction head<br>"
        f"the query of “{plain(word(c['query_token']))}” matches that key (weight "
        f"{c['induction_weight']:.2f}): ① built the key it reads",
    )
    fig.add_annotation(
        x=3.95,
        y=0.32,
        ax=3.05,
        ay=0.32,
        xref="x",
        yref="y",
        axref="x",
        ayref="y",
        text="",
        showarrow=True,
        arrowhead=3,
        arrowwidth=2,
        arrowcolor=LOSS_COLOUR,
    )
    fig.add_annotation(
        x=3.5,
        y=0.42,
        showarrow=False,
        align="center",
        yanchor="bottom",
        font=dict(color=LOSS_COLOUR, size=12),
        text=f"③ it copies “{plain(word(c['copied_token']))}”<br>from position {c['key']}: p = {c['p_next']:.3f}",
    )
    fig.update_layout(
        title=dict(text="<b>How the two heads compose</b>", x=0),
        height=300,
        plot_bgcolor="white",
        margin=dict(l=10, r=10, t=40, b=10),
        showlegend=False,
        xaxis=dict(visible=False, range=[-0.6, 4.6], fixedrange=True),
        yaxis=dict(visible=False, range=[-0.95, 0.95], fixedrange=True),
    )
    return fig


def composed(seen: Repeat, loaded, n: int, prev: dict, ind: dict) -> None:
    query = st.slider(
        "The query's position (in the repeat)",
        n + 1,
        2 * n - 2,
        n + 3,
        key="induction_query",
        help="A position of the second copy; the picture follows its token back to the first copy.",
    )
    show(composition_figure(seen, loaded, n, int(query), prev, ind), config={"displayModeBar": False})
    st.caption(
        "The induction head's key at a position is computed from that position's stream, and block 1's "
        "previous-token head has added the token before it there: that is how the heads compose (K-composition). "
        "Weights and p are traced from the model on this sequence."
    )


def losses(seen: Repeat, loaded, n: int, prev: dict, ind: dict) -> None:
    predicted = position_labels(loaded.pieces, seen.tokens[1:], first=1)
    unseen, first, repeat = split_losses(seen, n)
    fig = go.Figure()
    fig.add_bar(x=predicted[:n], y=unseen, name="nothing to copy yet", marker_color=FIRST_COLOUR)
    fig.add_bar(x=predicted[n : n + 1], y=first, name="the repeat's first: not copied", marker_color=ODD_COLOUR)
    fig.add_bar(x=predicted[n + 1 :], y=repeat, name="a repeat: copyable", marker_color=SECOND_COLOUR)
    fig.add_hline(
        y=float(np.log(loaded.cfg.vocab_size)),
        line=dict(dash="dot", color="#495057"),
        annotation_text=f"ln {loaded.cfg.vocab_size}: a uniform guess",
        annotation_position="top right",
    )
    fig.update_layout(
        title="<b>Each position's loss on the token it predicts</b>",
        height=330,
        xaxis_title="the token predicted (position:syllable)",
        yaxis_title="loss (nats)",
        margin=dict(l=10, r=10, t=76, b=10),  # the title, then the legend, then the plot
        legend=dict(orientation="h", x=0, y=1.02, xanchor="left", yanchor="bottom"),
    )
    show(fig, config={"displayModeBar": False})
    cells = st.columns(3)
    cells[0].metric("Mean loss, nothing to copy", f"{np.mean(unseen):.3f} nats")
    cells[1].metric(f"Mean loss, copyable (tokens {n + 2}–{2 * n - 1})", f"{np.mean(repeat):.3f} nats")
    cells[2].metric(f"Loss on token {n + 1}, the repeat's second", f"{first[0]:.3f} nats")
    why = first_repeat(seen, n, prev, ind)
    st.caption(
        "The first copy's tokens, and the second copy's first token (predicted from the end of the first copy, before "
        f"anything has repeated), can only be guessed. So can the next one, token {n + 1} (predicted at position {n}), "
        f"although it is a repeat: its loss, {why['loss']:.2f} nats, is near a uniform guess (ln {loaded.cfg.vocab_size} = "
        f"{np.log(loaded.cfg.vocab_size):.2f}) on every seed. Its token's earlier occurrence is position 0, which has "
        "no token before it: the previous-token head there can only look at itself (weight "
        f"{why['previous_head_at_0_on_itself']:.2f}), so position 0 says “my token came before me” as position 1 "
        f"does, and the induction head splits its weight between them ({why['induction_weight_on_0']:.2f} on 0, "
        f"{why['induction_weight_on_1']:.2f} on 1). The copyable mean counts the later positions only."
    )


def every_head(loaded) -> None:
    st.subheader("Every head's scores")
    figure = scores(loaded)
    rows = [block_label(b) for b in range(loaded.cfg.n_layers)]
    columns = [f"head {h + 1}" for h in range(loaded.cfg.n_heads)]
    left, right = st.columns(2)
    left.markdown("**Induction score**")
    left.table(pd.DataFrame(figure["induction_scores"], index=rows, columns=columns).map(lambda v: f"{v:.4f}"))
    right.markdown("**Previous-token score**")
    right.table(pd.DataFrame(figure["previous_token_scores"], index=rows, columns=columns).map(lambda v: f"{v:.4f}"))
    st.caption(
        f"Mean attention on {induction.SCORED_SEQUENCES} held-out random sequences of {induction.HALF} "
        "syllables repeated once: from each token of the repeat to the token after its earlier occurrence "
        "(induction), and from each token to the one before it (previous token). The same scores as the "
        "explorer's Circuits view."
    )
    over_training(loaded, figure)


def over_training(loaded, figure: dict) -> None:
    st.subheader("When it forms")
    curve = read_curve(loaded.path)
    fig = go.Figure()
    fig.add_scatter(
        x=curve["score_step"],
        y=curve["induction_score"],
        name="measured during training",
        mode="lines",
        line=dict(color=FIRST_COLOUR, width=1),
    )
    points = figure["over_training"]
    fig.add_scatter(
        x=[p["step"] for p in points],
        y=[p["induction_score"] for p in points],
        mode="markers",
        name="recomputed now from the saved checkpoint",
        marker=dict(color=SECOND_COLOUR, size=9),
    )
    loss = np.convolve(curve["loss"], np.ones(SMOOTH) / SMOOTH, mode="valid")  # a running mean: one batch is noisy
    fig.add_scatter(
        x=np.arange(SMOOTH, len(curve["loss"]) + 1),
        y=loss,
        name=f"training loss (mean of {SMOOTH} batches)",
        mode="lines",
        yaxis="y2",
        line=dict(color=LOSS_COLOUR, width=1, dash="dot"),
    )
    fig.update_layout(
        title="<b>Block 2's best induction score over training</b>",
        height=360,
        xaxis_title="training step",
        yaxis_title="induction score",
        yaxis_range=[0, 1],
        yaxis2=dict(title="loss (nats)", overlaying="y", side="right", rangemode="tozero", showgrid=False, dtick=1),
        margin=dict(l=10, r=10, t=76, b=10),  # the title, then the legend, then the plot
        legend=dict(orientation="h", x=0, y=1.02, xanchor="left", yanchor="bottom"),
    )
    show(fig, config={"displayModeBar": False})
    before = next(p for p in points if p["induction_score"] >= 0.5)
    st.markdown(
        f"For the first steps the score stays near chance; then within a few hundred steps it passes 0.5 (by step "
        f"{before['step']}) and climbs to {points[-1]['induction_score']:.3f}. The loss falls in the same steps: this "
        "sudden jump is the phase change in which induction heads form. `glassbox train-micro induction` retrains "
        f"the model and saves its {len(points)} checkpoints again."
    )


lesson = lesson_page("induction")
loaded = shared_model(MODEL)
st.markdown(
    "A model trained here on random syllables, in which after a short random lead a random span repeats to the end "
    f"({plain(loaded.about.get('card', {}).get('data', ''))}). Its two blocks have two attention heads each and no "
    "MLP. The only way to predict a repeat is to find the earlier copy in the prompt: this is in-context learning at "
    "its smallest."
)
the_stripe(loaded)
every_head(loaded)
lesson_end(
    lesson,
    (
        ("The induction micro-model in the Circuits view", MODEL, "ba ko mi to ze li ba ko mi to ze li"),
        ("The default story model in the Circuits view", "default", "the cat sat on the"),
    ),
)
